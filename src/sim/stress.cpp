#include "minimakv/sim/stress.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <tuple>

#include "minimakv/codec/page_codec.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::sim {
using namespace minimakv::cache;
namespace {

struct RefSeq {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> prefix;  // hash of tokens[0..t] for each t: K/V of token t is a function of it
  std::vector<Tier> tiers;
};

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint64_t mix(uint64_t h, uint64_t x) {
  uint64_t s = h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  return codec::splitmix64(s);
}

class Sim {
 public:
  explicit Sim(const StressOptions& opt) : opt_(opt), rng_(opt.seed), store_(make_config(opt)), ctl_(make_ctl()) {
    // A library of documents makes prefix hits and shared pages common.
    std::uniform_int_distribution<int32_t> tok(0, 50);
    for (int d = 0; d < 6; ++d) {
      std::vector<int32_t> doc(40);
      for (auto& t : doc) t = tok(rng_);
      library_.push_back(doc);
    }
  }

  StressResult run() {
    try {
      for (uint64_t i = 0; i < opt_.ops; ++i) {
        step();
        if (const char* th = std::getenv("MINIMAKV_STRESS_TRACE_HASH")) trace(std::strtoull(th, nullptr, 16));
        ++res_.ops;
        store_.check_invariants();
        ++res_.invariant_checks;
        const Accounting a = store_.accounting();
        res_.reconciled &= a.reconciled;
        res_.peak_used_bytes = std::max(res_.peak_used_bytes, a.used_bytes());
        if (opt_.full_check_every && i % opt_.full_check_every == 0) check_all();
      }
      check_all();
      res_.final_accounting = store_.accounting();
      pins_.clear();
      for (const auto& [id, r] : ref_) store_.finish(id);
      ref_.clear();
      store_.evict_cached(static_cast<size_t>(-1));
      store_.check_invariants();
      for (const codec::PageFormatSpec& f : codec::all_page_formats()) res_.leaked_pages += store_.pool(f.format).used_pages();
    } catch (const std::exception& e) {
      res_.failure = "after " + std::to_string(res_.ops) + " operations (seed " + std::to_string(opt_.seed) +
                     "), in operation '" + last_op_ + "': " + e.what();
    }
    return res_;
  }

 private:
  static StoreConfig make_config(const StressOptions& o) {
    StoreConfig c;
    c.layers = 3;
    c.kv_heads = 2;
    c.head_dim = 64;
    c.tokens_per_page = 4;
    c.mode = o.mode;
    c.protected_layers = {0};
    c.pages_of(cache::append_format(o.mode)) = o.fp8_pages;  // the append pool (FP8, or BF16 in bf16 mode)
    c.pages_of(PageFormat::kTq3) = o.tq3_pages;
    return c;
  }
  static policy::TierController make_ctl() {
    policy::ControllerConfig c;
    c.recent_window = 2;
    c.anchor_budget = 2;
    c.scoring = true;
    return policy::TierController(c);
  }

  // ---------------------------------------------------------------- K/V and expected bytes
  void kv_rows(const RefSeq& s, size_t first, size_t n, std::vector<float>& k, std::vector<float>& v) const {
    const auto& c = store_.config();
    const size_t per = static_cast<size_t>(c.layers) * c.kv_heads * c.head_dim;
    k.resize(n * per);
    v.resize(n * per);
    for (size_t t = 0; t < n; ++t) {
      std::mt19937_64 g(s.prefix[first + t]);
      std::normal_distribution<float> nd;
      for (size_t i = 0; i < per; ++i) k[t * per + i] = nd(g);
      for (size_t i = 0; i < per; ++i) v[t * per + i] = nd(g);
    }
  }

