// One forward pass's handle on the paged KV store: the step context every backend's attention takes.
//
// Owns: the append of the pass's token chunks (one per sequence) from the moment the store accepted
// them (capacity for all of them checked first) until it commits or rolls back. For each layer it hands
// out the chunk's write slots (where the caller writes the K/V bytes, into the store's PageStorage) and
// one read-only paged view of a sequence's layer (its pages in logical order, pinned), which the CPU
// kernels and both GPU kernels read.
// Invariants, enforced here rather than by call-order rules: a layer's slots are handed out once per
// sequence; a view taken after them covers the chunk's own tokens; commit() refuses until every layer of
// every sequence was written, then seals the pages that became full (prefix cache); a step destroyed
// uncommitted commits itself when every layer was written and no exception is unwinding, and otherwise
// rolls the append back (the tokens and the pages it added are gone, the store is as before the step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/cache/page_storage.h"
#include "minimakv/cache/types.h"

namespace minimakv::codec {
struct PageGeometry;
}

namespace minimakv::cache {

class KvStore;
struct StoreConfig;
struct CompactLayerView;

// The pages one layer of one sequence reads, pinned for the view's lifetime: page(i) is logical page i,
// every page full but the last, which holds last_page_fill() tokens.
class PagedView {
 public:
  PagedView(PagedView&&) noexcept;
  PagedView& operator=(PagedView&&) = delete;
  ~PagedView();
  int layer() const { return layer_; }
  size_t length() const { return length_; }  // tokens
  size_t pages() const { return entries_.size(); }
  uint32_t last_page_fill() const { return last_fill_; }
  std::span<const PageEntry> entries() const { return entries_; }
  PageEntry page(size_t logical) const;  // throws InvalidArgument past the last page
  uint32_t fill(size_t logical) const;   // tokens in logical page i
  CompactLayerView by_format() const;    // page ids grouped by format, with their logical indices

 private:
  friend class KvStore;
  explicit PagedView(const KvStore* store) : store_(store) {}
  const KvStore* store_;
  uint64_t pin_id_ = 0;
  int layer_ = 0;
  size_t length_ = 0;
  uint32_t last_fill_ = 0;
  uint32_t tokens_per_page_ = 0;
  std::vector<PageEntry> entries_;
};

class ForwardStep {
 public:
  ForwardStep(ForwardStep&& o) noexcept;
  ForwardStep& operator=(ForwardStep&&) = delete;
  ~ForwardStep();

  size_t size() const { return seqs_.size(); }
  SeqId seq(size_t i) const { return seqs_.at(i); }
  const StoreConfig& config() const;
  const codec::PageGeometry& geometry() const;
  PageFormat append_format() const;
  PageStorage& storage() const;

  // Where sequence i's chunk goes in `layer`, one slot per token in order; once per (i, layer).
  std::vector<WriteSlot> write_slots(size_t i, int layer);
  // Sequence i's pages of `layer` (its chunk's tokens included), pinned until the view is destroyed.
  PagedView view(size_t i, int layer) const;
  // Seals what became full and ends the step; throws InvalidArgument if a layer was not written.
  void commit();
  bool open() const { return open_; }

 private:
  friend class KvStore;
  ForwardStep(KvStore* store, std::vector<SeqId> seqs, int layers);
  KvStore* store_;
  std::vector<SeqId> seqs_;
  std::vector<uint8_t> written_;  // [sequence][layer]
  int layers_;
  bool open_ = true;
  int uncaught_ = 0;  // std::uncaught_exceptions() when the step began
};

}  // namespace minimakv::cache
