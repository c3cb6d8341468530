#include "minimakv/cache/kv_store.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace minimakv::cache {

namespace {
constexpr int kFp8Slot = 0;
constexpr int kStaleSlot = 1;
int variant_slot(Tier kind) {
  return kind == Tier::kStale ? kStaleSlot : kFp8Slot;
}
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

// ------------------------------------------------------------------ PinnedSequence

PinnedSequence::PinnedSequence(PinnedSequence&& o) noexcept
    : store_(o.store_), pin_id_(o.pin_id_), length_(o.length_), last_fill_(o.last_fill_), rows_(std::move(o.rows_)) {
  o.pin_id_ = 0;
}

PinnedSequence::~PinnedSequence() {
  if (pin_id_ != 0) store_->unpin(pin_id_);
}

void PinnedRows::throw_out_of_range(size_t page, int layer) const {
  throw InvalidArgument("PinnedRows::at: page " + std::to_string(page) + " of " + std::to_string(size()) + ", layer " +
                        std::to_string(layer) + " (the pin holds layers " + std::to_string(first_layer_) + ".." +
                        std::to_string(first_layer_ + static_cast<int>(layers_) - 1) + ")");
}

CompactLayerView PinnedSequence::layer(int l) const {
  if (!rows_.holds(l)) throw InvalidArgument("PinnedSequence::layer: layer " + std::to_string(l) + " is not pinned");
  CompactLayerView v;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const PageEntry e = rows_.at(i, l);
    v.ids[static_cast<int>(e.format)].push_back(e.id);
    v.logical[static_cast<int>(e.format)].push_back(static_cast<uint32_t>(i));
  }
  return v;
}

std::span<const uint8_t> PinnedSequence::bytes(PageEntry e) const {
  return store_->page_bytes(e);
}

// ------------------------------------------------------------------ construction

KvStore::KvStore(StoreConfig cfg, std::unique_ptr<PageStorage> storage)
    : cfg_(std::move(cfg)), storage_(std::move(storage)) {
  if (cfg_.layers < 1 || cfg_.layers > 1024) throw InvalidArgument("StoreConfig: layers must be in [1, 1024]");
  geo_ = {cfg_.tokens_per_page, cfg_.kv_heads, cfg_.head_dim};
  const bool host = storage_ == nullptr;
  try {
    for (const codec::PageFormatSpec& f : codec::all_page_formats())
      pools_[codec::format_index(f.format)] = std::make_unique<PagePool>(f.format, geo_, cfg_.pages_of(f.format), host);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string("StoreConfig: ") + e.what());
  }
  protected_.assign(cfg_.layers, false);
  for (int l : cfg_.protected_layers) {
    if (l < 0 || l >= cfg_.layers)
      throw InvalidArgument("StoreConfig: protected layer " + std::to_string(l) + " out of range");
    protected_[l] = true;
  }
  rotations_.resize(cfg_.layers);
  for (int l = 0; l < cfg_.layers; ++l)
    for (int h = 0; h < cfg_.kv_heads; ++h)
      rotations_[l].push_back(codec::Rotation::for_head(cfg_.head_dim, static_cast<uint32_t>(l),
                                                        static_cast<uint32_t>(h), cfg_.rotation_seed));
}

KvStore::~KvStore() = default;

std::span<const codec::Rotation> KvStore::rotations(int layer) const {
  if (layer < 0 || layer >= cfg_.layers) throw InvalidArgument("rotations: layer out of range");
  return rotations_[layer];
}

// ------------------------------------------------------------------ helpers

KvStore::Sequence& KvStore::live_seq(SeqId seq, const char* where) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || !it->second.live) {
    throw InvalidArgument(std::string(where) + ": sequence " + std::to_string(seq) +
                          (it == seqs_.end() ? " does not exist" : " is finished"));
  }
  return it->second;
}

const KvStore::Sequence& KvStore::live_seq(SeqId seq, const char* where) const {
  return const_cast<KvStore*>(this)->live_seq(seq, where);
}

uint64_t KvStore::page_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  const uint64_t keys[6] = {parent,
                            cfg_.model_key,
                            static_cast<uint64_t>(cfg_.mode),
                            static_cast<uint64_t>(cfg_.tokens_per_page),
                            static_cast<uint64_t>(cfg_.head_dim),
                            cfg_.rotation_seed};
  // Chain: the parent hash and the extra keys seed the hash of this page's token ids.
  const uint64_t h = XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), XXH3_64bits(keys, sizeof keys));
  return h == 0 ? 1 : h;  // 0 means "not hashed"
}

