// A store whose page bytes live in an external PageStorage behaves like a host store: the same
// operations (append, fork with a copy-on-write partial page, demotion to TQ3, promotion back) give the
// same pages byte for byte, with every byte operation handed to the storage and none done by the store.
#include <gtest/gtest.h>

#include <random>

#include "minimakv/codec/page_codec.h"
#include "minimakv/codec/rotation.h"
#include "store_fixture.h"
#include "test_util.h"

namespace minimakv::cache {
namespace {

// Host memory standing in for device pools; the conversions are the CPU codec's.
class MirrorStorage final : public PageStorage {
 public:
  explicit MirrorStorage(const StoreConfig& c)
      : geo_{c.tokens_per_page, c.kv_heads, c.head_dim},
        layouts_{codec::PageLayout(PageFormat::kBf16, geo_), codec::PageLayout(PageFormat::kFp8, geo_),
                 codec::PageLayout(PageFormat::kTq3, geo_)} {
    const auto& cap = c.pages;
    for (int f = 0; f < 3; ++f) bytes_[f].assign((cap[f] + 1) * layouts_[f].bytes(), 0xA5);  // poisoned
    for (int l = 0; l < c.layers; ++l) {
      rot_.emplace_back();
      for (int h = 0; h < c.kv_heads; ++h)
        rot_[l].push_back(
            codec::Rotation::for_head(c.head_dim, static_cast<uint32_t>(l), static_cast<uint32_t>(h), c.rotation_seed));
    }
  }
  std::span<uint8_t> page(PageEntry e) {
    const auto& L = layouts_[static_cast<int>(e.format)];
    return {bytes_[static_cast<int>(e.format)].data() + e.id * L.bytes(), L.bytes()};
  }
  const codec::PageLayout& layout(PageFormat f) const { return layouts_[static_cast<int>(f)]; }

  void copy_page(PageFormat f, PageId src, PageId dst) override {
    ++copies;
    auto s = page({f, src});
    std::copy(s.begin(), s.end(), page({f, dst}).begin());
  }
  void convert(std::span<const Conversion> jobs) override {
    for (const auto& j : jobs) {
      ++conversions;
      if (j.dst.format == PageFormat::kTq3)
        codec::convert_fp8_to_tq3(page(j.src), layout(j.src.format), page(j.dst), layout(j.dst.format), rot_[j.layer],
                                  geo_.tokens_per_page);
      else
        codec::convert_tq3_to_fp8(page(j.src), layout(j.src.format), page(j.dst), layout(j.dst.format), rot_[j.layer],
                                  geo_.tokens_per_page);
    }
  }
  int copies = 0, conversions = 0;

 private:
  codec::PageGeometry geo_;
  std::array<codec::PageLayout, 3> layouts_;
  std::array<std::vector<uint8_t>, 3> bytes_;
  std::vector<std::vector<codec::Rotation>> rot_;
};

// Appends rows to the external store the way the CUDA backend does: take each layer's slots, write.
void append_external(KvStore& s, MirrorStorage& m, SeqId seq, const testing::KvRows& r) {
  const auto& c = s.config();
  const size_t head = static_cast<size_t>(c.kv_heads) * c.head_dim, per = head * c.layers;
  const KvStore::AppendChunk chunk{seq, r.ids};
  ForwardStep step = s.begin_step(std::span<const KvStore::AppendChunk>(&chunk, 1));
  for (int l = 0; l < c.layers; ++l) {
    const auto slots = step.write_slots(0, l);
    ASSERT_EQ(slots.size(), r.ids.size());
    for (size_t t = 0; t < slots.size(); ++t)
      codec::write_token(m.page(slots[t].page), m.layout(slots[t].page.format), static_cast<int>(slots[t].token),
                         std::span<const float>(r.k).subspan(t * per + l * head, head),
                         std::span<const float>(r.v).subspan(t * per + l * head, head));
  }
  step.commit();
}

// Full pages must match byte for byte; a partial last page in its written tokens (the slots past them
// hold whatever the page held before, which no reader looks at).
void expect_same_pages(const KvStore& host, SeqId hs, const KvStore& ext, MirrorStorage& m, SeqId es) {
  const auto hp = host.pin(hs);
  const auto ep = ext.pin(es);
  const auto& c = host.config();
  ASSERT_EQ(hp.rows().size(), ep.rows().size());
  ASSERT_EQ(hp.last_page_fill(), ep.last_page_fill());
  for (size_t p = 0; p < hp.rows().size(); ++p)
    for (size_t l = 0; l < hp.rows()[p].size(); ++l) {
      const PageEntry a = hp.rows()[p][l], b = ep.rows()[p][l];
      ASSERT_EQ(a.format, b.format) << "page " << p << " layer " << l;
      const auto x = hp.bytes(a);
      const auto y = m.page(b);
      const bool partial = p + 1 == hp.rows().size() && hp.last_page_fill() < static_cast<uint32_t>(c.tokens_per_page);
      if (!partial) {
        ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << "page " << p << " layer " << l;
        continue;
      }
      const auto rot = host.host_storage()->rotations(static_cast<int>(l));
      std::vector<float> k1(c.head_dim), v1(c.head_dim), k2(c.head_dim), v2(c.head_dim);
      for (uint32_t t = 0; t < hp.last_page_fill(); ++t)
        for (int h = 0; h < c.kv_heads; ++h) {
          codec::read_token_head(x, m.layout(a.format), static_cast<int>(t), h, rot, k1, v1);
          codec::read_token_head(y, m.layout(b.format), static_cast<int>(t), h, rot, k2, v2);
          ASSERT_EQ(k1, k2) << "page " << p << " token " << t;
          ASSERT_EQ(v1, v2) << "page " << p << " token " << t;
        }
    }
}

TEST(ExternalStorage, SameBytesAsTheHostStoreThroughAppendForkRetierAndPromote) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto cfg = testing::small_config(32, 32);
  KvStore host(cfg);
  auto owned = std::make_unique<MirrorStorage>(cfg);
  MirrorStorage& mirror = *owned;
  KvStore ext(cfg, std::move(owned));
  EXPECT_EQ(ext.host_storage(), nullptr);
  EXPECT_EQ(&ext.storage(), &mirror);

