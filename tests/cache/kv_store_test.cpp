// KvStore unit tests with exact expectations: page ids, reference counts by kind, LRU order, block
// tables after each operation, and error paths that must leave the store unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cache/store_fixture.h"
#include "test_util.h"

namespace minimakv::cache {
namespace {

using testing::random_rows;
using testing::small_config;

std::array<uint32_t, 4> R(uint32_t req, uint32_t cache = 0, uint32_t reader = 0, uint32_t conv = 0) {
  return {req, cache, reader, conv};
}

// The tier-to-format rule, every case written out by hand (the paper's: Recent and Anchor pages and
// protected layers FP8, Stale pages TQ3, or TQ4 in the layers chosen for it; the controls keep one format).
TEST(StorageFormat, EveryModeTierAndLayerKind) {
  for (const Tier t : {Tier::kRecent, Tier::kAnchor, Tier::kStale})
    for (const PageFormat layer : {PageFormat::kTq3, PageFormat::kTq4, PageFormat::kFp8}) {
      EXPECT_EQ(storage_format(KvMode::kBf16, t, layer), PageFormat::kBf16);
      EXPECT_EQ(storage_format(KvMode::kFp8, t, layer), PageFormat::kFp8);
      EXPECT_EQ(storage_format(KvMode::kMinima, t, layer), t == Tier::kStale ? layer : PageFormat::kFp8);
    }
  EXPECT_EQ(storage_format(KvMode::kMinima, Tier::kStale), PageFormat::kTq3);
  EXPECT_EQ(append_format(KvMode::kBf16), PageFormat::kBf16);
  EXPECT_EQ(append_format(KvMode::kFp8), PageFormat::kFp8);
  EXPECT_EQ(append_format(KvMode::kMinima), PageFormat::kFp8);
}

TEST(StorageFormat, LayerStaleFormatsFromTheConfig) {
  StoreConfig c = small_config();
  c.layers = 4;
  c.protected_layers = {1};
  c.tq4_layers = {0, 3};
  EXPECT_EQ(c.stale_formats(),
            (std::vector<PageFormat>{PageFormat::kTq4, PageFormat::kFp8, PageFormat::kTq3, PageFormat::kTq4}));
  c.tq4_layers = {1};
  EXPECT_THROW(c.stale_formats(), InvalidArgument);
  c.tq4_layers = {4};
  EXPECT_THROW(c.stale_formats(), InvalidArgument);
  c.tq4_layers = {};
  c.protected_layers = {-1};
  EXPECT_THROW(c.stale_formats(), InvalidArgument);
}

TEST(KvStore, AppendAllocatesPagesInOrderAndSealsFullOnes) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId s = st.create_sequence();
  auto rows = random_rows(rng, st.config(), 6);
  st.append(s, rows.ids, rows.k, rows.v);
  const auto t = st.block_table(s);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 1}, {PageFormat::kFp8, 2}}));
  EXPECT_EQ(t[1].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 3}, {PageFormat::kFp8, 4}}));
  EXPECT_TRUE(t[0].sealed);
  EXPECT_EQ(t[0].filled, 4u);
  EXPECT_FALSE(t[1].sealed);
  EXPECT_EQ(t[1].filled, 2u);
  EXPECT_NE(t[0].hash, 0u);
  EXPECT_EQ(t[1].hash, 0u);
  // the full page is held by the request and by the prefix cache
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(1, 1));
  EXPECT_EQ(st.refs({PageFormat::kFp8, 3}), R(1, 0));
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 12u);
  EXPECT_EQ(st.length(s), 6u);
  st.check_invariants();
}

