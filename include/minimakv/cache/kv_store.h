// The paged KV store: sequences, block tables, the ownership protocol, prefix cache and accounting.
//
// Owns: one PagePool per physical format (BF16, FP8, TQ3), every sequence's block table, the prefix
// cache and the reader pins. Implements the paper's Algorithm 1:
//   Append   writes tokens' K/V into the Recent page (quantize on write), allocating when it is full;
//   Retier   FP8 -> TQ3 copy-before-publish: conversion reference on the source, destination allocated
//            and fully written, block-table entry swapped, source released (it is freed only once its
//            readers and the conversion have cleared);
//   Promote  TQ3 -> FP8: reconstruct, publish, retire the compressed reference;
//   Seal     a full page becomes immutable and binds to its chained prefix hash;
//   Fork     a new sequence shares every full page; the partial last page is copied (copy-on-write);
//   Finish   releases the request references; cached pages stay until evicted.
// Invariants (check_invariants(), run after every mutating call in debug builds):
//   * every logical page of a live sequence is addressable: one in-use layer-page per layer;
//   * a layer-page is on its pool's free list iff its request, cache, reader and conversion counts are
//     all zero, and each count equals the number of holders of that kind;
//   * full pages are sealed and never written again; a TQ3 page is always full and sealed;
//   * Stale rows are TQ3 except in protected layers, which are always FP8;
//   * accounting computed from scratch equals the incremental counters, to the byte.
// Demoting a page shared by several sequences changes only the row of the sequence the plan names
// (a per-holder decision); the TQ3 copy binds to the page's prefix hash, so when another holder is
// demoted it rebinds to that copy instead of converting again (and promotion rebinds to a cached FP8
// copy the same way).
// Thread safety: one mutex serialises metadata; apply() converts bytes outside the lock (sources are
// sealed, destinations private) and re-validates each entry before publishing; readers pin a sequence
// (reader references) and read page bytes without the lock. One writer appends to a given sequence.
// Page bytes live in the host pools, or, when the store is built with a PageStorage, in that storage
// (device memory): the store then keeps metadata only, hands copy-on-write and conversions to the
// storage, and the engine writes appended tokens itself at the slots claim_layer_slots() returns.
// Errors throw (OutOfCapacity, InvalidArgument) and leave the store unchanged.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "minimakv/cache/page_pool.h"
#include "minimakv/cache/page_storage.h"
#include "minimakv/cache/types.h"
#include "minimakv/codec/page_codec.h"

