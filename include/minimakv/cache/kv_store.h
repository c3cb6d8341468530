// The paged KV store: sequences, block tables, the ownership protocol and accounting; metadata only.
//
// Owns: the metadata of one PagePool per page format, every sequence's block table, the reader pins, the
// prefix cache (cache::PrefixCache) and a PageStorage holding the bytes (cache::HostPageStorage unless
// the caller gives one, e.g. the CUDA backend's device pools). The store never touches a page byte: it
// hands every byte operation of its protocol (copy-on-write, conversions) to the storage, and appended
// tokens are written by the caller at the write slots of a ForwardStep. Implements the paper's
// Algorithm 1:
//   Append   begin_step() reserves the chunk's positions (allocating pages when the last is full); the
//            step hands out each layer's write slots and paged views, then commits (or rolls back);
//   Retier   FP8 -> TQ3 copy-before-publish: conversion reference on the source, destination allocated
//            and fully written, block-table entry swapped, source released (it is freed only once its
//            readers and the conversion have cleared);
//   Promote  TQ3 -> FP8: reconstruct, publish, retire the compressed reference;
//   Seal     a full page becomes immutable and binds to its chained prefix hash (at commit);
//   Fork     a new sequence shares every full page; the partial last page is copied (copy-on-write);
//   Finish   releases the request references; cached pages stay until evicted.
// Invariants (check_invariants(), run after every mutating call in debug builds):
//   * every logical page of a live sequence is addressable: one in-use layer-page per layer;
//   * a layer-page is on its pool's free list iff its request, cache, reader and conversion counts are
//     all zero, and each count equals the number of holders of that kind;
//   * full pages are sealed and never written again; a TQ3 page is always full and sealed;
//   * each page is in the format cache::storage_format() gives its tier and layer;
//   * accounting computed from scratch equals the incremental counters, to the byte.
// Demoting a page shared by several sequences changes only the row of the sequence the plan names
// (a per-holder decision); the TQ3 copy binds to the page's prefix hash, so when another holder is
// demoted it rebinds to that copy instead of converting again (and promotion rebinds to a cached FP8
// copy the same way).
// Thread safety: one mutex serialises metadata; apply() converts bytes outside the lock (sources are
// sealed, destinations private) and re-validates each entry before publishing; readers pin pages
// (reader references) and read their bytes without the lock. One step at a time appends to a sequence.
// Errors throw (OutOfCapacity, InvalidArgument) and leave the store unchanged.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "minimakv/cache/forward_step.h"
#include "minimakv/cache/host_page_storage.h"
#include "minimakv/cache/page_pool.h"
#include "minimakv/cache/page_storage.h"
#include "minimakv/cache/prefix_cache.h"
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
  FormatCounts cache_quota = kNoQuota;
  std::vector<int> protected_layers;  // stay FP8 in every tier
  std::vector<int> tq4_layers;        // Stale pages in TQ4 instead of TQ3 (minima)
  KvMode mode = KvMode::kMinima;
  bool prefix_caching = true;
  // Each layer's Stale format under `mode` (storage_format's layer_stale): the append format for
  // protected layers, TQ4 for tq4_layers, else kDefaultStaleFormat. Throws InvalidArgument for a layer
  // out of range or named by both lists.
  std::vector<PageFormat> stale_formats() const;
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

// The block table a pin took, in one allocation: for each logical page the entries of every layer.
// at(page, layer) throws for an index out of range; row i (operator[]) spans the layers.
class PinnedRows {
 public:
  size_t size() const { return layers_ ? flat_.size() / layers_ : 0; }
  bool empty() const { return flat_.empty(); }
  std::span<const PageEntry> operator[](size_t i) const { return {flat_.data() + i * layers_, layers_}; }
  std::span<const PageEntry> back() const { return (*this)[size() - 1]; }
  PageEntry at(size_t page, int layer) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers_ || page >= size()) throw_out_of_range(page, layer);
    return flat_[page * layers_ + static_cast<size_t>(layer)];
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
};

// Reader pin on every layer-page of a sequence, taken at pin time; released on destruction. (A reader
// of one layer takes a PagedView instead.) bytes() reads a page of a store whose bytes are in host
// memory, and throws for any other storage.
class PinnedSequence {
 public:
  PinnedSequence(PinnedSequence&& o) noexcept;
  PinnedSequence& operator=(PinnedSequence&&) = delete;
  ~PinnedSequence();
  size_t length() const { return length_; }
  uint32_t last_page_fill() const { return last_fill_; }
  const PinnedRows& rows() const { return rows_; }  // [logical page][layer]; at(page, layer)
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
  // Without a storage the store keeps its bytes in a HostPageStorage of its own.
  explicit KvStore(StoreConfig cfg, std::unique_ptr<PageStorage> storage = nullptr);
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;
  ~KvStore();