TEST(KvStore, FinishKeepsCachedPagesAndLruOrderFollowsFinishes) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId a = st.create_sequence(), b = st.create_sequence();
  auto ra = random_rows(rng, st.config(), 4, 100), rb = random_rows(rng, st.config(), 4, 200);
  st.append(a, ra.ids, ra.k, ra.v);
  st.append(b, rb.ids, rb.k, rb.v);
  const uint64_t ha = st.block_table(a)[0].hash, hb = st.block_table(b)[0].hash;
  EXPECT_TRUE(st.lru_snapshot().empty());
  st.finish(b);
  st.finish(a);
  EXPECT_EQ(st.lru_snapshot(), (std::vector<std::pair<uint64_t, Tier>>{{hb, Tier::kRecent}, {ha, Tier::kRecent}}));
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(0, 1));
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 12u);
  // a hit removes the variant from the LRU (O(1)) and installs the same physical pages
  auto [c, covered] = st.create_sequence_with_prefix(ra.ids);
  EXPECT_EQ(covered, 4u);
  EXPECT_EQ(st.block_table(c)[0].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 1}, {PageFormat::kFp8, 2}}));
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(1, 1));
  EXPECT_EQ(st.lru_snapshot(), (std::vector<std::pair<uint64_t, Tier>>{{hb, Tier::kRecent}}));
  // eviction drops the cache reference: b's pages (3, 4) return to the free list, a's stay
  EXPECT_EQ(st.evict_cached(10), 1u);
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_list_snapshot().front(), 4u);
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 14u);
  st.check_invariants();
}

TEST(KvStore, PrefixMatchIsTheLongestRunOfFullPages) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId a = st.create_sequence();
  auto r = random_rows(rng, st.config(), 10, 7);
  st.append(a, r.ids, r.k, r.v);
  EXPECT_EQ(st.match_prefix(r.ids), 8u);
  std::vector<int32_t> other = r.ids;
  other[5] = 999;  // second page differs: chained hashes stop after the first
  EXPECT_EQ(st.match_prefix(other), 4u);
  other[0] = 998;
  EXPECT_EQ(st.match_prefix(other), 0u);
  EXPECT_EQ(st.match_prefix(std::span<const int32_t>(r.ids).first(3)), 0u);
}

TEST(KvStore, DemoteIsCopyBeforePublishAndReadersKeepTheSource) {
  auto rng = testing::rng_for_test();
  auto cfg = small_config();
  cfg.protected_layers = {0};
  KvStore st(cfg);
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, cfg, 8);
  st.append(s, r.ids, r.k, r.v);
  {
    auto pin = st.pin(s);
    EXPECT_EQ(st.refs({PageFormat::kFp8, 2}), R(1, 1, 1));
    const auto res = st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}});
    EXPECT_EQ(res.converted, 1u);
    const auto t = st.block_table(s);
    EXPECT_EQ(t[0].tier, Tier::kStale);
    // protected layer 0 keeps its FP8 page; layer 1 now points to TQ3 page 1
    EXPECT_EQ(t[0].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 1}, {PageFormat::kTq3, 1}}));
    // the old FP8 page of layer 1: the request moved away, the FP8 cache copy and the reader remain
    EXPECT_EQ(st.refs({PageFormat::kFp8, 2}), R(0, 1, 1));
    EXPECT_EQ(st.refs({PageFormat::kTq3, 1}), R(1, 1));  // bound as the Stale copy of the hash
    // the pin still reads the bytes it pinned
    EXPECT_EQ(pin.rows()[0][1], (PageEntry{PageFormat::kFp8, 2}));
    st.check_invariants();
  }
  EXPECT_EQ(st.refs({PageFormat::kFp8, 2}), R(0, 1, 0));
  st.set_cache_quota(PageFormat::kFp8, 0);  // pressure: the FP8 cache copy goes, page 2 is freed
  EXPECT_FALSE(st.pool(PageFormat::kFp8).meta(2).in_use);
  // the protected layer's page is part of the (held) Stale copy as well, so it keeps that cache reference
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(1, 1));
  st.check_invariants();
}