namespace minimakv::cache {

struct StoreConfig {
  int layers = 2;
  int kv_heads = 2;
  int head_dim = 64;
  int tokens_per_page = 16;
  // Capacity of each format's pool, in layer-pages, indexed by format (pages_of for one by name).
  std::array<size_t, codec::kNumPageFormats> pages{};
  size_t& pages_of(PageFormat f) { return pages[static_cast<size_t>(f)]; }
  size_t pages_of(PageFormat f) const { return pages[static_cast<size_t>(f)]; }
  // Most layer-pages of each format the prefix cache may hold (counted once per page).
  std::array<size_t, codec::kNumPageFormats> cache_quota{
      std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max()};
  std::vector<int> protected_layers;  // stay FP8 in every tier
  KvMode mode = KvMode::kMinima;
  bool prefix_caching = true;
  uint64_t rotation_seed = codec::kDefaultRotationSeed;
  uint64_t model_key = 0;  // mixed into prefix hashes with the codec identity
  codec::Tq3Policy tq3_policy{};
};

struct LogicalPageInfo {
  Tier tier = Tier::kRecent;
  uint32_t filled = 0;
  bool sealed = false;
  uint64_t hash = 0;  // 0 = not bound to the prefix cache
  std::vector<PageEntry> layers;
};

struct FormatAccounting {
  size_t capacity_pages = 0;
  size_t used_pages = 0;
  size_t free_pages = 0;
  size_t request_pages = 0;     // held by at least one live sequence
  size_t cache_only_pages = 0;  // held by the prefix cache and nobody else (evictable)
  size_t transient_pages = 0;   // held only by readers or a conversion in flight
  size_t page_bytes = 0;
  size_t used_bytes() const { return used_pages * page_bytes; }
};

struct Accounting {
  std::array<FormatAccounting, codec::kNumPageFormats> formats{};
  std::array<size_t, kNumTiers> tier_bytes{};  // distinct request-held layer-pages by tier of first holder
  size_t block_table_bytes = 0;                // host metadata of live block tables
  size_t live_tokens = 0;
  size_t live_sequences = 0;
  size_t cached_variants = 0;
  size_t request_bytes() const;         // sum of tier_bytes
  size_t used_bytes() const;            // every in-use page of every pool
  double bytes_per_live_token() const;  // (request bytes + block tables) / live tokens
  bool reconciled = false;              // tiers + cache-only + transient == used, in every pool
};

struct CompactLayerView {
  // Per format, the physical ids of this layer's pages in logical order, and their logical indices.
  std::array<std::vector<PageId>, codec::kNumPageFormats> ids;
  std::array<std::vector<uint32_t>, codec::kNumPageFormats> logical;
};

class KvStore;

// The block table a pin took, in one allocation: for each logical page the entries of the layers the
// pin holds (every layer, or the one layer of a layer pin). at(page, layer) takes a layer number and
// throws for a layer the pin does not hold; row i (operator[]) spans the held layers only.
class PinnedRows {
 public:
  size_t size() const { return layers_ ? flat_.size() / layers_ : 0; }
  bool empty() const { return flat_.empty(); }
  std::span<const PageEntry> operator[](size_t i) const { return {flat_.data() + i * layers_, layers_}; }
  std::span<const PageEntry> back() const { return (*this)[size() - 1]; }
  bool holds(int layer) const { return layer >= first_layer_ && static_cast<size_t>(layer - first_layer_) < layers_; }
  PageEntry at(size_t page, int layer) const {
    if (!holds(layer) || page >= size()) throw_out_of_range(page, layer);
    return flat_[page * layers_ + static_cast<size_t>(layer - first_layer_)];
  }
  class iterator {
   public:
    iterator(const PinnedRows* t, size_t i) : t_(t), i_(i) {}
    std::span<const PageEntry> operator*() const { return (*t_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iterator&) const = default;

   private:
    const PinnedRows* t_;
    size_t i_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }

 private:
  friend class KvStore;
  [[noreturn]] void throw_out_of_range(size_t page, int layer) const;
  std::vector<PageEntry> flat_;
  size_t layers_ = 0;
  int first_layer_ = 0;
};

// Reader pin on the layer-pages of a sequence (every layer, or one), taken at pin time; released on
// destruction.
class PinnedSequence {
 public:
  PinnedSequence(PinnedSequence&& o) noexcept;
  PinnedSequence& operator=(PinnedSequence&&) = delete;
  ~PinnedSequence();
  size_t length() const { return length_; }
  uint32_t last_page_fill() const { return last_fill_; }
  const PinnedRows& rows() const { return rows_; }  // [logical page][held layer]; at(page, layer)
  // The pinned pages of layer l grouped by format (throws for a layer the pin does not hold).
  CompactLayerView layer(int l) const;
  std::span<const uint8_t> bytes(PageEntry e) const;

 private:
  friend class KvStore;
  PinnedSequence(const KvStore* s) : store_(s) {}
  const KvStore* store_;
  uint64_t pin_id_ = 0;
  size_t length_ = 0;
  uint32_t last_fill_ = 0;
  PinnedRows rows_;
};

class KvStore {
 public:
  explicit KvStore(StoreConfig cfg, std::unique_ptr<PageStorage> storage = nullptr);
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;
  ~KvStore();

  const StoreConfig& config() const { return cfg_; }
  const codec::PageGeometry& geometry() const { return geo_; }
  const PagePool& pool(PageFormat f) const { return *pools_[static_cast<int>(f)]; }
  // The external byte storage, or null when the bytes live in the host pools.
  PageStorage* storage() const { return storage_.get(); }
  std::span<const codec::Rotation> rotations(int layer) const;
  bool is_protected(int layer) const { return protected_[layer]; }
  // Format of newly appended pages: BF16 in bf16 mode, else FP8.
  PageFormat append_format() const { return cache::append_format(cfg_.mode); }