void KvStore::add_ref(PageEntry e, RefKind k) {
  PagePool& p = pool_mut(e.format);
  if (k == RefKind::kCache && p.meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0)
    ++cached_pages_[static_cast<int>(e.format)];
  p.add_ref(e.id, k);
}

void KvStore::release(PageEntry e, RefKind k) {
  PagePool& p = pool_mut(e.format);
  p.release(e.id, k);
  if (k == RefKind::kCache && (!p.meta(e.id).in_use || p.meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0))
    --cached_pages_[static_cast<int>(e.format)];
}

void KvStore::release_row(Row& r) {
  unhold(r);
  for (const PageEntry& e : r.layers) release(e, RefKind::kRequest);
  r.layers.clear();
}

void KvStore::debug_check() const {
#ifndef NDEBUG
  check_invariants_locked();
#endif
}

// ------------------------------------------------------------------ prefix cache internals

int32_t KvStore::find_variant(uint64_t hash, Tier kind) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second[variant_slot(kind)];
}

void KvStore::lru_push(int32_t v) {
  Variant& x = variants_[v];
  x.prev = lru_tail_;
  x.next = -1;
  if (lru_tail_ >= 0)
    variants_[lru_tail_].next = v;
  else
    lru_head_ = v;
  lru_tail_ = v;
  x.in_lru = true;
}

void KvStore::lru_remove(int32_t v) {
  Variant& x = variants_[v];
  if (!x.in_lru) return;
  if (x.prev >= 0)
    variants_[x.prev].next = x.next;
  else
    lru_head_ = x.next;
  if (x.next >= 0)
    variants_[x.next].prev = x.prev;
  else
    lru_tail_ = x.prev;
  x.prev = x.next = -1;
  x.in_lru = false;
}

void KvStore::hold(Row& r, int32_t v) {
  r.variant = v;
  if (variants_[v].holders++ == 0) lru_remove(v);
}

void KvStore::unhold(Row& r) {
  if (r.variant < 0) return;
  if (--variants_[r.variant].holders == 0) lru_push(r.variant);
  r.variant = -1;
}

void KvStore::evict_variant(int32_t v) {
  Variant& x = variants_[v];
  lru_remove(v);
  for (const PageEntry& e : x.row) release(e, RefKind::kCache);
  auto it = by_hash_.find(x.hash);
  it->second[variant_slot(x.kind)] = -1;
  if (it->second[0] < 0 && it->second[1] < 0) by_hash_.erase(it);
  x = Variant{};
  free_variants_.push_back(v);
}

int32_t KvStore::bind_variant(uint64_t hash, Tier kind, const std::vector<PageEntry>& row) {
  if (!cfg_.prefix_caching) return -1;
  if (find_variant(hash, kind) >= 0) return -1;  // one copy per (hash, kind): e.g. two holders converted in one plan
  // Quota: count the pages of each format this binding would newly cache, evict LRU to fit, else skip.
  std::array<size_t, codec::kNumPageFormats> extra{};
  for (const PageEntry& e : row)
    if (pool(e.format).meta(e.id).refs[static_cast<int>(RefKind::kCache)] == 0) ++extra[static_cast<int>(e.format)];
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    while (extra[f] && cached_pages_[f] + extra[f] > cfg_.cache_quota[f] && lru_head_ >= 0) evict_variant(lru_head_);
    if (extra[f] && cached_pages_[f] + extra[f] > cfg_.cache_quota[f]) return -1;
  }
  int32_t v;
  if (!free_variants_.empty()) {
    v = free_variants_.back();
    free_variants_.pop_back();
  } else {
    v = static_cast<int32_t>(variants_.size());
    variants_.emplace_back();
  }
  Variant& x = variants_[v];
  x = Variant{};
  x.used = true;
  x.hash = hash;
  x.kind = kind == Tier::kStale ? Tier::kStale : Tier::kRecent;
  x.row = row;
  for (const PageEntry& e : row) add_ref(e, RefKind::kCache);
  auto& slots = by_hash_.try_emplace(hash, std::array<int32_t, 2>{-1, -1}).first->second;
  slots[variant_slot(kind)] = v;
  lru_push(v);  // no holder yet; the caller holds it right away when a row refers to it
  return v;
}

