// The metadata of a fixed-capacity pool of layer-pages of one physical format: which pages are free, and
// each page's reference counts by kind. The bytes live in a cache::PageStorage.
//
// Owns: the free list and per-page metadata (sized once, at construction). Invariants: page 0 is the
// null page, never allocated; a page is on the free list iff all its reference counts are zero;
// allocate() never allocates heap memory. Not thread-safe: the KvStore serialises calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "minimakv/cache/types.h"
#include "minimakv/codec/page_layout.h"

namespace minimakv::cache {

struct PageMeta {
  std::array<uint32_t, kNumRefKinds> refs{};
  bool in_use = false;
  bool sealed = false;  // immutable: full and published
  uint16_t layer = 0;   // the attention layer this page stores (accounting)
  bool any_ref() const { return refs[0] | refs[1] | refs[2] | refs[3]; }
};

class PagePool {
 public:
  PagePool(PageFormat format, codec::PageGeometry geometry, size_t capacity_pages);
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  PageFormat format() const { return layout_.format(); }
  const codec::PageLayout& layout() const { return layout_; }
  size_t capacity() const { return capacity_; }
  size_t free_pages() const { return free_.size(); }
  size_t used_pages() const { return capacity_ - free_.size(); }
  size_t page_bytes() const { return layout_.bytes(); }

  // Takes a free page (refs all zero, unsealed); the caller adds the first reference. Throws
  // OutOfCapacity when the free list is empty.
  PageId allocate(uint16_t layer);
  void add_ref(PageId id, RefKind kind);
  // Drops one reference; returns true when the page went back to the free list.
  bool release(PageId id, RefKind kind);
  void seal(PageId id);

  const PageMeta& meta(PageId id) const;
  bool valid(PageId id) const { return id != kNullPage && id <= capacity_; }

  // Free-list order (next allocation first), for tests that assert exact ids.
  std::vector<PageId> free_list_snapshot() const { return {free_.rbegin(), free_.rend()}; }

 private:
  void check(PageId id, const char* where) const;
  codec::PageLayout layout_;
  size_t capacity_;
  std::vector<PageMeta> meta_;    // capacity + 1 entries; entry 0 is the null page's
  std::vector<PageId> free_;      // stack: back() is allocated next
};

}  // namespace minimakv::cache