  const StoreConfig& config() const { return cfg_; }
  const codec::PageGeometry& geometry() const { return geo_; }
  const PagePool& pool(PageFormat f) const { return *pools_[codec::format_index(f)]; }
  // Where the page bytes live, and the same storage when it is host memory (else null).
  PageStorage& storage() const { return *storage_; }
  HostPageStorage* host_storage() const { return host_; }
  // Whether a layer's pages keep the append format in every tier (never converted).
  bool is_protected(int layer) const { return stale_[layer] == append_format(); }
  PageFormat stale_format(int layer) const { return stale_[layer]; }
  // Format of newly appended pages: BF16 in bf16 mode, else FP8.
  PageFormat append_format() const { return cache::append_format(cfg_.mode); }

  // ---- sequences
  SeqId create_sequence();
  // Tokens covered by the longest run of cached full pages for this token prefix (lookup only).
  size_t match_prefix(std::span<const int32_t> tokens) const;
  // A new sequence whose leading full pages are installed from the prefix cache. Returns the sequence
  // and the number of tokens it already holds (a multiple of tokens_per_page); append the rest.
  std::pair<SeqId, size_t> create_sequence_with_prefix(std::span<const int32_t> tokens);
  // One forward step's appends: capacity for every chunk is checked first (OutOfCapacity, InvalidArgument
  // for a finished sequence, one appearing twice or one with a step in flight, all leaving the store
  // unchanged); then each sequence's length grows at once, so a view taken for the chunk's own attention
  // sees it. The returned step hands out write slots and views, and commits or rolls back
  // (cache/forward_step.h). Chunks may be empty (nothing is appended for them).
  struct AppendChunk {
    SeqId seq;
    std::span<const int32_t> ids;
  };
  ForwardStep begin_step(std::span<const AppendChunk> chunks);
  // A whole append in one call on a host store: ids, n tokens; k, v: [n][layers][kv_heads][head_dim].
  void append(SeqId seq, std::span<const int32_t> ids, std::span<const float> k, std::span<const float> v);
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
  // Pins every layer-page of the sequence.
  PinnedSequence pin(SeqId seq) const;
  // Pins the pages of one layer of the sequence (the paged view attention reads).
  PagedView view(SeqId seq, int layer) const;

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
  std::array<uint32_t, kNumRefKinds> refs(PageEntry e) const;
  Accounting accounting() const;
  // Layer-pages of format f an allocation could get now: free ones plus those evicting prefix-cache
  // variants no sequence holds would free (O(cached variants)).
  size_t available_pages(PageFormat f) const;
  void check_invariants() const;  // throws std::logic_error naming the violated invariant
  uint64_t operations() const { return ops_; }

 private:
  friend class PinnedSequence;
  friend class PagedView;
  friend class ForwardStep;
  struct Row {
    Tier tier = Tier::kRecent;
    uint32_t filled = 0;
    bool sealed = false;
    uint64_t hash = 0;
    PrefixCache::Variant variant = PrefixCache::kNone;  // prefix-cache variant this row is bound to
    std::vector<PageEntry> layers;
  };
  struct Sequence {
    std::vector<Row> rows;
    std::vector<int32_t> tokens;
    bool live = true;
    size_t pending = 0;        // tokens of a step in flight
    size_t pending_first = 0;  // their first position
  };

  PagePool& pool_mut(PageFormat f) { return *pools_[codec::format_index(f)]; }
  Sequence& live_seq(SeqId seq, const char* where);
  const Sequence& live_seq(SeqId seq, const char* where) const;
  uint64_t page_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  void hold(Row& r, PrefixCache::Variant v);
  void unhold(Row& r);
  void release_row(Row& r);
  // Frees cached pages until `need` pages of format f are free; throws OutOfCapacity (changing
  // nothing) when even evicting every unheld variant would not free enough.
  void reserve_free(PageFormat f, size_t need);
  void seal_row(Sequence& s, size_t index);
  void unpin(uint64_t pin_id) const;
  uint64_t pin_entries(std::span<const PageEntry> entries) const;  // takes reader references
  void debug_check() const;
  Accounting accounting_locked() const;
  void check_invariants_locked() const;

  // The sequence with a step's append in flight, or null (finished meanwhile, or nothing appended).
  Sequence* pending_seq(SeqId seq);
  // The ForwardStep's side of an append.
  std::vector<WriteSlot> step_slots(SeqId seq, int layer) const;
  void step_commit(std::span<const SeqId> seqs);
  void step_abandon(std::span<const SeqId> seqs) noexcept;

  StoreConfig cfg_;
  codec::PageGeometry geo_;
  std::unique_ptr<PageStorage> storage_;
  HostPageStorage* host_ = nullptr;
  std::vector<PageFormat> stale_;  // per layer, config().stale_formats()
  PagePools pools_;
  PrefixCache cache_;
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 1;
  // Reader pins: id -> the pinned layer-pages, viewed in the pin's own table (a PinnedSequence or
  // PagedView keeps that buffer, across moves, until its destructor has called unpin). Mutable:
  // pinning is logically const.
  mutable std::unordered_map<uint64_t, std::span<const PageEntry>> pins_;
  mutable uint64_t next_pin_ = 1;
  mutable std::mutex mu_;
  std::mutex apply_mu_;
  size_t conversions_in_flight_ = 0;
  uint64_t ops_ = 0;
};

}  // namespace minimakv::cache