  const std::vector<uint8_t>& derivation(const RefSeq& s, size_t page, int layer, int gen) {
    const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
    const size_t filled = std::min(B, s.tokens.size() - page * B);
    const auto key = std::make_tuple(s.prefix[page * B + filled - 1], filled, layer, gen);
    if (auto it = deriv_.find(key); it != deriv_.end()) return it->second;
    std::vector<uint8_t> out;
    const auto& L0 = store_.pool(store_.append_format()).layout();
    if (gen == 0) {
      out.assign(L0.bytes(), 0);
      std::vector<float> k, v;
      kv_rows(s, page * B, filled, k, v);
      const auto& c = store_.config();
      const size_t per_layer = static_cast<size_t>(c.kv_heads) * c.head_dim;
      const size_t per = per_layer * c.layers;
      for (size_t t = 0; t < filled; ++t) {
        codec::write_token(out, L0, static_cast<int>(t), std::span<const float>(k).subspan(t * per + layer * per_layer, per_layer),
                           std::span<const float>(v).subspan(t * per + layer * per_layer, per_layer));
      }
    } else {
      const auto& prev = derivation(s, page, layer, gen - 1);
      const auto& f8 = store_.pool(PageFormat::kFp8).layout();
      const auto& t3 = store_.pool(PageFormat::kTq3).layout();
      if (gen % 2 == 1) {
        out.assign(t3.bytes(), 0);
        codec::convert_fp8_to_tq3(prev, f8, out, t3, host().rotations(layer), static_cast<int>(B),
                                  store_.config().tq3_policy);
      } else {
        out.assign(f8.bytes(), 0);
        codec::convert_tq3_to_fp8(prev, t3, out, f8, host().rotations(layer), static_cast<int>(B));
      }
    }
    return deriv_.emplace(key, std::move(out)).first->second;
  }

  // Every content a page may legitimately hold is reachable from the FP8 (or BF16) encoding of its own
  // tokens by conversions, each made from a content that existed (and was checked) before. The model
  // keeps, per (page tokens, layer), the contents seen so far; a new content is accepted only when it
  // is the conversion of a known content of the other format.
  bool known_content(const RefSeq& r, size_t page, int layer, PageEntry e, size_t filled) {
    const auto& pool = store_.pool(e.format);
    const auto bytes = host().bytes(e);
    auto& entry = known_[std::make_tuple(r.prefix[page * store_.config().tokens_per_page + filled - 1], filled, layer)];
    entry.last_seen = res_.ops;
    auto& known = entry.contents;
    if (known.empty()) known.emplace_back(store_.append_format(), derivation(r, page, layer, 0));
    for (const auto& [f, c] : known)
      if (f == e.format && same_regions(bytes, c, pool.layout(), filled)) return true;
    if (store_.config().mode != KvMode::kMinima || filled != static_cast<size_t>(store_.config().tokens_per_page))
      return false;
    const auto& f8 = store_.pool(PageFormat::kFp8).layout();
    const auto& t3 = store_.pool(PageFormat::kTq3).layout();
    const size_t n = known.size();
    for (size_t i = 0; i < n; ++i) {
      if (known[i].first == e.format) continue;
      std::vector<uint8_t> out;
      if (e.format == PageFormat::kTq3) {
        out.assign(t3.bytes(), 0);
        codec::convert_fp8_to_tq3(known[i].second, f8, out, t3, host().rotations(layer), static_cast<int>(filled),
                                  store_.config().tq3_policy);
      } else {
        out.assign(f8.bytes(), 0);
        codec::convert_tq3_to_fp8(known[i].second, t3, out, f8, host().rotations(layer), static_cast<int>(filled));
      }
      if (same_regions(bytes, out, pool.layout(), filled)) {
        known.emplace_back(e.format, std::move(out));
        return true;
      }
    }
    return false;
  }

  static bool same_regions(std::span<const uint8_t> a, std::span<const uint8_t> b, const codec::PageLayout& L,
                           size_t filled) {
    for (int h = 0; h < L.geometry().kv_heads; ++h) {
      for (size_t t = 0; t < filled; ++t) {
        const int ti = static_cast<int>(t);
        if (std::memcmp(a.data() + L.k_codes(h, ti), b.data() + L.k_codes(h, ti), L.row_bytes()) ||
            std::memcmp(a.data() + L.v_codes(h, ti), b.data() + L.v_codes(h, ti), L.row_bytes()))
          return false;
        if (L.meta_bytes() && (std::memcmp(a.data() + L.k_meta(h, ti), b.data() + L.k_meta(h, ti), L.meta_bytes()) ||
                               std::memcmp(a.data() + L.v_meta(h, ti), b.data() + L.v_meta(h, ti), L.meta_bytes())))
          return false;
      }
    }
    return true;
  }

