#include "minimakv/cache/page_pool.h"

#include <string>

namespace minimakv::cache {

const char* to_string(Tier t) {
  switch (t) {
    case Tier::kRecent: return "recent";
    case Tier::kAnchor: return "anchor";
    case Tier::kStale: return "stale";
  }
  return "?";
}

const char* to_string(RefKind k) {
  switch (k) {
    case RefKind::kRequest: return "request";
    case RefKind::kCache: return "cache";
    case RefKind::kReader: return "reader";
    case RefKind::kConversion: return "conversion";
  }
  return "?";
}

const char* to_string(KvMode m) {
  switch (m) {
    case KvMode::kBf16: return "bf16";
    case KvMode::kFp8: return "fp8";
    case KvMode::kMinima: return "minima";
  }
  return "?";
}

KvMode parse_kv_mode(std::string_view name) {
  for (KvMode m : {KvMode::kBf16, KvMode::kFp8, KvMode::kMinima})
    if (name == to_string(m)) return m;
  throw std::invalid_argument("unknown KV mode '" + std::string(name) + "' (bf16, fp8 or minima)");
}

PagePool::PagePool(PageFormat format, codec::PageGeometry geometry, size_t capacity_pages)
    : layout_(format, geometry), capacity_(capacity_pages) {
  meta_.resize(capacity_ + 1);
  free_.reserve(capacity_);
  // Lowest ids are handed out first.
  for (size_t i = capacity_; i >= 1; --i) free_.push_back(static_cast<PageId>(i));
}

void PagePool::check(PageId id, const char* where) const {
  if (!valid(id)) {
    throw InvalidArgument(std::string(where) + ": invalid " + codec::to_string(format()) + " page id " +
                          std::to_string(id));
  }
}

PageId PagePool::allocate(uint16_t layer) {
  if (free_.empty()) {
    throw OutOfCapacity(std::string("no free ") + codec::to_string(format()) + " page (capacity " +
                        std::to_string(capacity_) + ")");
  }
  const PageId id = free_.back();
  free_.pop_back();
  PageMeta& m = meta_[id];
  m = PageMeta{};
  m.in_use = true;
  m.layer = layer;
  return id;
}

void PagePool::add_ref(PageId id, RefKind kind) {
  check(id, "add_ref");
  PageMeta& m = meta_[id];
  if (!m.in_use) throw InvalidArgument("add_ref on a free page " + std::to_string(id));
  ++m.refs[static_cast<int>(kind)];
}

bool PagePool::release(PageId id, RefKind kind) {
  check(id, "release");
  PageMeta& m = meta_[id];
  uint32_t& r = m.refs[static_cast<int>(kind)];
  if (!m.in_use || r == 0) {
    throw InvalidArgument(std::string("release of a ") + to_string(kind) + " reference that page " +
                          std::to_string(id) + " does not hold");
  }
  --r;
  if (m.any_ref()) return false;
  m.in_use = false;
  m.sealed = false;
  free_.push_back(id);
  return true;
}

void PagePool::seal(PageId id) {
  check(id, "seal");
  meta_[id].sealed = true;
}

const PageMeta& PagePool::meta(PageId id) const {
  check(id, "meta");
  return meta_[id];
}

}  // namespace minimakv::cache