  // ---- sequences
  SeqId create_sequence();
  // Tokens covered by the longest run of cached full pages for this token prefix (lookup only).
  size_t match_prefix(std::span<const int32_t> tokens) const;
  // A new sequence whose leading full pages are installed from the prefix cache. Returns the sequence
  // and the number of tokens it already holds (a multiple of tokens_per_page); append the rest.
  std::pair<SeqId, size_t> create_sequence_with_prefix(std::span<const int32_t> tokens);
  // ids: n tokens; k, v: [n][layers][kv_heads][head_dim] floats. Same as the three calls below.
  void append(SeqId seq, std::span<const int32_t> ids, std::span<const float> k, std::span<const float> v);
  // The engine's append, one layer at a time as the forward pass produces K/V: begin_append reserves the
  // positions in every layer (capacity checked first; the length grows at once, so a pin taken for the
  // chunk's own attention sees them), write_layer quantizes one layer's K/V ([n][kv_heads][head_dim]),
  // commit_append seals the pages that became full once every layer is written. A layer's attention
  // must only run after that layer's write_layer.
  void begin_append(SeqId seq, std::span<const int32_t> ids);
  // begin_append of several distinct sequences at once (batched decode): capacity for all of them is
  // checked first, so on failure no sequence changes.
  struct AppendChunk {
    SeqId seq;
    std::span<const int32_t> ids;
  };
  void begin_append_batch(std::span<const AppendChunk> chunks);
  void write_layer(SeqId seq, int layer, std::span<const float> k, std::span<const float> v);
  // For external storage: marks `layer` of the pending append as written and returns, per pending
  // token in order, the page it belongs in and its slot there; the caller writes the bytes.
  struct Slot {
    PageEntry page;
    uint32_t token;
  };
  std::vector<Slot> claim_layer_slots(SeqId seq, int layer);
  void commit_append(SeqId seq);
  SeqId fork(SeqId parent);
  void finish(SeqId seq);

  // ---- tier transitions (the controller's plan, executed as one batch)
  struct Transition {
    SeqId seq = 0;
    uint32_t page = 0;
    Tier target = Tier::kRecent;
  };
  struct ApplyResult {
    size_t converted = 0;  // FP8 -> TQ3 conversions (logical pages)
    size_t promoted = 0;   // TQ3 -> FP8 reconstructions
    size_t rebound = 0;    // transitions satisfied by a cached copy, no conversion
    size_t retagged = 0;   // Recent <-> Anchor, no bytes moved
    size_t dropped = 0;    // entries changed concurrently (sequence finished) and skipped
  };
  ApplyResult apply(std::span<const Transition> plan);

  // ---- readers
  // Pins every layer-page of the sequence, or with only_layer >= 0 just that layer's pages (rows() then
  // holds that layer's entries alone: a per-layer reader such as the GPU attention needs no more, and a
  // decode step that pins each layer of each sequence copies each block-table entry once).
  PinnedSequence pin(SeqId seq, int only_layer = -1) const;

  // ---- prefix cache
  size_t evict_cached(size_t max_variants);                     // oldest first, only variants no sequence holds
  void set_cache_quota(PageFormat f, size_t layer_pages);       // evicts to fit
  std::vector<std::pair<uint64_t, Tier>> lru_snapshot() const;  // oldest first

  // ---- introspection
  bool is_live(SeqId seq) const;
  std::vector<SeqId> live_sequences() const;
  size_t length(SeqId seq) const;
  std::vector<int32_t> tokens(SeqId seq) const;  // the token ids the sequence holds, in order
  std::vector<LogicalPageInfo> block_table(SeqId seq) const;
  CompactLayerView layer_view(SeqId seq, int layer) const;
  std::array<uint32_t, kNumRefKinds> refs(PageEntry e) const;
  Accounting accounting() const;
  // Layer-pages of format f an allocation could get now: free ones plus those evicting prefix-cache
  // variants no sequence holds would free (O(cached variants)).
  size_t available_pages(PageFormat f) const;
  void check_invariants() const;  // throws std::logic_error naming the violated invariant
  uint64_t operations() const { return ops_; }