size_t KvStore::freeable_by_eviction(PageFormat f, const std::unordered_set<int32_t>* keep) const {
  // Pages of format f whose only references are cache references of variants no sequence holds. Most
  // such pages belong to one variant (cache count 1) and are counted without a lookup; the few shared
  // by several variants (a protected layer's page in a hash's FP8 and Stale copies) are tallied.
  size_t n = 0;
  std::unordered_map<PageId, uint32_t> shared;
  for (int32_t v = lru_head_; v >= 0; v = variants_[v].next) {
    if (keep && keep->contains(v)) continue;
    for (const PageEntry& e : variants_[v].row) {
      if (e.format != f) continue;
      const auto& m = pool(f).meta(e.id);
      if (m.refs[0] || m.refs[2] || m.refs[3]) continue;
      if (m.refs[1] == 1)
        ++n;
      else
        ++shared[e.id];
    }
  }
  for (const auto& [id, cnt] : shared)
    if (pool(f).meta(id).refs[1] == cnt) ++n;
  return n;
}

void KvStore::reserve_free(PageFormat f, size_t need) {
  const PagePool& p = pool(f);
  if (p.free_pages() >= need) return;
  if (p.free_pages() + freeable_by_eviction(f) < need) {
    throw OutOfCapacity(std::string("KV capacity exhausted: need ") + std::to_string(need) + " free " +
                        codec::to_string(f) + " layer-pages, " + std::to_string(p.free_pages()) + " free and " +
                        std::to_string(freeable_by_eviction(f)) + " reclaimable from the prefix cache (capacity " +
                        std::to_string(p.capacity()) + ")");
  }
  // Evict oldest variants holding pages of f until enough are free.
  int32_t v = lru_head_;
  while (p.free_pages() < need && v >= 0) {
    const int32_t next = variants_[v].next;
    bool has_f = false;
    for (const PageEntry& e : variants_[v].row) has_f |= e.format == f;
    if (has_f) evict_variant(v);
    v = next;
  }
}

void KvStore::seal_row(Sequence& s, size_t index) {
  Row& r = s.rows[index];
  r.sealed = true;
  for (const PageEntry& e : r.layers) pool_mut(e.format).seal(e.id);
  if (!cfg_.prefix_caching) return;
  const uint64_t parent = index == 0 ? 0 : s.rows[index - 1].hash;
  if (index > 0 && parent == 0) return;  // a broken chain cannot be matched
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  r.hash = page_hash(parent, std::span<const int32_t>(s.tokens).subspan(index * B, B));
  if (find_variant(r.hash, Tier::kRecent) >= 0) return;  // same prefix cached by another sequence
  const int32_t v = bind_variant(r.hash, Tier::kRecent, r.layers);
  if (v >= 0) hold(r, v);
}

// ------------------------------------------------------------------ sequences

SeqId KvStore::create_sequence() {
  std::lock_guard lock(mu_);
  const SeqId id = next_seq_++;
  seqs_.emplace(id, Sequence{});
  ++ops_;
  return id;
}

size_t KvStore::match_prefix(std::span<const int32_t> tokens) const {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  uint64_t parent = 0;
  size_t pages = 0;
  for (; (pages + 1) * B <= tokens.size(); ++pages) {
    parent = page_hash(parent, tokens.subspan(pages * B, B));
    if (!by_hash_.contains(parent)) break;
  }
  return pages * B;
}

std::pair<SeqId, size_t> KvStore::create_sequence_with_prefix(std::span<const int32_t> tokens) {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  const SeqId id = next_seq_++;
  Sequence s;
  uint64_t parent = 0;
  for (size_t p = 0; (p + 1) * B <= tokens.size() && cfg_.prefix_caching; ++p) {
    const uint64_t h = page_hash(parent, tokens.subspan(p * B, B));
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    // Install the FP8 copy when it exists (higher fidelity); else the Stale copy. The controller may
    // demote it later, which rebinds to the cached Stale copy without converting.
    const int32_t v = it->second[kFp8Slot] >= 0 ? it->second[kFp8Slot] : it->second[kStaleSlot];
    Row r;
    r.tier = variants_[v].kind;
    r.filled = static_cast<uint32_t>(B);
    r.sealed = true;
    r.hash = h;
    r.layers = variants_[v].row;
    for (const PageEntry& e : r.layers) add_ref(e, RefKind::kRequest);
    hold(r, v);
    s.rows.push_back(std::move(r));
    s.tokens.insert(s.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(p * B),
                    tokens.begin() + static_cast<std::ptrdiff_t>((p + 1) * B));
    parent = h;
  }
  const size_t covered = s.tokens.size();
  seqs_.emplace(id, std::move(s));
  ++ops_;
  debug_check();
  return {id, covered};
}

void KvStore::begin_append(SeqId seq, std::span<const int32_t> ids) {
  const AppendChunk one{seq, ids};
  begin_append_batch(std::span<const AppendChunk>(&one, 1));
}