  void check_seq(SeqId id) {
    const RefSeq& r = ref_.at(id);
    if (!store_.is_live(id)) throw Failure("sequence " + std::to_string(id) + " should be live");
    if (store_.length(id) != r.tokens.size()) throw Failure("length of sequence " + std::to_string(id));
    const auto table = store_.block_table(id);
    const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
    if (table.size() != r.tiers.size()) throw Failure("page count of sequence " + std::to_string(id));
    for (size_t p = 0; p < table.size(); ++p) {
      if (table[p].tier != r.tiers[p]) throw Failure("tier of sequence " + std::to_string(id) + " page " + std::to_string(p));
      const size_t filled = std::min(B, r.tokens.size() - p * B);
      for (int l = 0; l < store_.config().layers; ++l) {
        const PageEntry e = table[p].layers[l];
        const bool ok = known_content(r, p, l, e, filled);
        ++res_.page_byte_checks;
        if (!ok && std::getenv("MINIMAKV_STRESS_DEBUG")) debug_dump(id, p, l, e);
        if (!ok)
          throw Failure("sequence " + std::to_string(id) + " page " + std::to_string(p) + " layer " + std::to_string(l) + " (" +
                        codec::to_string(e.format) + " page " + std::to_string(e.id) + ") holds bytes that are no encoding of its tokens");
      }
    }
  }

  void print_seq(SeqId id, const RefSeq& r) const {
    std::fprintf(stderr, "  seq %llu tokens", static_cast<unsigned long long>(id));
    for (int32_t t : r.tokens) std::fprintf(stderr, " %d", t);
    std::fprintf(stderr, "\n    hashes");
    for (const auto& row : store_.block_table(id)) {
      std::fprintf(stderr, " %llx[%s:", static_cast<unsigned long long>(row.hash), to_string(row.tier));
      for (const auto& e : row.layers) std::fprintf(stderr, " %s%u", codec::to_string(e.format), e.id);
      std::fprintf(stderr, "]");
    }
    std::fprintf(stderr, "\n");
  }

