#include "minimakv/cache/prefix_cache.h"

#include <stdexcept>
#include <string>

namespace minimakv::cache {

namespace {
constexpr int kFp8Slot = 0;
constexpr int kStaleSlot = 1;
int slot_of(Tier kind) {
  return kind == Tier::kStale ? kStaleSlot : kFp8Slot;
}
}  // namespace

PrefixCache::Variant PrefixCache::find(uint64_t hash, Tier kind) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? kNone : it->second[slot_of(kind)];
}

PrefixCache::Variant PrefixCache::best(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return kNone;
  return it->second[kFp8Slot] != kNone ? it->second[kFp8Slot] : it->second[kStaleSlot];
}

void PrefixCache::add_ref(PageEntry e) {
  PagePool& p = *pools_[codec::format_index(e.format)];
  if (p.meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0) ++cached_pages_[codec::format_index(e.format)];
  p.add_ref(e.id, RefKind::kCache);
}

void PrefixCache::release(PageEntry e) {
  PagePool& p = *pools_[codec::format_index(e.format)];
  p.release(e.id, RefKind::kCache);
  if (!p.meta(e.id).in_use || p.meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0)
    --cached_pages_[codec::format_index(e.format)];
}

void PrefixCache::lru_push(Variant v) {
  Entry& x = variants_[v];
  x.prev = lru_tail_;
  x.next = kNone;
  if (lru_tail_ != kNone)
    variants_[lru_tail_].next = v;
  else
    lru_head_ = v;
  lru_tail_ = v;
  x.in_lru = true;
}

void PrefixCache::lru_remove(Variant v) {
  Entry& x = variants_[v];
  if (!x.in_lru) return;
  if (x.prev != kNone)
    variants_[x.prev].next = x.next;
  else
    lru_head_ = x.next;
  if (x.next != kNone)
    variants_[x.next].prev = x.prev;
  else
    lru_tail_ = x.prev;
  x.prev = x.next = kNone;
  x.in_lru = false;
}

void PrefixCache::hold(Variant v) {
  if (variants_[v].holders++ == 0) lru_remove(v);
}

void PrefixCache::unhold(Variant v) {
  if (--variants_[v].holders == 0) lru_push(v);
}

void PrefixCache::plan(Variant v) {
  ++variants_[v].planned;
  hold(v);
}

void PrefixCache::evict(Variant v) {
  Entry& x = variants_[v];
  lru_remove(v);
  for (const PageEntry& e : x.row) release(e);
  auto it = by_hash_.find(x.hash);
  it->second[slot_of(x.kind)] = kNone;
  if (it->second[0] == kNone && it->second[1] == kNone) by_hash_.erase(it);
  x = Entry{};
  free_variants_.push_back(v);
}

PrefixCache::Variant PrefixCache::bind(uint64_t hash, Tier kind, const std::vector<PageEntry>& row) {
  if (!enabled_) return kNone;
  if (find(hash, kind) != kNone) return kNone;  // one copy per (hash, kind): e.g. two holders converted in one plan
  // Quota: count the pages of each format this binding would newly cache, evict LRU to fit, else skip.
  FormatCounts extra{};
  for (const PageEntry& e : row)
    if (pools_[codec::format_index(e.format)]->meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0)
      ++extra[codec::format_index(e.format)];
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    while (extra[f] && cached_pages_[f] + extra[f] > quota_[f] && lru_head_ != kNone) evict(lru_head_);
    if (extra[f] && cached_pages_[f] + extra[f] > quota_[f]) return kNone;
  }
  Variant v;
  if (!free_variants_.empty()) {
    v = free_variants_.back();
    free_variants_.pop_back();
  } else {
    v = static_cast<Variant>(variants_.size());
    variants_.emplace_back();
  }
  Entry& x = variants_[v];
  x = Entry{};
  x.used = true;
  x.hash = hash;
  x.kind = kind == Tier::kStale ? Tier::kStale : Tier::kRecent;
  x.row = row;
  for (const PageEntry& e : row) add_ref(e);
  auto& slots = by_hash_.try_emplace(hash, std::array<Variant, 2>{kNone, kNone}).first->second;
  slots[slot_of(kind)] = v;
  lru_push(v);  // no holder yet; the caller holds it right away when a row refers to it
  return v;
}