  const SeqId a = host.create_sequence(), b = ext.create_sequence();
  for (size_t n : {3u, 6u, 5u}) {  // ends on a partial page (14 tokens, pages of 4)
    const auto r = testing::random_rows(rng, cfg, n, static_cast<int32_t>(host.length(a)));
    host.append(a, r.ids, r.k, r.v);
    append_external(ext, mirror, b, r);
  }
  expect_same_pages(host, a, ext, mirror, b);

  const SeqId fa = host.fork(a), fb = ext.fork(b);
  EXPECT_EQ(mirror.copies, cfg.layers);  // the partial last page, one copy per layer
  const auto r = testing::random_rows(rng, cfg, 1, 14);
  host.append(fa, r.ids, r.k, r.v);
  append_external(ext, mirror, fb, r);
  expect_same_pages(host, fa, ext, mirror, fb);
  expect_same_pages(host, a, ext, mirror, b);  // the parent's partial page was not touched

  std::vector<KvStore::Transition> demote{{a, 0, Tier::kStale}, {a, 2, Tier::kStale}};
  std::vector<KvStore::Transition> demote_b{{b, 0, Tier::kStale}, {b, 2, Tier::kStale}};
  host.apply(demote);
  ext.apply(demote_b);
  EXPECT_EQ(mirror.conversions, 2 * cfg.layers);
  expect_same_pages(host, a, ext, mirror, b);

  host.apply(std::vector<KvStore::Transition>{{a, 2, Tier::kRecent}});
  ext.apply(std::vector<KvStore::Transition>{{b, 2, Tier::kRecent}});
  expect_same_pages(host, a, ext, mirror, b);
  ext.check_invariants();
  const auto ha = host.accounting(), ea = ext.accounting();
  EXPECT_EQ(ha.used_bytes(), ea.used_bytes());
  EXPECT_TRUE(ea.reconciled);
}

TEST(ExternalStorage, HostByteAccessIsRefused) {
  auto cfg = testing::small_config(8, 8);
  KvStore ext(cfg, std::make_unique<MirrorStorage>(cfg));
  const SeqId s = ext.create_sequence();
  const std::vector<int32_t> ids{1, 2};
  const std::vector<float> kv(2 * static_cast<size_t>(cfg.layers) * cfg.kv_heads * cfg.head_dim, 0.5f);
  EXPECT_THROW(ext.append(s, ids, kv, kv), InvalidArgument);  // the bytes are not the store's to write
  EXPECT_EQ(ext.length(s), 0u);
  const KvStore::AppendChunk chunk{s, ids};
  ForwardStep step = ext.begin_step(std::span<const KvStore::AppendChunk>(&chunk, 1));
  for (int l = 0; l < cfg.layers; ++l) EXPECT_EQ(step.write_slots(0, l).size(), 2u);
  step.commit();
  const auto pin = ext.pin(s);
  EXPECT_THROW(pin.bytes(pin.rows()[0][0]), InvalidArgument);
}

}  // namespace
}  // namespace minimakv::cache