  // Which live page's tokens do the bytes of a mismatching page belong to?
  void debug_dump(SeqId id, size_t page, int layer, PageEntry e) {
    const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
    std::fprintf(stderr, "mismatch: seq %llu page %zu layer %d\n", static_cast<unsigned long long>(id), page, layer);
    print_seq(id, ref_.at(id));
    const auto& pool = store_.pool(e.format);
    const auto& L = pool.layout();
    const RefSeq& me = ref_.at(id);
    for (int gen = 0; gen <= 4; ++gen) {
      if ((gen % 2 == 1) != (e.format == PageFormat::kTq3)) continue;
      const auto& want = derivation(me, page, layer, gen);
      std::fprintf(stderr, "  gen %d rows equal:", gen);
      for (int h = 0; h < L.geometry().kv_heads; ++h)
        for (int t = 0; t < L.geometry().tokens_per_page; ++t) {
          const bool k =
              std::memcmp(host().bytes(e).data() + L.k_codes(h, t), want.data() + L.k_codes(h, t), L.row_bytes()) == 0;
          const bool v =
              std::memcmp(host().bytes(e).data() + L.v_codes(h, t), want.data() + L.v_codes(h, t), L.row_bytes()) == 0;
          const bool km =
              std::memcmp(host().bytes(e).data() + L.k_meta(h, t), want.data() + L.k_meta(h, t), L.meta_bytes()) == 0;
          const bool vm =
              std::memcmp(host().bytes(e).data() + L.v_meta(h, t), want.data() + L.v_meta(h, t), L.meta_bytes()) == 0;
          float a = 0, b = 0;
          std::memcpy(&a, host().bytes(e).data() + L.k_meta(h, t), 4);
          std::memcpy(&b, want.data() + L.k_meta(h, t), 4);
          std::fprintf(stderr, " h%dt%d:%c%c%c%c(%g/%g)", h, t, k ? 'K' : '-', v ? 'V' : '-', km ? 'k' : '-', vm ? 'v' : '-', a, b);
        }
      std::fprintf(stderr, "\n");
    }
    for (int h = 0; h < L.geometry().kv_heads; ++h)
      for (int t = 0; t < L.geometry().tokens_per_page; ++t)
        for (int kv = 0; kv < 2; ++kv) {
          std::fprintf(stderr, "  row h%d t%d %c matches gens:", h, t, kv ? 'V' : 'K');
          for (int gen = 0; gen <= 12; gen += 2) {
            const auto& want = derivation(me, page, layer, gen);
            const size_t co = kv ? L.v_codes(h, t) : L.k_codes(h, t), mo = kv ? L.v_meta(h, t) : L.k_meta(h, t);
            if (!std::memcmp(host().bytes(e).data() + co, want.data() + co, L.row_bytes()) &&
                !std::memcmp(host().bytes(e).data() + mo, want.data() + mo, L.meta_bytes()))
              std::fprintf(stderr, " %d", gen);
          }
          std::fprintf(stderr, "\n");
        }
    // Which odd gens do live TQ3 rows of the same page match, and does reconstructing them give this page?
    for (const auto& [oid, o] : ref_) {
      const auto t = store_.block_table(oid);
      if (page >= t.size() || t[page].hash == 0 || t[page].hash != store_.block_table(id)[page].hash) continue;
      const PageEntry te = t[page].layers[layer];
      if (te.format != PageFormat::kTq3) continue;
      const auto& tp = store_.pool(PageFormat::kTq3);
      std::fprintf(stderr, "  seq %llu holds tq3 %u matching gens:", static_cast<unsigned long long>(oid), te.id);
      for (int gen = 1; gen <= 15; gen += 2)
        if (same_regions(host().bytes(te), derivation(me, page, layer, gen), tp.layout(), 4))
          std::fprintf(stderr, " %d", gen);
      std::vector<uint8_t> rec(L.bytes());
      codec::convert_tq3_to_fp8(host().bytes(te), tp.layout(), rec, L, host().rotations(layer), 4);
      std::fprintf(stderr, "; its reconstruction %s this page\n",
                   same_regions(rec, host().bytes(e), L, 4) ? "equals" : "differs from");
    }
    std::fprintf(stderr, "  refs %u %u %u %u\n", pool.meta(e.id).refs[0], pool.meta(e.id).refs[1], pool.meta(e.id).refs[2], pool.meta(e.id).refs[3]);
    for (const auto& [oid, o] : ref_)
      for (size_t q = 0; q < o.tiers.size(); ++q)
        if (same_regions(host().bytes(e), derivation(o, q, layer, 0), pool.layout(),
                         std::min(B, o.tokens.size() - q * B))) {
          std::fprintf(stderr, " matches page %zu of\n", q);
          print_seq(oid, o);
        }
  }

  std::string trace_state_;
  void trace(uint64_t h) {
    std::string st;
    for (const auto& [id, r] : ref_) {
      const auto t = store_.block_table(id);
      for (size_t p = 0; p < t.size(); ++p)
        if (t[p].hash == h) {
          st += " seq" + std::to_string(id) + "[" + to_string(t[p].tier) + ":";
          for (const auto& e : t[p].layers) st += std::string(" ") + codec::to_string(e.format) + std::to_string(e.id);
          st += "]";
        }
    }
    if (st != trace_state_) {
      std::fprintf(stderr, "op %llu %s:%s\n", static_cast<unsigned long long>(res_.ops), last_op_.c_str(), st.c_str());
      trace_state_ = st;
    }
  }