// A TQ4 layer's Stale page is TQ4, decodes close to what was written (closer than TQ3's), and promotes
// back to FP8; the audit checks every row against the per-layer rule.
TEST(KvStore, Tq4LayersConvertToTq4AndBack) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto cfg = small_config();
  cfg.tq4_layers = {1};
  cfg.pages_of(PageFormat::kTq4) = 8;
  cfg.prefix_caching = false;  // so that promotion converts instead of rebinding to the cached FP8 copy
  cfg.tokens_per_page = 32;    // 64 vectors a layer-page: enough for the error bounds below
  cfg.kv_heads = 2;
  KvStore st(cfg);
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, cfg, 40);
  st.append(s, r.ids, r.k, r.v);
  EXPECT_EQ(st.stale_format(0), PageFormat::kTq3);
  EXPECT_EQ(st.stale_format(1), PageFormat::kTq4);
  EXPECT_EQ(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}}).converted, 1u);
  const auto t = st.block_table(s);
  EXPECT_EQ(t[0].layers[0].format, PageFormat::kTq3);
  EXPECT_EQ(t[0].layers[1].format, PageFormat::kTq4);
  st.check_invariants();
  // decoded error of each layer's Stale page against the rows written
  const auto& g = st.geometry();
  std::vector<float> k(g.head_dim), v(g.head_dim);
  double err[2] = {0, 0}, energy = 0;
  for (int l = 0; l < 2; ++l)
    for (int tok = 0; tok < g.tokens_per_page; ++tok)
      for (int h = 0; h < g.kv_heads; ++h) {
        const PageEntry e = t[0].layers[l];
        codec::read_token_head(st.host_storage()->bytes(e), st.pool(e.format).layout(), tok, h,
                               st.host_storage()->rotations(l), k, v);
        const size_t off = ((static_cast<size_t>(tok) * cfg.layers + l) * g.kv_heads + h) * g.head_dim;
        for (int i = 0; i < g.head_dim; ++i) {
          err[l] += std::pow(k[i] - r.k[off + i], 2);
          if (l == 0) energy += r.k[off + i] * r.k[off + i];
        }
      }
  EXPECT_LT(err[1], 0.5 * err[0]) << "TQ4 keys are closer than TQ3's";
  EXPECT_LT(err[1] / energy, 0.015);
  EXPECT_EQ(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kRecent}}).promoted, 1u);
  EXPECT_EQ(st.block_table(s)[0].layers[1].format, PageFormat::kFp8);
  st.check_invariants();
  // a plan that needs TQ4 pages fails whole when the TQ4 pool is empty
  auto none = cfg;
  none.pages_of(PageFormat::kTq4) = 0;
  KvStore empty(none);
  const SeqId s2 = empty.create_sequence();
  empty.append(s2, r.ids, r.k, r.v);
  const auto before = empty.block_table(s2)[0];
  EXPECT_THROW(empty.apply(std::vector<KvStore::Transition>{{s2, 0, Tier::kStale}}), OutOfCapacity);
  EXPECT_EQ(empty.block_table(s2)[0].layers, before.layers);
  EXPECT_EQ(empty.block_table(s2)[0].tier, before.tier);
  empty.check_invariants();
}

TEST(KvStore, SharedPageDemotionRebindsInsteadOfConvertingTwice) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId a = st.create_sequence();
  auto r = random_rows(rng, st.config(), 5);
  st.append(a, r.ids, r.k, r.v);
  auto [b, covered] = st.create_sequence_with_prefix(r.ids);
  ASSERT_EQ(covered, 4u);
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(2, 1));
  auto res = st.apply(std::vector<KvStore::Transition>{{a, 0, Tier::kStale}});
  EXPECT_EQ(res.converted, 1u);
  EXPECT_EQ(st.block_table(b)[0].tier, Tier::kRecent);  // per-holder: b is untouched
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(1, 1));
  res = st.apply(std::vector<KvStore::Transition>{{b, 0, Tier::kStale}});
  EXPECT_EQ(res.rebound, 1u);
  EXPECT_EQ(res.converted, 0u);
  EXPECT_EQ(st.block_table(a)[0].layers, st.block_table(b)[0].layers);
  EXPECT_EQ(st.refs({PageFormat::kTq3, 1}), R(2, 1));
  // promotion of a rebinds to the cached FP8 copy (still alive: cache reference)
  res = st.apply(std::vector<KvStore::Transition>{{a, 0, Tier::kAnchor}});
  EXPECT_EQ(res.rebound, 1u);
  EXPECT_EQ(st.block_table(a)[0].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 1}, {PageFormat::kFp8, 2}}));
  st.check_invariants();
}