void KvStore::begin_append_batch(std::span<const AppendChunk> chunks) {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  size_t new_rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Sequence& s = live_seq(chunks[i].seq, "begin_append");
    if (s.pending)
      throw InvalidArgument("begin_append: sequence " + std::to_string(chunks[i].seq) + " has an append in progress");
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].seq == chunks[i].seq)
        throw InvalidArgument("begin_append: sequence " + std::to_string(chunks[i].seq) +
                              " appears twice in one batch");
    const size_t n = chunks[i].ids.size();
    const size_t space = (!s.rows.empty() && s.rows.back().filled < B) ? B - s.rows.back().filled : 0;
    new_rows += n > space ? (n - space + B - 1) / B : 0;
  }
  const PageFormat f = append_format();
  reserve_free(f, new_rows * static_cast<size_t>(cfg_.layers));  // throws before any change, for the whole batch
  for (const auto& c : chunks) {
    Sequence& s = live_seq(c.seq, "begin_append");
    const size_t n = c.ids.size();
    if (n == 0) continue;
    s.pending_first = s.tokens.size();
    s.pending = n;
    s.written.assign(cfg_.layers, false);
    for (size_t t = 0; t < n; ++t) {
      if (s.rows.empty() || s.rows.back().filled == B) {
        Row r;
        r.layers.reserve(cfg_.layers);
        for (int l = 0; l < cfg_.layers; ++l) {
          const PageId id = pool_mut(f).allocate(static_cast<uint16_t>(l));
          pool_mut(f).add_ref(id, RefKind::kRequest);
          r.layers.push_back({f, id});
        }
        s.rows.push_back(std::move(r));
      }
      ++s.rows.back().filled;
      s.tokens.push_back(c.ids[t]);
    }
  }
  ++ops_;
  debug_check();
}

void KvStore::check_layer_write(const Sequence& s, int layer, const char* where) const {
  if (!s.pending) throw InvalidArgument(std::string(where) + ": no append in progress");
  if (layer < 0 || layer >= cfg_.layers)
    throw InvalidArgument(std::string(where) + ": layer " + std::to_string(layer) + " out of range");
  if (s.written[layer])
    throw InvalidArgument(std::string(where) + ": layer " + std::to_string(layer) + " already written");
}

void KvStore::write_layer(SeqId seq, int layer, std::span<const float> k, std::span<const float> v) {
  std::lock_guard lock(mu_);
  Sequence& s = live_seq(seq, "write_layer");
  if (storage_) throw InvalidArgument("write_layer: page bytes live in external storage; use claim_layer_slots");
  check_layer_write(s, layer, "write_layer");
  const size_t head_floats = static_cast<size_t>(cfg_.kv_heads) * cfg_.head_dim;
  if (k.size() != s.pending * head_floats || v.size() != k.size()) {
    throw InvalidArgument("write_layer: " + std::to_string(s.pending) + " tokens need " +
                          std::to_string(s.pending * head_floats) + " floats of K and of V per layer, got " +
                          std::to_string(k.size()) + " and " + std::to_string(v.size()));
  }
  const auto slots = pending_slots(s, layer);
  for (size_t t = 0; t < slots.size(); ++t) {
    const PageEntry e = slots[t].page;
    codec::write_token(pool_mut(e.format).mutable_bytes(e.id), pool(e.format).layout(),
                       static_cast<int>(slots[t].token), k.subspan(t * head_floats, head_floats),
                       v.subspan(t * head_floats, head_floats));
  }
  s.written[layer] = true;
}

std::vector<KvStore::Slot> KvStore::claim_layer_slots(SeqId seq, int layer) {
  std::lock_guard lock(mu_);
  Sequence& s = live_seq(seq, "claim_layer_slots");
  if (!storage_) throw InvalidArgument("claim_layer_slots: page bytes live in the host pools; use write_layer");
  check_layer_write(s, layer, "claim_layer_slots");
  auto slots = pending_slots(s, layer);
  s.written[layer] = true;
  return slots;
}

std::vector<KvStore::Slot> KvStore::pending_slots(const Sequence& s, int layer) const {
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  std::vector<Slot> slots;
  slots.reserve(s.pending);
  for (size_t t = 0; t < s.pending; ++t) {
    const size_t pos = s.pending_first + t;
    slots.push_back({s.rows[pos / B].layers[layer], static_cast<uint32_t>(pos % B)});
  }
  return slots;
}

