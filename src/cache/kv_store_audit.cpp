// The store's self-audit: accounting computed from scratch (every block table and pool walked) and the
// invariant check that recomputes every reference count from its holders. Both run under the metadata
// lock; check_invariants_locked runs after every mutating call in debug builds.
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "minimakv/cache/kv_store.h"

namespace minimakv::cache {

namespace {
// Host bytes of one block-table row besides its entries (tier, fill, flags, hash, variant link).
constexpr size_t kRowHeaderBytes = 24;
}  // namespace

// ------------------------------------------------------------------ Accounting

size_t Accounting::request_bytes() const {
  size_t s = 0;
  for (size_t b : tier_bytes) s += b;
  return s;
}

size_t Accounting::used_bytes() const {
  size_t s = 0;
  for (const auto& f : formats) s += f.used_bytes();
  return s;
}

double Accounting::bytes_per_live_token() const {
  return live_tokens ? static_cast<double>(request_bytes() + block_table_bytes) / static_cast<double>(live_tokens)
                     : 0.0;
}

Accounting KvStore::accounting() const {
  std::lock_guard lock(mu_);
  return accounting_locked();
}

Accounting KvStore::accounting_locked() const {
  Accounting a;
  std::array<std::unordered_set<PageId>, codec::kNumPageFormats> counted;
  for (const auto& [id, s] : seqs_) {
    ++a.live_sequences;
    a.live_tokens += s.tokens.size();
    for (const Row& r : s.rows) {
      a.block_table_bytes += kRowHeaderBytes + r.layers.size() * sizeof(PageEntry);
      for (const PageEntry& e : r.layers)
        if (counted[static_cast<int>(e.format)].insert(e.id).second)
          a.tier_bytes[static_cast<int>(r.tier)] += pool(e.format).page_bytes();
    }
  }
  bool ok = true;
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const PagePool& p = *pools_[f];
    FormatAccounting& fa = a.formats[f];
    fa.capacity_pages = p.capacity();
    fa.used_pages = p.used_pages();
    fa.free_pages = p.free_pages();
    fa.page_bytes = p.page_bytes();
    fa.request_pages = counted[f].size();
    for (PageId id = 1; id <= p.capacity(); ++id) {
      const PageMeta& m = p.meta(id);
      if (!m.in_use || m.refs[0]) continue;
      if (m.refs[1] && !m.refs[2] && !m.refs[3])
        ++fa.cache_only_pages;
      else
        ++fa.transient_pages;
    }
    ok &= fa.request_pages + fa.cache_only_pages + fa.transient_pages == fa.used_pages;
  }
  a.cached_variants = cache_.variants();
  ok &= a.request_bytes() + [&] {
    size_t b = 0;
    for (const auto& fa : a.formats) b += (fa.cache_only_pages + fa.transient_pages) * fa.page_bytes;
    return b;
  }() == a.used_bytes();
  a.reconciled = ok;
  return a;
}

void KvStore::check_invariants() const {
  std::lock_guard lock(mu_);
  check_invariants_locked();
}

void KvStore::check_invariants_locked() const {
  auto fail = [](const std::string& what) { throw std::logic_error("KvStore invariant violated: " + what); };
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  // Expected reference counts, recomputed from the holders.
  std::array<std::unordered_map<PageId, std::array<uint32_t, kNumRefKinds>>, codec::kNumPageFormats> expect;
  for (const auto& [id, s] : seqs_) {
    if (s.rows.size() != (s.tokens.size() + B - 1) / B) fail("sequence " + std::to_string(id) + " row count");
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const Row& r = s.rows[i];
      const bool last = i + 1 == s.rows.size();
      if (r.layers.size() != static_cast<size_t>(cfg_.layers)) fail("row without one page per layer");
      const bool in_pending = s.pending && (i + 1) * B > s.pending_first;  // rows an append is still writing
      if (!last && (r.filled != B || (!r.sealed && !in_pending))) fail("a non-last page is not full and sealed");
      if (r.sealed != (r.filled == B) && !in_pending) fail("sealed flag does not match fill");
      if (last && r.filled != s.tokens.size() - i * B) fail("fill of the last page");
      for (int l = 0; l < cfg_.layers; ++l) {
        const PageEntry e = r.layers[l];
        const PagePool& p = pool(e.format);
        if (!p.valid(e.id) || !p.meta(e.id).in_use) fail("a live row points to a free or invalid page");
        if (r.sealed && !p.meta(e.id).sealed) fail("a full page is not sealed");
        if (e.format != storage_format(cfg_.mode, r.tier, stale_[l])) fail("row format does not match its tier");
        ++expect[static_cast<int>(e.format)][e.id][0];
      }
      if (r.variant != PrefixCache::kNone &&
          (static_cast<size_t>(r.variant) >= cache_.handles() || cache_.row(r.variant) != r.layers))
        fail("row bound to a variant with different pages");
    }
  }
  std::vector<uint32_t> holders(cache_.handles(), 0);
  for (const auto& [id, s] : seqs_)
    for (const Row& r : s.rows)
      if (r.variant != PrefixCache::kNone) ++holders[r.variant];
  std::array<std::unordered_map<PageId, uint32_t>, codec::kNumPageFormats> cache_refs;
  cache_.check(holders, cache_refs);
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    for (const auto& [page, n] : cache_refs[f]) expect[f][page][static_cast<int>(RefKind::kCache)] = n;
  for (const auto& [pid, pages] : pins_)
    for (const PageEntry& e : pages) ++expect[static_cast<int>(e.format)][e.id][2];
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const PagePool& p = *pools_[f];
    size_t in_use = 0;
    for (PageId id = 1; id <= p.capacity(); ++id) {
      const PageMeta& m = p.meta(id);
      in_use += m.in_use ? 1 : 0;
      if (m.in_use != m.any_ref()) fail("in-use flag disagrees with reference counts");
      auto it = expect[f].find(id);
      std::array<uint32_t, kNumRefKinds> want{};
      if (it != expect[f].end()) want = it->second;
      if (conversions_in_flight_ == 0) {
        if (m.refs != want)
          fail(std::string(codec::to_string(p.format())) + " page " + std::to_string(id) + " refcounts");
      } else if (m.refs[0] != want[0] || m.refs[1] != want[1] || m.refs[2] != want[2]) {
        fail("refcounts during conversion");
      }
    }
    if (in_use != p.used_pages()) fail("pool free list disagrees with page states");
  }
  if (!accounting_locked().reconciled) fail("accounting does not reconcile");
}

}  // namespace minimakv::cache