TEST(KvStore, PromoteReconstructsWhenNoCopyIsCached) {
  auto rng = testing::rng_for_test();
  auto cfg = small_config();
  cfg.prefix_caching = false;
  KvStore st(cfg);
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, cfg, 4);
  st.append(s, r.ids, r.k, r.v);
  EXPECT_EQ(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}}).converted, 1u);
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 16u);  // FP8 source freed right away
  EXPECT_EQ(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kRecent}}).promoted, 1u);
  EXPECT_EQ(st.pool(PageFormat::kTq3).free_pages(), 16u);
  EXPECT_EQ(st.block_table(s)[0].layers[0].format, PageFormat::kFp8);
  st.check_invariants();
}

TEST(KvStore, ForkSharesFullPagesAndCopiesThePartialOne) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId a = st.create_sequence();
  auto r = random_rows(rng, st.config(), 6);
  st.append(a, r.ids, r.k, r.v);
  const SeqId b = st.fork(a);
  const auto ta = st.block_table(a), tb = st.block_table(b);
  EXPECT_EQ(ta[0].layers, tb[0].layers);
  EXPECT_EQ(tb[1].layers, (std::vector<PageEntry>{{PageFormat::kFp8, 5}, {PageFormat::kFp8, 6}}));
  EXPECT_EQ(st.refs({PageFormat::kFp8, 1}), R(2, 1));
  EXPECT_EQ(st.refs({PageFormat::kFp8, 3}), R(1));
  for (int l = 0; l < 2; ++l) {
    auto pa = st.host_storage()->bytes(ta[1].layers[l]), pb = st.host_storage()->bytes(tb[1].layers[l]);
    EXPECT_TRUE(std::equal(pa.begin(), pa.end(), pb.begin()));
  }
  auto more = random_rows(rng, st.config(), 1, 50);
  st.append(b, more.ids, more.k, more.v);  // writes b's private copy only
  EXPECT_EQ(st.block_table(a)[1].filled, 2u);
  EXPECT_EQ(st.block_table(b)[1].filled, 3u);
  st.check_invariants();
}

TEST(KvStore, ErrorsLeaveTheStoreUnchanged) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config(4, 2));
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, st.config(), 4);
  st.append(s, r.ids, r.k, r.v);
  const auto before = st.block_table(s);
  auto big = random_rows(rng, st.config(), 9);
  EXPECT_THROW(st.append(s, big.ids, big.k, big.v), OutOfCapacity);
  EXPECT_EQ(st.block_table(s).size(), before.size());
  EXPECT_EQ(st.length(s), 4u);
  EXPECT_THROW(st.append(s, big.ids, r.k, r.v), InvalidArgument);      // size mismatch
  EXPECT_THROW(st.append(999, r.ids, r.k, r.v), InvalidArgument);      // unknown sequence
  EXPECT_THROW(st.apply(std::vector<KvStore::Transition>{{s, 3, Tier::kStale}}), InvalidArgument);
  EXPECT_THROW(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}, {s, 0, Tier::kAnchor}}),
               InvalidArgument);
  st.finish(s);
  EXPECT_THROW(st.finish(s), InvalidArgument);                          // double finish
  EXPECT_THROW(st.append(s, r.ids, r.k, r.v), InvalidArgument);        // append after finish
  EXPECT_THROW(st.pin(s), InvalidArgument);
  EXPECT_EQ(st.evict_cached(10), 1u);
  EXPECT_EQ(st.match_prefix(r.ids), 0u);                                // lookup after eviction: a miss
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 4u);
  st.check_invariants();
}

TEST(KvStore, OutOfCapacityAppendEvictsOnlyWhenItSucceeds) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config(4, 2));
  const SeqId a = st.create_sequence();
  auto r = random_rows(rng, st.config(), 4);
  st.append(a, r.ids, r.k, r.v);
  st.finish(a);  // pages 1, 2 stay cached
  const SeqId b = st.create_sequence();
  auto r2 = random_rows(rng, st.config(), 8, 40);
  st.append(b, r2.ids, r2.k, r2.v);  // needs 4 pages: evicts the cached pair
  EXPECT_EQ(st.lru_snapshot().size(), 0u);
  EXPECT_EQ(st.pool(PageFormat::kFp8).free_pages(), 0u);
  st.check_invariants();
}