void KvStore::commit_append(SeqId seq) {
  std::lock_guard lock(mu_);
  Sequence& s = live_seq(seq, "commit_append");
  if (!s.pending) return;
  for (int l = 0; l < cfg_.layers; ++l)
    if (!s.written[l]) throw InvalidArgument("commit_append: layer " + std::to_string(l) + " was not written");
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  for (size_t r = s.pending_first / B; r < s.rows.size(); ++r)
    if (s.rows[r].filled == B && !s.rows[r].sealed) seal_row(s, r);
  s.pending = 0;
  ++ops_;
  debug_check();
}

void KvStore::append(SeqId seq, std::span<const int32_t> ids, std::span<const float> k, std::span<const float> v) {
  const size_t n = ids.size();
  const size_t head_floats = static_cast<size_t>(cfg_.kv_heads) * cfg_.head_dim;
  const size_t row_floats = static_cast<size_t>(cfg_.layers) * head_floats;
  if (k.size() != n * row_floats || v.size() != n * row_floats) {
    throw InvalidArgument("append: " + std::to_string(n) + " tokens need " + std::to_string(n * row_floats) +
                          " floats of K and of V, got " + std::to_string(k.size()) + " and " +
                          std::to_string(v.size()));
  }
  begin_append(seq, ids);
  if (n == 0) return;
  std::vector<float> kl(n * head_floats), vl(n * head_floats);
  for (int l = 0; l < cfg_.layers; ++l) {
    for (size_t t = 0; t < n; ++t) {
      const size_t off = (t * cfg_.layers + l) * head_floats;
      std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(off), head_floats,
                  kl.begin() + static_cast<std::ptrdiff_t>(t * head_floats));
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(off), head_floats,
                  vl.begin() + static_cast<std::ptrdiff_t>(t * head_floats));
    }
    write_layer(seq, l, kl, vl);
  }
  commit_append(seq);
}

SeqId KvStore::fork(SeqId parent) {
  std::lock_guard lock(mu_);
  Sequence& p = live_seq(parent, "fork");
  if (p.pending) throw InvalidArgument("fork: sequence " + std::to_string(parent) + " has an append in progress");
  const bool partial = !p.rows.empty() && !p.rows.back().sealed;
  if (partial) reserve_free(p.rows.back().layers[0].format, static_cast<size_t>(cfg_.layers));
  Sequence s;
  s.tokens = p.tokens;
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const Row& src = p.rows[i];
    Row r;
    r.tier = src.tier;
    r.filled = src.filled;
    r.sealed = src.sealed;
    r.hash = src.hash;
    if (src.sealed) {
      r.layers = src.layers;
      for (const PageEntry& e : r.layers) add_ref(e, RefKind::kRequest);
      if (src.variant >= 0) hold(r, src.variant);
    } else {  // copy-on-write of the partial page: the child gets private copies
      for (int l = 0; l < cfg_.layers; ++l) {
        const PageEntry se = src.layers[l];
        PagePool& pl = pool_mut(se.format);
        const PageId id = pl.allocate(static_cast<uint16_t>(l));
        pl.add_ref(id, RefKind::kRequest);
        if (storage_) {
          storage_->copy_page(se.format, se.id, id);
        } else {
          auto dst = pl.mutable_bytes(id);
          auto from = pl.bytes(se.id);
          std::memcpy(dst.data(), from.data(), dst.size());
        }
        r.layers.push_back({se.format, id});
      }
    }
    s.rows.push_back(std::move(r));
  }
  const SeqId id = next_seq_++;
  seqs_.emplace(id, std::move(s));
  ++ops_;
  debug_check();
  return id;
}

void KvStore::finish(SeqId seq) {
  std::lock_guard lock(mu_);
  Sequence& s = live_seq(seq, "finish");
  for (Row& r : s.rows) release_row(r);
  seqs_.erase(seq);
  ++ops_;
  debug_check();
}

// ------------------------------------------------------------------ transitions