 private:
  friend class PinnedSequence;
  struct Row {
    Tier tier = Tier::kRecent;
    uint32_t filled = 0;
    bool sealed = false;
    uint64_t hash = 0;
    int32_t variant = -1;  // prefix-cache variant this row is bound to
    std::vector<PageEntry> layers;
  };
  struct Sequence {
    std::vector<Row> rows;
    std::vector<int32_t> tokens;
    bool live = true;
    size_t pending = 0;         // tokens of an append in progress
    size_t pending_first = 0;   // their first position
    std::vector<bool> written;  // layers written so far
  };
  struct Variant {  // one cached copy of a sealed logical page: FP8 (kind Recent) or Stale
    uint64_t hash = 0;
    Tier kind = Tier::kRecent;
    std::vector<PageEntry> row;
    uint32_t holders = 0;  // rows bound to it, plus planned rebinds of a checkpoint in flight
    uint32_t planned = 0;
    int32_t prev = -1, next = -1;
    bool in_lru = false;
    bool used = false;
  };

  PagePool& pool_mut(PageFormat f) { return *pools_[static_cast<int>(f)]; }
  Sequence& live_seq(SeqId seq, const char* where);
  const Sequence& live_seq(SeqId seq, const char* where) const;
  uint64_t page_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  void add_ref(PageEntry e, RefKind k);
  void release(PageEntry e, RefKind k);
  void release_row(Row& r);
  // Frees cached pages until `need` pages of format f are free; throws OutOfCapacity (changing
  // nothing) when even evicting every unheld variant would not free enough.
  void reserve_free(PageFormat f, size_t need);
  size_t freeable_by_eviction(PageFormat f, const std::unordered_set<int32_t>* keep = nullptr) const;
  // prefix-cache internals
  int32_t find_variant(uint64_t hash, Tier kind) const;
  int32_t bind_variant(uint64_t hash, Tier kind, const std::vector<PageEntry>& row);
  void evict_variant(int32_t v);
  void hold(Row& r, int32_t v);
  void unhold(Row& r);
  void lru_push(int32_t v);
  void lru_remove(int32_t v);
  void seal_row(Sequence& s, size_t index);
  void unpin(uint64_t pin_id) const;
  std::span<const uint8_t> page_bytes(PageEntry e) const { return pool(e.format).bytes(e.id); }
  void debug_check() const;
  Accounting accounting_locked() const;
  void check_invariants_locked() const;

  void check_layer_write(const Sequence& s, int layer, const char* where) const;
  // Page and slot of every token of the pending append in `layer`, in order.
  std::vector<Slot> pending_slots(const Sequence& s, int layer) const;

  StoreConfig cfg_;
  codec::PageGeometry geo_;
  std::unique_ptr<PageStorage> storage_;
  std::vector<bool> protected_;
  std::array<std::unique_ptr<PagePool>, codec::kNumPageFormats> pools_;
  std::vector<std::vector<codec::Rotation>> rotations_;  // [layer][kv head]
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 1;
  std::vector<Variant> variants_;
  std::vector<int32_t> free_variants_;
  std::unordered_map<uint64_t, std::array<int32_t, 2>> by_hash_;  // [FP8/BF16 copy, Stale copy]
  int32_t lru_head_ = -1, lru_tail_ = -1;                         // head = oldest
  std::array<size_t, codec::kNumPageFormats> cached_pages_{};
  // Reader pins: id -> the pinned layer-pages, viewed in the pin's own table (a PinnedSequence keeps
  // that buffer, across moves, until its destructor has called unpin). Mutable: pinning is logically
  // const.
  mutable std::unordered_map<uint64_t, std::span<const PageEntry>> pins_;
  mutable uint64_t next_pin_ = 1;
  mutable std::mutex mu_;
  std::mutex apply_mu_;
  size_t conversions_in_flight_ = 0;
  uint64_t ops_ = 0;
};

}  // namespace minimakv::cache