  void check_all() {
    if (store_.live_sequences().size() != ref_.size()) throw Failure("number of live sequences");
    for (const auto& [id, r] : ref_) check_seq(id);
    for (const auto& p : pins_) check_pin(p);
  }

  // A pinned page must keep its bytes until the pin is released, whatever the store did meanwhile.
  struct Pin {
    PinnedSequence pin;
    std::vector<std::pair<PageEntry, uint64_t>> digests;
    uint64_t release_at;
  };
  void check_pin(const Pin& p) {
    for (const auto& [e, d] : p.digests) {
      const auto b = p.pin.bytes(e);
      if (XXH3_64bits(b.data(), b.size()) != d) throw Failure("a pinned page changed while pinned");
    }
  }

  // ---------------------------------------------------------------- snapshots for "state unchanged"
  struct Snapshot {
    std::map<SeqId, std::vector<std::tuple<Tier, uint32_t, uint64_t, std::vector<PageEntry>>>> tables;
    std::array<size_t, codec::kNumPageFormats> free{};
    std::vector<std::pair<uint64_t, Tier>> lru;
    bool operator==(const Snapshot&) const = default;
  };
  Snapshot snapshot() const {
    Snapshot s;
    for (SeqId id : store_.live_sequences())
      for (const auto& r : store_.block_table(id)) s.tables[id].emplace_back(r.tier, r.filled, r.hash, r.layers);
    for (int f = 0; f < codec::kNumPageFormats; ++f) s.free[f] = store_.pool(static_cast<PageFormat>(f)).free_pages();
    s.lru = store_.lru_snapshot();
    return s;
  }
  template <typename Ex, typename F>
  void expect_error(F&& f, bool count_expected) {
    const Snapshot before = snapshot();
    bool threw = false;
    try {
      f();
    } catch (const Ex&) {
      threw = true;
    }
    if (!threw) throw Failure("an invalid call did not throw");
    if (!(snapshot() == before)) throw Failure("a failed call changed the store");
    if (count_expected) ++res_.expected_errors;
  }