KvStore::ApplyResult KvStore::apply(std::span<const Transition> plan) {
  std::lock_guard apply_lock(apply_mu_);  // one checkpoint at a time
  ApplyResult res;
  struct Job {
    SeqId seq;
    uint32_t page;
    Tier target;
    std::vector<PageEntry> src;  // the row when the job was planned
    std::vector<PageEntry> dst;  // new row (converted layers replaced)
    int32_t rebind = -1;         // cached variant to install instead of converting
    bool convert = false;
  };
  std::vector<Job> jobs;
  {
    std::lock_guard lock(mu_);
    // Validate everything first: the plan is all-or-nothing.
    std::array<size_t, codec::kNumPageFormats> need{};
    std::set<std::pair<SeqId, uint32_t>> seen;
    for (const Transition& t : plan) {
      Sequence& s = live_seq(t.seq, "apply");
      if (t.page >= s.rows.size()) {
        throw InvalidArgument("apply: sequence " + std::to_string(t.seq) + " has no logical page " +
                              std::to_string(t.page));
      }
      if (!seen.insert({t.seq, t.page}).second) throw InvalidArgument("apply: a page appears twice in the plan");
      const Row& r = s.rows[t.page];
      const bool to_stale = t.target == Tier::kStale, is_stale = r.tier == Tier::kStale;
      if (to_stale && !retiers(cfg_.mode)) {
        throw InvalidArgument(std::string("apply: mode ") + to_string(cfg_.mode) + " keeps every page in one format");
      }
      if (to_stale && !r.sealed) throw InvalidArgument("apply: only full, sealed pages can become Stale");
      Job j{t.seq, t.page, t.target, r.layers, r.layers};
      if (to_stale != is_stale) {
        const int32_t cached = r.hash ? find_variant(r.hash, to_stale ? Tier::kStale : Tier::kRecent) : -1;
        if (cached >= 0) {
          j.rebind = cached;
        } else {
          j.convert = true;
          for (int l = 0; l < cfg_.layers; ++l)
            if (!protected_[l])
              ++need[codec::format_index(storage_format(cfg_.mode, to_stale ? Tier::kStale : Tier::kRecent, false))];
        }
      }
      jobs.push_back(std::move(j));
    }
    // Feasibility first, without touching anything (a failed plan changes nothing, LRU order included):
    // the variants this plan rebinds to do not count as reclaimable.
    std::unordered_set<int32_t> keep;
    for (const Job& j : jobs)
      if (j.rebind >= 0) keep.insert(j.rebind);
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const auto pf = static_cast<PageFormat>(f);
      const size_t avail = pool(pf).free_pages() + freeable_by_eviction(pf, &keep);
      if (avail >= need[f]) continue;
      throw OutOfCapacity(std::string("KV capacity exhausted: the plan needs ") + std::to_string(need[f]) + " free " +
                          codec::to_string(pf) + " layer-pages, " + std::to_string(avail) +
                          " are free or reclaimable (capacity " + std::to_string(pool(pf).capacity()) + ")");
    }
    // Planned rebind targets are held, so neither the reservation below nor a concurrent eviction can
    // remove them while the lock is released.
    for (Job& j : jobs) {
      if (j.rebind < 0) continue;
      Variant& x = variants_[j.rebind];
      ++x.planned;
      if (x.holders++ == 0) lru_remove(j.rebind);
    }
    for (int f = 0; f < codec::kNumPageFormats; ++f) reserve_free(static_cast<PageFormat>(f), need[f]);
    // Take conversion references on sources and allocate destinations (private until published).
    for (Job& j : jobs) {
      if (!j.convert) continue;
      const PageFormat df = storage_format(cfg_.mode, j.target, false);
      for (int l = 0; l < cfg_.layers; ++l) {
        if (protected_[l]) continue;
        add_ref(j.src[l], RefKind::kConversion);
        const PageId id = pool_mut(df).allocate(static_cast<uint16_t>(l));
        pool_mut(df).add_ref(id, RefKind::kConversion);
        j.dst[l] = {df, id};
      }
      ++conversions_in_flight_;
    }
  }
  // Convert bytes without the metadata lock: sources are sealed, destinations private.
  if (storage_) {
    std::vector<PageStorage::Conversion> conv;
    for (const Job& j : jobs) {
      if (!j.convert) continue;
      for (int l = 0; l < cfg_.layers; ++l)
        if (!protected_[l]) conv.push_back({j.src[l], j.dst[l], static_cast<uint32_t>(l)});
    }
    if (!conv.empty()) storage_->convert(conv);
  } else {
    for (Job& j : jobs) {
      if (!j.convert) continue;
      for (int l = 0; l < cfg_.layers; ++l) {
        if (protected_[l]) continue;
        const PagePool& sp = pool(j.src[l].format);
        PagePool& dp = pool_mut(j.dst[l].format);
        if (j.target == Tier::kStale) {
          codec::convert_fp8_to_tq3(sp.bytes(j.src[l].id), sp.layout(), dp.mutable_bytes(j.dst[l].id), dp.layout(),
                                    rotations_[l], cfg_.tokens_per_page, cfg_.tq3_policy);
        } else {
          codec::convert_tq3_to_fp8(sp.bytes(j.src[l].id), sp.layout(), dp.mutable_bytes(j.dst[l].id), dp.layout(),
                                    rotations_[l], cfg_.tokens_per_page);
        }
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    for (Job& j : jobs) {
      auto it = seqs_.find(j.seq);
      const bool valid = it != seqs_.end() && it->second.live && j.page < it->second.rows.size() &&
                         it->second.rows[j.page].layers == j.src;
      if (j.convert) {  // record completion: the destination is complete and immutable
        for (int l = 0; l < cfg_.layers; ++l)
          if (!protected_[l]) pool_mut(j.dst[l].format).seal(j.dst[l].id);
      }
      if (j.rebind >= 0) --variants_[j.rebind].planned;
      if (valid) {
        Row& r = it->second.rows[j.page];
        if (j.convert || j.rebind >= 0) {
          const std::vector<PageEntry> next = j.rebind >= 0 ? variants_[j.rebind].row : j.dst;
          for (const PageEntry& e : next) add_ref(e, RefKind::kRequest);
          unhold(r);
          for (const PageEntry& e : r.layers) release(e, RefKind::kRequest);  // publish: swap the row
          r.layers = next;
          if (j.rebind >= 0) {
            r.variant = j.rebind;  // the planned hold becomes this row's hold
            ++res.rebound;
          } else {
            if (r.hash) {
              const int32_t v = bind_variant(r.hash, j.target, r.layers);  // later holders rebind to it
              if (v >= 0) hold(r, v);
            }
            ++(j.target == Tier::kStale ? res.converted : res.promoted);
          }
        } else if (r.tier != j.target) {
          ++res.retagged;
        }
        r.tier = j.target;
      } else {
        ++res.dropped;
        if (j.rebind >= 0 && --variants_[j.rebind].holders == 0) lru_push(j.rebind);
      }
      if (j.convert) {  // the source is freed here unless readers (or other holders) still have it
        for (int l = 0; l < cfg_.layers; ++l) {
          if (protected_[l]) continue;
          release(j.dst[l], RefKind::kConversion);
          release(j.src[l], RefKind::kConversion);
        }
        --conversions_in_flight_;
      }
    }
    ++ops_;
    debug_check();
  }
  return res;
}

// ------------------------------------------------------------------ readers

PinnedSequence KvStore::pin(SeqId seq, int only_layer) const {
  std::lock_guard lock(mu_);
  const Sequence& s = live_seq(seq, "pin");
  if (only_layer >= cfg_.layers) throw InvalidArgument("pin: layer " + std::to_string(only_layer) + " out of range");
  PinnedSequence p(this);
  p.length_ = s.tokens.size();
  p.last_fill_ = s.rows.empty() ? 0 : s.rows.back().filled;
  // A layer pin copies and references only its layer: a decode step pins every layer of every
  // sequence once, so copying the whole block table each time would cost layers times as much.
  const int l0 = only_layer >= 0 ? only_layer : 0, l1 = only_layer >= 0 ? only_layer + 1 : cfg_.layers;
  p.rows_.first_layer_ = l0;
  p.rows_.layers_ = static_cast<size_t>(l1 - l0);
  auto& flat = p.rows_.flat_;
  flat.reserve(s.rows.size() * p.rows_.layers_);
  for (const Row& r : s.rows) flat.insert(flat.end(), r.layers.begin() + l0, r.layers.begin() + l1);
  auto* self = const_cast<KvStore*>(this);
  for (const PageEntry& e : flat) self->pool_mut(e.format).add_ref(e.id, RefKind::kReader);
  p.pin_id_ = next_pin_++;
  pins_.emplace(p.pin_id_, std::span<const PageEntry>(flat));
  return p;
}

void KvStore::unpin(uint64_t pin_id) const {
  std::lock_guard lock(mu_);
  auto it = pins_.find(pin_id);
  if (it == pins_.end()) return;
  auto* self = const_cast<KvStore*>(this);
  for (const PageEntry& e : it->second) self->pool_mut(e.format).release(e.id, RefKind::kReader);
  pins_.erase(it);
}

// ------------------------------------------------------------------ prefix cache API

size_t KvStore::evict_cached(size_t max_variants) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  while (n < max_variants && lru_head_ >= 0) {
    evict_variant(lru_head_);
    ++n;
  }
  ++ops_;
  debug_check();
  return n;
}