TEST(KvStore, AccountingReconcilesToTheByte) {
  auto rng = testing::rng_for_test();
  KvStore st(small_config());
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, st.config(), 10);
  st.append(s, r.ids, r.k, r.v);
  st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}, {s, 1, Tier::kAnchor}});
  const Accounting a = st.accounting();
  EXPECT_TRUE(a.reconciled);
  const size_t fp8 = st.pool(PageFormat::kFp8).page_bytes(), tq3 = st.pool(PageFormat::kTq3).page_bytes();
  EXPECT_EQ(a.tier_bytes[static_cast<int>(Tier::kStale)], 2 * tq3);
  EXPECT_EQ(a.tier_bytes[static_cast<int>(Tier::kAnchor)], 2 * fp8);
  EXPECT_EQ(a.tier_bytes[static_cast<int>(Tier::kRecent)], 2 * fp8);
  EXPECT_EQ(a.formats[static_cast<int>(PageFormat::kFp8)].cache_only_pages, 2u);  // FP8 copy of page 0
  EXPECT_EQ(a.live_tokens, 10u);
  EXPECT_EQ(a.used_bytes(), 6 * fp8 + 2 * tq3);
  EXPECT_DOUBLE_EQ(a.bytes_per_live_token(), static_cast<double>(4 * fp8 + 2 * tq3 + a.block_table_bytes) / 10.0);
}

TEST(KvStore, ModesChooseTheAppendFormat) {
  auto rng = testing::rng_for_test();
  auto cfg = small_config(0, 0, 8);
  cfg.mode = KvMode::kBf16;
  KvStore st(cfg);
  const SeqId s = st.create_sequence();
  auto r = random_rows(rng, cfg, 4);
  st.append(s, r.ids, r.k, r.v);
  EXPECT_EQ(st.block_table(s)[0].layers[0].format, PageFormat::kBf16);
  EXPECT_THROW(st.apply(std::vector<KvStore::Transition>{{s, 0, Tier::kStale}}), InvalidArgument);
  st.check_invariants();
}

}  // namespace
}  // namespace minimakv::cache