size_t PrefixCache::freeable(PageFormat f, const std::unordered_set<Variant>* keep) const {
  // Pages of format f whose only references are cache references of variants no sequence holds. Most
  // such pages belong to one variant (cache count 1) and are counted without a lookup; the few shared
  // by several variants (a protected layer's page in a hash's FP8 and Stale copies) are tallied.
  const PagePool& pool = *pools_[codec::format_index(f)];
  size_t n = 0;
  std::unordered_map<PageId, uint32_t> shared;
  for (Variant v = lru_head_; v != kNone; v = variants_[v].next) {
    if (keep && keep->contains(v)) continue;
    for (const PageEntry& e : variants_[v].row) {
      if (e.format != f) continue;
      const auto& m = pool.meta(e.id);
      if (m.refs[0] || m.refs[2] || m.refs[3]) continue;
      if (m.refs[1] == 1)
        ++n;
      else
        ++shared[e.id];
    }
  }
  for (const auto& [id, cnt] : shared)
    if (pool.meta(id).refs[1] == cnt) ++n;
  return n;
}

void PrefixCache::evict_until_free(PageFormat f, size_t need) {
  const PagePool& pool = *pools_[codec::format_index(f)];
  Variant v = lru_head_;
  while (pool.free_pages() < need && v != kNone) {
    const Variant next = variants_[v].next;
    bool has_f = false;
    for (const PageEntry& e : variants_[v].row) has_f |= e.format == f;
    if (has_f) evict(v);
    v = next;
  }
}

size_t PrefixCache::evict_oldest(size_t max_variants) {
  size_t n = 0;
  while (n < max_variants && lru_head_ != kNone) {
    evict(lru_head_);
    ++n;
  }
  return n;
}

void PrefixCache::set_quota(PageFormat f, size_t layer_pages) {
  const int fi = codec::format_index(f);
  quota_[fi] = layer_pages;
  Variant v = lru_head_;
  while (cached_pages_[fi] > layer_pages && v != kNone) {
    const Variant next = variants_[v].next;
    bool has_f = false;
    for (const PageEntry& e : variants_[v].row) has_f |= e.format == f;
    if (has_f) evict(v);
    v = next;
  }
}

std::vector<std::pair<uint64_t, Tier>> PrefixCache::lru_snapshot() const {
  std::vector<std::pair<uint64_t, Tier>> out;
  for (Variant v = lru_head_; v != kNone; v = variants_[v].next) out.emplace_back(variants_[v].hash, variants_[v].kind);
  return out;
}

size_t PrefixCache::variants() const {
  size_t n = 0;
  for (const Entry& x : variants_) n += x.used ? 1 : 0;
  return n;
}

void PrefixCache::check(
    const std::vector<uint32_t>& row_holders,
    std::array<std::unordered_map<PageId, uint32_t>, codec::kNumPageFormats>& expected_cache_refs) const {
  auto fail = [](const std::string& what) { throw std::logic_error("KvStore invariant violated: " + what); };
  size_t lru_len = 0;
  for (Variant v = lru_head_; v != kNone; v = variants_[v].next) {
    if (variants_[v].holders != 0) fail("a held variant is on the LRU");
    ++lru_len;
  }
  size_t lru_expected = 0;
  for (size_t v = 0; v < variants_.size(); ++v) {
    const Entry& x = variants_[v];
    if (!x.used) continue;
    const uint32_t rows = v < row_holders.size() ? row_holders[v] : 0;
    if (x.holders != rows + x.planned) fail("variant holder count");
    if ((x.holders == 0) != x.in_lru) fail("unheld variant missing from the LRU");
    lru_expected += x.holders == 0 ? 1 : 0;
    auto it = by_hash_.find(x.hash);
    if (it == by_hash_.end() || it->second[slot_of(x.kind)] != static_cast<Variant>(v)) fail("hash index");
    for (const PageEntry& e : x.row) {
      if (!pools_[codec::format_index(e.format)]->meta(e.id).sealed) fail("a cached page is not sealed");
      ++expected_cache_refs[codec::format_index(e.format)][e.id];
    }
  }
  if (lru_len != lru_expected) fail("LRU length");
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const PagePool& p = *pools_[f];
    size_t cached = 0;
    for (PageId id = 1; id <= p.capacity(); ++id) cached += p.meta(id).refs[static_cast<int>(RefKind::kCache)] ? 1 : 0;
    if (cached != cached_pages_[f]) fail("cached page counter");
  }
}

}  // namespace minimakv::cache