void KvStore::set_cache_quota(PageFormat f, size_t layer_pages) {
  std::lock_guard lock(mu_);
  const int fi = static_cast<int>(f);
  cfg_.cache_quota[fi] = layer_pages;
  int32_t v = lru_head_;
  while (cached_pages_[fi] > layer_pages && v >= 0) {
    const int32_t next = variants_[v].next;
    bool has_f = false;
    for (const PageEntry& e : variants_[v].row) has_f |= e.format == f;
    if (has_f) evict_variant(v);
    v = next;
  }
  ++ops_;
  debug_check();
}

std::vector<std::pair<uint64_t, Tier>> KvStore::lru_snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, Tier>> out;
  for (int32_t v = lru_head_; v >= 0; v = variants_[v].next) out.emplace_back(variants_[v].hash, variants_[v].kind);
  return out;
}

// ------------------------------------------------------------------ introspection

bool KvStore::is_live(SeqId seq) const {
  std::lock_guard lock(mu_);
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.live;
}

std::vector<SeqId> KvStore::live_sequences() const {
  std::lock_guard lock(mu_);
  std::vector<SeqId> out;
  for (const auto& [id, s] : seqs_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

size_t KvStore::length(SeqId seq) const {
  std::lock_guard lock(mu_);
  return live_seq(seq, "length").tokens.size();
}

std::vector<int32_t> KvStore::tokens(SeqId seq) const {
  std::lock_guard lock(mu_);
  return live_seq(seq, "tokens").tokens;
}

std::vector<LogicalPageInfo> KvStore::block_table(SeqId seq) const {
  std::lock_guard lock(mu_);
  std::vector<LogicalPageInfo> out;
  for (const Row& r : live_seq(seq, "block_table").rows) out.push_back({r.tier, r.filled, r.sealed, r.hash, r.layers});
  return out;
}

CompactLayerView KvStore::layer_view(SeqId seq, int layer) const {
  std::lock_guard lock(mu_);
  if (layer < 0 || layer >= cfg_.layers) throw InvalidArgument("layer_view: layer out of range");
  CompactLayerView v;
  const auto& rows = live_seq(seq, "layer_view").rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PageEntry e = rows[i].layers[layer];
    v.ids[static_cast<int>(e.format)].push_back(e.id);
    v.logical[static_cast<int>(e.format)].push_back(static_cast<uint32_t>(i));
  }
  return v;
}

std::array<uint32_t, kNumRefKinds> KvStore::refs(PageEntry e) const {
  std::lock_guard lock(mu_);
  return pool(e.format).meta(e.id).refs;
}

size_t KvStore::available_pages(PageFormat f) const {
  std::lock_guard lock(mu_);
  return pool(f).free_pages() + freeable_by_eviction(f);
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
  for (const Variant& v : variants_) a.cached_variants += v.used ? 1 : 0;
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
        if (e.format != storage_format(cfg_.mode, r.tier, protected_[l])) fail("row format does not match its tier");
        ++expect[static_cast<int>(e.format)][e.id][0];
      }
      if (r.variant >= 0 && (!variants_[r.variant].used || variants_[r.variant].row != r.layers))
        fail("row bound to a variant with different pages");
    }
  }
  std::vector<uint32_t> holders(variants_.size(), 0);
  for (const auto& [id, s] : seqs_)
    for (const Row& r : s.rows)
      if (r.variant >= 0) ++holders[r.variant];
  std::array<size_t, codec::kNumPageFormats> cached{};
  size_t lru_len = 0;
  for (int32_t v = lru_head_; v >= 0; v = variants_[v].next) {
    if (variants_[v].holders != 0) fail("a held variant is on the LRU");
    ++lru_len;
  }
  for (size_t v = 0; v < variants_.size(); ++v) {
    const Variant& x = variants_[v];
    if (!x.used) continue;
    if (x.holders != holders[v] + x.planned) fail("variant holder count");
    if ((x.holders == 0) != x.in_lru) fail("unheld variant missing from the LRU");
    auto it = by_hash_.find(x.hash);
    if (it == by_hash_.end() || it->second[variant_slot(x.kind)] != static_cast<int32_t>(v)) fail("hash index");
    for (const PageEntry& e : x.row) {
      if (!pool(e.format).meta(e.id).sealed) fail("a cached page is not sealed");
      ++expect[static_cast<int>(e.format)][e.id][1];
    }
  }
  size_t lru_expected = 0;
  for (const Variant& x : variants_) lru_expected += (x.used && x.holders == 0) ? 1 : 0;
  if (lru_len != lru_expected) fail("LRU length");
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
      if (m.refs[1]) ++cached[f];
    }
    if (in_use != p.used_pages()) fail("pool free list disagrees with page states");
    if (cached[f] != cached_pages_[f]) fail("cached page counter");
  }
  if (!accounting_locked().reconciled) fail("accounting does not reconcile");
}

}  // namespace minimakv::cache