namespace minimakv::cache {
namespace {

// One layer's K/V of rows r ([n][layers][kv_heads][head_dim]) as [n][kv_heads][head_dim].
std::vector<float> layer_rows(const std::vector<float>& all, const StoreConfig& c, size_t n, int layer) {
  const size_t per_layer = static_cast<size_t>(c.kv_heads) * c.head_dim;
  std::vector<float> out(n * per_layer);
  for (size_t t = 0; t < n; ++t)
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>((t * c.layers + layer) * per_layer), per_layer,
                out.begin() + static_cast<std::ptrdiff_t>(t * per_layer));
  return out;
}

TEST(ForwardStep, LayerByLayerAppendSealsOnlyAtCommit) {
  auto rng = testing::rng_for_test();
  KvStore st(testing::small_config());
  const SeqId s = st.create_sequence();
  auto r = testing::random_rows(rng, st.config(), 6);
  const KvStore::AppendChunk chunk{s, r.ids};
  const auto one = std::span<const KvStore::AppendChunk>(&chunk, 1);
  ForwardStep step = st.begin_step(one);
  EXPECT_EQ(st.length(s), 6u);
  EXPECT_FALSE(st.block_table(s)[0].sealed);  // full but still being written
  EXPECT_THROW((void)st.begin_step(one), InvalidArgument);
  EXPECT_THROW(st.fork(s), InvalidArgument);
  const auto k0 = layer_rows(r.k, st.config(), 6, 0), v0 = layer_rows(r.v, st.config(), 6, 0);
  const auto k1 = layer_rows(r.k, st.config(), 6, 1), v1 = layer_rows(r.v, st.config(), 6, 1);
  const auto slots1 = step.write_slots(0, 1);  // any order
  ASSERT_EQ(slots1.size(), 6u);
  EXPECT_EQ(slots1[5].token, 1u);  // position 5 in pages of 4
  EXPECT_EQ(slots1[5].page, st.block_table(s)[1].layers[1]);
  st.host_storage()->write_tokens(slots1, k1, v1);
  EXPECT_THROW((void)step.write_slots(0, 1), InvalidArgument);  // handed out once
  EXPECT_THROW((void)step.write_slots(1, 0), InvalidArgument);  // no sequence 1
  EXPECT_THROW((void)step.write_slots(0, 2), InvalidArgument);  // no layer 2
  EXPECT_THROW(step.commit(), InvalidArgument);                 // layer 0 missing
  const auto slots0 = step.write_slots(0, 0);
  EXPECT_THROW(st.host_storage()->write_tokens(slots0, k0, std::span<const float>(v0).first(3)), InvalidArgument);
  st.host_storage()->write_tokens(slots0, k0, v0);
  {
    const PagedView view = step.view(0, 1);  // the chunk's own tokens are visible to its attention
    EXPECT_EQ(view.length(), 6u);
    EXPECT_EQ(view.pages(), 2u);
    EXPECT_EQ(view.fill(0), 4u);
    EXPECT_EQ(view.fill(1), 2u);
  }
  step.commit();
  EXPECT_FALSE(step.open());
  EXPECT_THROW(step.commit(), InvalidArgument);
  EXPECT_TRUE(st.block_table(s)[0].sealed);
  EXPECT_NE(st.block_table(s)[0].hash, 0u);
  // same bytes as the one-call append
  const SeqId u = st.create_sequence();
  st.append(u, r.ids, r.k, r.v);
  for (int l = 0; l < 2; ++l) {
    const auto a = st.host_storage()->bytes(st.block_table(s)[1].layers[l]);
    const auto b = st.host_storage()->bytes(st.block_table(u)[1].layers[l]);
    const auto& L = st.host_storage()->layout(PageFormat::kFp8);
    EXPECT_EQ(std::memcmp(a.data() + L.k_codes(0, 0), b.data() + L.k_codes(0, 0), 2 * L.row_bytes()), 0);
  }
  st.check_invariants();
}

// A step that ends without committing (an exception, or layers left unwritten) leaves the store as it
// was: lengths, block tables, free lists and reference counts; one that was fully written commits itself.
TEST(ForwardStep, AnAbandonedStepRollsBackAndACompleteOneCommitsItself) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto c = small_config(16, 16);
  KvStore st(c);
  const SeqId a = st.create_sequence(), b = st.create_sequence();
  const auto ra = random_rows(rng, c, 3), rb = random_rows(rng, c, 8);
  st.append(a, ra.ids, ra.k, ra.v);  // a partial page of 3
  st.append(b, rb.ids, rb.k, rb.v);  // two full pages
  const auto table_a = st.block_table(a), table_b = st.block_table(b);
  const auto free_before = st.pool(PageFormat::kFp8).free_list_snapshot();
  const auto acc_before = st.accounting();
  const std::vector<int32_t> more(6, 7);
  const std::vector<KvStore::AppendChunk> chunks{{a, more}, {b, more}};
  try {
    ForwardStep step = st.begin_step(chunks);
    EXPECT_EQ(st.length(a), 9u);
    const PagedView held = step.view(1, 0);  // a reader still holding a new page when the step ends
    (void)step.write_slots(0, 0);
    throw std::runtime_error("the pass failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(st.length(a), 3u);
  EXPECT_EQ(st.length(b), 8u);
  EXPECT_EQ(st.tokens(a), ra.ids);
  const auto after_a = st.block_table(a), after_b = st.block_table(b);
  ASSERT_EQ(after_a.size(), table_a.size());
  ASSERT_EQ(after_b.size(), table_b.size());
  for (size_t i = 0; i < after_a.size(); ++i) {
    EXPECT_EQ(after_a[i].layers, table_a[i].layers);
    EXPECT_EQ(after_a[i].filled, table_a[i].filled);
    EXPECT_EQ(after_a[i].sealed, table_a[i].sealed);
  }
  for (size_t i = 0; i < after_b.size(); ++i) EXPECT_EQ(after_b[i].layers, table_b[i].layers);
  auto sorted = [](std::vector<PageId> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(st.pool(PageFormat::kFp8).free_list_snapshot()), sorted(free_before));
  EXPECT_EQ(st.accounting().used_bytes(), acc_before.used_bytes());
  st.check_invariants();

  {  // unwritten layers, no exception: rolled back as well
    ForwardStep step = st.begin_step(chunks);
    (void)step.write_slots(0, 0);
  }
  EXPECT_EQ(st.length(a), 3u);
  st.check_invariants();

  {  // every layer written: commits itself, sealing a's now full page
    ForwardStep step = st.begin_step(chunks);
    for (size_t i = 0; i < 2; ++i)
      for (int l = 0; l < c.layers; ++l) {
        const auto slots = step.write_slots(i, l);
        const std::vector<float> kv(slots.size() * c.kv_heads * c.head_dim, 0.25f);
        st.host_storage()->write_tokens(slots, kv, kv);
      }
  }
  EXPECT_EQ(st.length(a), 9u);
  EXPECT_EQ(st.length(b), 14u);
  EXPECT_TRUE(st.block_table(a)[1].sealed);
  EXPECT_FALSE(st.block_table(a)[2].sealed);
  st.check_invariants();
}

TEST(ForwardStep, ACapacityErrorChangesNothing) {
  auto rng = testing::rng_for_test();
  auto c = small_config(4, 4);  // two logical pages of two layers
  KvStore st(c);
  const SeqId a = st.create_sequence(), b = st.create_sequence();
  const auto r = random_rows(rng, c, 4);
  st.append(a, r.ids, r.k, r.v);
  const std::vector<int32_t> five(5, 1), one(1, 1);
  const std::vector<KvStore::AppendChunk> chunks{{b, one}, {a, five}};  // 3 logical pages, room for 1
  EXPECT_THROW((void)st.begin_step(chunks), OutOfCapacity);
  EXPECT_EQ(st.length(a), 4u);
  EXPECT_EQ(st.length(b), 0u);
  const std::vector<KvStore::AppendChunk> twice{{a, one}, {a, one}};
  EXPECT_THROW((void)st.begin_step(twice), InvalidArgument);
  EXPECT_EQ(st.length(a), 4u);
  st.check_invariants();
}

TEST(PagedView, HoldsOnlyItsLayersPages) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto c = small_config();
  KvStore st(c);
  const SeqId s = st.create_sequence();
  const auto r = random_rows(rng, c, 9);
  st.append(s, r.ids, r.k, r.v);
  const auto reader = static_cast<int>(RefKind::kReader);
  {
    const auto view = st.view(s, 1);
    EXPECT_EQ(view.pages(), 3u);
    EXPECT_EQ(view.length(), 9u);
    EXPECT_EQ(view.last_page_fill(), 1u);
    const auto table = st.block_table(s);
    for (size_t i = 0; i < view.pages(); ++i) {
      EXPECT_EQ(view.page(i), table[i].layers[1]);
      EXPECT_EQ(view.entries()[i], table[i].layers[1]);
      EXPECT_EQ(st.refs(view.page(i))[reader], 1u);
      EXPECT_EQ(st.refs(table[i].layers[0])[reader], 0u);
    }
    EXPECT_THROW((void)view.page(3), InvalidArgument);
    EXPECT_EQ(view.by_format().ids[static_cast<int>(PageFormat::kFp8)].size(), 3u);
    st.check_invariants();
  }
  {
    const auto full = st.pin(s);  // the full pin, alone
    for (const auto& row : full.rows()) EXPECT_EQ(st.refs(row[1])[reader], 1u);
    EXPECT_THROW((void)full.rows().at(0, c.layers), InvalidArgument);
  }
  for (const auto& row : st.block_table(s)) EXPECT_EQ(st.refs(row.layers[1])[reader], 0u);
  EXPECT_THROW((void)st.view(s, c.layers), InvalidArgument);
  st.check_invariants();
}

}  // namespace
}  // namespace minimakv::cache

namespace minimakv::cache {
namespace {

TEST(KvMode, NamesRoundTripAndAnUnknownNameIsAnError) {
  for (KvMode m : {KvMode::kBf16, KvMode::kFp8, KvMode::kMinima}) EXPECT_EQ(parse_kv_mode(to_string(m)), m);
  try {
    parse_kv_mode("tq3");
    FAIL() << "accepted an unknown mode";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'tq3'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(retiers(KvMode::kMinima));
  EXPECT_FALSE(retiers(KvMode::kFp8));
  EXPECT_FALSE(retiers(KvMode::kBf16));
}

}  // namespace
}  // namespace minimakv::cache
