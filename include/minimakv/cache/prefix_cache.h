// The prefix cache: sealed logical pages kept for reuse by later sequences with the same token prefix.
//
// Owns: the cached *variants* (one copy of a sealed logical page, its layer-page of every layer, bound to
// the page's chained prefix hash: an FP8/BF16 copy and a Stale copy per hash at most), their hash index,
// their LRU order, and the cache's reference on each of their layer-pages (RefKind::kCache, counted per
// format against a quota). The pools' metadata it references belongs to the KvStore, which serialises
// every call under its lock; the cache never touches page bytes.
// Invariants (check()): a variant is on the LRU iff nothing holds it; its holder count is the block-table
// rows bound to it plus the rebinds a checkpoint has planned; the hash index names every live variant;
// every cached layer-page is sealed; the per-format count of cached pages matches the pools.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "minimakv/cache/page_pool.h"
#include "minimakv/cache/types.h"
#include "minimakv/codec/page_format.h"

namespace minimakv::cache {

using PagePools = std::array<std::unique_ptr<PagePool>, codec::kNumPageFormats>;
using FormatCounts = std::array<size_t, codec::kNumPageFormats>;
// No limit on any format.
inline constexpr FormatCounts kNoQuota = [] {
  FormatCounts c{};
  for (size_t& x : c) x = std::numeric_limits<size_t>::max();
  return c;
}();

class PrefixCache {
 public:
  using Variant = int32_t;  // a handle; kNone for "no variant"
  static constexpr Variant kNone = -1;

  PrefixCache(PagePools& pools, FormatCounts quota, bool enabled) : pools_(pools), quota_(quota), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // The copy of `kind` (Stale, or FP8/BF16 for any other tier) cached for hash, or kNone.
  Variant find(uint64_t hash, Tier kind) const;
  bool contains(uint64_t hash) const { return by_hash_.contains(hash); }
  // The copy a new sequence installs: the FP8/BF16 one when cached (higher fidelity), else the Stale one.
  Variant best(uint64_t hash) const;
  const std::vector<PageEntry>& row(Variant v) const { return variants_[v].row; }
  Tier kind(Variant v) const { return variants_[v].kind; }

  // Caches `row` as the (hash, kind) copy, evicting unheld variants to stay within the quota. kNone when
  // caching is off, the copy exists already, or the quota cannot be met. The new variant is unheld.
  Variant bind(uint64_t hash, Tier kind, const std::vector<PageEntry>& row);
  void hold(Variant v);    // a block-table row is bound to v: off the LRU
  void unhold(Variant v);  // the last holder gone: newest on the LRU
  // A checkpoint's planned rebind: held until unplan(), so no eviction can take it meanwhile.
  void plan(Variant v);
  void unplan(Variant v) { --variants_[v].planned; }

  // Layer-pages of format f that evicting every unheld variant (but those in keep) would free.
  size_t freeable(PageFormat f, const std::unordered_set<Variant>* keep = nullptr) const;
  // Evicts the oldest unheld variants holding pages of f until `need` pages of f are free (or none is
  // left to evict); the caller checked freeable() first.
  void evict_until_free(PageFormat f, size_t need);
  size_t evict_oldest(size_t max_variants);
  void set_quota(PageFormat f, size_t layer_pages);             // evicts to fit
  std::vector<std::pair<uint64_t, Tier>> lru_snapshot() const;  // oldest first

  size_t variants() const;
  size_t cached_pages(PageFormat f) const { return cached_pages_[codec::format_index(f)]; }
  // Checks the invariants above; row_holders[v] is the number of block-table rows bound to v, and the
  // cache's references are added to expected_cache_refs[format][page]. Throws std::logic_error.
  void check(const std::vector<uint32_t>& row_holders,
             std::array<std::unordered_map<PageId, uint32_t>, codec::kNumPageFormats>& expected_cache_refs) const;
  size_t handles() const { return variants_.size(); }

 private:
  struct Entry {
    uint64_t hash = 0;
    Tier kind = Tier::kRecent;  // kStale, or kRecent for the FP8/BF16 copy
    std::vector<PageEntry> row;
    uint32_t holders = 0;  // rows bound to it, plus planned rebinds of a checkpoint in flight
    uint32_t planned = 0;
    Variant prev = kNone, next = kNone;
    bool in_lru = false;
    bool used = false;
  };
  void evict(Variant v);
  void lru_push(Variant v);
  void lru_remove(Variant v);
  void add_ref(PageEntry e);
  void release(PageEntry e);

  PagePools& pools_;
  FormatCounts quota_;
  bool enabled_;
  std::vector<Entry> variants_;
  std::vector<Variant> free_variants_;
  std::unordered_map<uint64_t, std::array<Variant, 2>> by_hash_;  // [FP8/BF16 copy, Stale copy]
  Variant lru_head_ = kNone, lru_tail_ = kNone;                   // head = oldest
  FormatCounts cached_pages_{};
};

}  // namespace minimakv::cache