  // ---------------------------------------------------------------- operations
  SeqId pick_live() {
    auto it = ref_.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, ref_.size() - 1)(rng_));
    return it->first;
  }

  void extend(RefSeq& r, std::span<const int32_t> toks) {
    for (int32_t t : toks) {
      r.prefix.push_back(mix(r.prefix.empty() ? 0x51ed270b27a8f1c3ull : r.prefix.back(), static_cast<uint64_t>(t)));
      r.tokens.push_back(t);
    }
  }

  void do_append(SeqId id) {
    RefSeq& r = ref_.at(id);
    const size_t n = std::uniform_int_distribution<size_t>(1, 6)(rng_);
    std::vector<int32_t> toks;
    const auto& doc = library_[r.tokens.size() % library_.size()];
    const bool follow = std::equal(r.tokens.begin(), r.tokens.end(), doc.begin(),
                                   doc.begin() + static_cast<std::ptrdiff_t>(std::min(r.tokens.size(), doc.size())));
    for (size_t i = 0; i < n; ++i) {
      const size_t pos = r.tokens.size() + i;
      toks.push_back(follow && pos < doc.size() && rng_() % 8 ? doc[pos] : static_cast<int32_t>(rng_() % 51));
    }
    RefSeq next = r;
    extend(next, toks);
    std::vector<float> k, v;
    kv_rows(next, r.tokens.size(), n, k, v);
    const Snapshot before = snapshot();
    try {
      store_.append(id, toks, k, v);
    } catch (const OutOfCapacity&) {
      if (!(snapshot() == before)) throw Failure("a failed append changed the store");
      ++res_.capacity_errors;
      return;
    }
    const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
    next.tiers.resize((next.tokens.size() + B - 1) / B, Tier::kRecent);
    r = std::move(next);
    check_seq(id);
  }

  void do_create_prefix() {
    const auto& doc = library_[rng_() % library_.size()];
    const size_t len = std::uniform_int_distribution<size_t>(4, doc.size())(rng_);
    std::span<const int32_t> toks(doc.data(), len);
    const size_t expect = store_.match_prefix(toks);
    auto [id, covered] = store_.create_sequence_with_prefix(toks);
    if (covered != expect) throw Failure("prefix hit covers a different length than match_prefix");
    RefSeq r;
    extend(r, toks.first(covered));
    for (const auto& row : store_.block_table(id)) {
      if (row.tier == Tier::kAnchor) throw Failure("a prefix hit installed an Anchor row");
      r.tiers.push_back(row.tier);  // which cached copy (FP8 or Stale) is the cache's choice
    }
    res_.prefix_hits += covered ? 1 : 0;
    ref_.emplace(id, std::move(r));
    check_seq(id);  // the installed pages must hold exactly these tokens' K/V
  }

  void do_apply(SeqId id) {
    RefSeq& r = ref_.at(id);
    if (r.tiers.empty()) return;
    std::vector<KvStore::Transition> plan;
    const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
    const size_t full = r.tokens.size() / B;
    for (size_t i = 0, n = 1 + rng_() % 3; i < n; ++i) {
      const uint32_t p = static_cast<uint32_t>(rng_() % r.tiers.size());
      Tier t = static_cast<Tier>(rng_() % 3);
      if (t == Tier::kStale && (p >= full || store_.config().mode != KvMode::kMinima)) t = Tier::kAnchor;
      if (std::none_of(plan.begin(), plan.end(), [&](const auto& x) { return x.page == p; })) plan.push_back({id, p, t});
    }
    apply_plan(plan);
  }

  void apply_plan(const std::vector<KvStore::Transition>& plan) {
    const Snapshot before = snapshot();
    KvStore::ApplyResult res;
    try {
      res = store_.apply(plan);
    } catch (const OutOfCapacity&) {
      if (!(snapshot() == before)) throw Failure("a failed plan changed the store");
      ++res_.capacity_errors;
      return;
    }
    if (res.dropped) throw Failure("single-threaded plan entries were dropped");
    res_.conversions += res.converted;
    res_.promotions += res.promoted;
    res_.rebinds += res.rebound;
    for (const auto& t : plan) ref_.at(t.seq).tiers[t.page] = t.target;
    for (const auto& t : plan) check_seq(t.seq);
  }

  void do_checkpoint() {
    std::vector<SeqId> ids;
    for (const auto& [id, r] : ref_) {
      ids.push_back(id);
      std::vector<float> scores(r.tiers.size());
      for (auto& s : scores) s = std::uniform_real_distribution<float>(0, 1)(rng_) < 0.2f ? 0.5f : 0.0f;
      ctl_.observe(id, scores);
    }
    apply_plan(ctl_.plan(store_, ids));
  }

  void do_error() {
    switch (rng_() % 5) {
      case 0: expect_error<InvalidArgument>([&] { store_.finish(dead_id()); }, true); break;
      case 1: {
        const int32_t tok = 1;
        std::vector<float> k(static_cast<size_t>(store_.config().layers) * store_.config().kv_heads * store_.config().head_dim);
        expect_error<InvalidArgument>([&] { store_.append(dead_id(), std::span<const int32_t>(&tok, 1), k, k); }, true);
        break;
      }
      case 2: expect_error<InvalidArgument>([&] { (void)store_.fork(dead_id()); }, true); break;
      case 3:
        if (!ref_.empty()) {
          const SeqId id = pick_live();
          const uint32_t bad = static_cast<uint32_t>(ref_.at(id).tiers.size() + 1);
          expect_error<InvalidArgument>([&] { store_.apply(std::vector<KvStore::Transition>{{id, bad, Tier::kAnchor}}); }, true);
        }
        break;
      default: expect_error<InvalidArgument>([&] { (void)store_.pin(dead_id()); }, true); break;
    }
  }
  SeqId dead_id() { return finished_.empty() ? 1000000007ull : finished_[rng_() % finished_.size()]; }

  void step() {
    // release pins whose time has come
    while (!pins_.empty() && pins_.front().release_at <= res_.ops) {
      check_pin(pins_.front());
      pins_.pop_front();
    }
    if (deriv_.size() > 50000) deriv_.clear();  // gen-0 bytes are recomputed on demand
    if (known_.size() > 100000) {  // pages unseen for 100K operations were recycled long ago (small pools)
      for (auto it = known_.begin(); it != known_.end();)
        it = it->second.last_seen + 100000 < res_.ops ? known_.erase(it) : std::next(it);
    }
    const unsigned op = static_cast<unsigned>(rng_() % 100);
    last_op_ = op < 8 ? "create" : op < 16 ? "create from prefix" : op < 50 ? "append" : op < 54 ? "fork"
             : op < 62 ? "finish" : op < 80 ? "apply" : op < 84 ? "checkpoint" : op < 87 ? "pin"
             : op < 90 ? "evict" : op < 93 ? "quota" : "invalid call";
    if (ref_.empty() || op < 8) {
      const SeqId id = store_.create_sequence();
      ref_.emplace(id, RefSeq{});
      return;
    }
    if (op < 16) return do_create_prefix();
    if (op < 50) return do_append(pick_live());
    if (op < 54) {
      const SeqId parent = pick_live();
      const Snapshot before = snapshot();
      try {
        const SeqId child = store_.fork(parent);
        ref_.emplace(child, ref_.at(parent));
        check_seq(child);
        check_seq(parent);
      } catch (const OutOfCapacity&) {
        if (!(snapshot() == before)) throw Failure("a failed fork changed the store");
        ++res_.capacity_errors;
      }
      return;
    }
    if (op < 62 || ref_.size() > 24) {
      const SeqId id = pick_live();
      store_.finish(id);
      ctl_.forget(id);
      ref_.erase(id);
      finished_.push_back(id);
      return;
    }
    if (op < 80) return do_apply(pick_live());
    if (op < 84) return do_checkpoint();
    if (op < 87) {
      const SeqId id = pick_live();
      Pin p{store_.pin(id), {}, res_.ops + 1 + rng_() % 20};
      // Full pages are immutable; the partial last page gains rows from the writer, so it is excluded.
      const size_t B = static_cast<size_t>(store_.config().tokens_per_page);
      const size_t n_rows = p.pin.rows().size();
      const size_t full = n_rows - (n_rows && p.pin.last_page_fill() < B ? 1 : 0);
      for (size_t i = 0; i < full; ++i)
        for (const PageEntry& e : p.pin.rows()[i]) {
          const auto b = p.pin.bytes(e);
          p.digests.emplace_back(e, XXH3_64bits(b.data(), b.size()));
        }
      pins_.push_back(std::move(p));
      return;
    }
    if (op < 90) {
      res_.evictions += store_.evict_cached(1 + rng_() % 3);
      return;
    }
    if (op < 93) {
      const auto f = rng_() % 2 ? PageFormat::kFp8 : PageFormat::kTq3;
      store_.set_cache_quota(f, rng_() % 2 ? static_cast<size_t>(-1) : rng_() % 24);
      return;
    }
    do_error();
  }

  // The simulated store keeps its bytes in host memory.
  const cache::HostPageStorage& host() const { return *store_.host_storage(); }

  StressOptions opt_;
  std::mt19937_64 rng_;
  KvStore store_;
  policy::TierController ctl_;
  std::map<SeqId, RefSeq> ref_;
  std::vector<SeqId> finished_;
  std::vector<std::vector<int32_t>> library_;
  std::map<std::tuple<uint64_t, size_t, int, int>, std::vector<uint8_t>> deriv_;
  struct Known {
    uint64_t last_seen = 0;
    std::vector<std::pair<PageFormat, std::vector<uint8_t>>> contents;
  };
  std::map<std::tuple<uint64_t, size_t, int>, Known> known_;
  std::deque<Pin> pins_;
  StressResult res_;
  std::string last_op_;
};

}  // namespace

StressResult run_stress(const StressOptions& opt) { return Sim(opt).run(); }

}  // namespace minimakv::sim
