#include "minimakv/cache/kv_store.h"

#include <xxhash.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace minimakv::cache {

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
                        std::to_string(layer) + " of " + std::to_string(layers_));
}

std::span<const uint8_t> PinnedSequence::bytes(PageEntry e) const {
  if (!store_->host_) throw InvalidArgument("PinnedSequence::bytes: the store's pages are not in host memory");
  return store_->host_->bytes(e);
}

// ------------------------------------------------------------------ construction

KvStore::KvStore(StoreConfig cfg, std::unique_ptr<PageStorage> storage)
    : cfg_(std::move(cfg)), storage_(std::move(storage)), cache_(pools_, cfg_.cache_quota, cfg_.prefix_caching) {
  if (cfg_.layers < 1 || cfg_.layers > 1024) throw InvalidArgument("StoreConfig: layers must be in [1, 1024]");
  geo_ = {cfg_.tokens_per_page, cfg_.kv_heads, cfg_.head_dim};
  try {
    for (const codec::PageFormatSpec& f : codec::all_page_formats())
      pools_[codec::format_index(f.format)] = std::make_unique<PagePool>(f.format, geo_, cfg_.pages_of(f.format));
    if (!storage_) storage_ = std::make_unique<HostPageStorage>(cfg_);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string("StoreConfig: ") + e.what());
  }
  host_ = dynamic_cast<HostPageStorage*>(storage_.get());
  stale_ = cfg_.stale_formats();
}

std::vector<PageFormat> StoreConfig::stale_formats() const {
  std::vector<PageFormat> out(static_cast<size_t>(std::max(layers, 0)), kDefaultStaleFormat);
  std::vector<bool> named(out.size(), false);
  const auto mark = [&](const std::vector<int>& list, PageFormat f, const char* what) {
    for (int l : list) {
      if (l < 0 || l >= layers)
        throw InvalidArgument(std::string("StoreConfig: ") + what + " layer " + std::to_string(l) + " out of range");
      if (named[l] && out[l] != f)
        throw InvalidArgument("StoreConfig: layer " + std::to_string(l) + " is both protected and a TQ4 layer");
      named[l] = true;
      out[l] = f;
    }
  };
  mark(protected_layers, cache::append_format(mode), "protected");
  mark(tq4_layers, PageFormat::kTq4, "TQ4");
  return out;
}

KvStore::~KvStore() = default;

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

void KvStore::hold(Row& r, PrefixCache::Variant v) {
  r.variant = v;
  cache_.hold(v);
}

void KvStore::unhold(Row& r) {
  if (r.variant == PrefixCache::kNone) return;
  cache_.unhold(r.variant);
  r.variant = PrefixCache::kNone;
}

void KvStore::release_row(Row& r) {
  unhold(r);
  for (const PageEntry& e : r.layers) pool_mut(e.format).release(e.id, RefKind::kRequest);
  r.layers.clear();
}

void KvStore::debug_check() const {
#ifndef NDEBUG
  check_invariants_locked();
#endif
}

void KvStore::reserve_free(PageFormat f, size_t need) {
  const PagePool& p = pool(f);
  if (p.free_pages() >= need) return;
  const size_t reclaimable = cache_.freeable(f);
  if (p.free_pages() + reclaimable < need) {
    throw OutOfCapacity(std::string("KV capacity exhausted: need ") + std::to_string(need) + " free " +
                        codec::to_string(f) + " layer-pages, " + std::to_string(p.free_pages()) + " free and " +
                        std::to_string(reclaimable) + " reclaimable from the prefix cache (capacity " +
                        std::to_string(p.capacity()) + ")");
  }
  cache_.evict_until_free(f, need);  // oldest variants holding pages of f first
}

void KvStore::seal_row(Sequence& s, size_t index) {
  Row& r = s.rows[index];
  r.sealed = true;
  for (const PageEntry& e : r.layers) pool_mut(e.format).seal(e.id);
  if (!cache_.enabled()) return;
  const uint64_t parent = index == 0 ? 0 : s.rows[index - 1].hash;
  if (index > 0 && parent == 0) return;  // a broken chain cannot be matched
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  r.hash = page_hash(parent, std::span<const int32_t>(s.tokens).subspan(index * B, B));
  if (cache_.find(r.hash, Tier::kRecent) != PrefixCache::kNone) return;  // same prefix cached by another sequence
  const PrefixCache::Variant v = cache_.bind(r.hash, Tier::kRecent, r.layers);
  if (v != PrefixCache::kNone) hold(r, v);
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
    if (!cache_.contains(parent)) break;
  }
  return pages * B;
}

std::pair<SeqId, size_t> KvStore::create_sequence_with_prefix(std::span<const int32_t> tokens) {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  const SeqId id = next_seq_++;
  Sequence s;
  uint64_t parent = 0;
  for (size_t p = 0; (p + 1) * B <= tokens.size() && cache_.enabled(); ++p) {
    const uint64_t h = page_hash(parent, tokens.subspan(p * B, B));
    // Install the FP8 copy when it exists (higher fidelity); else the Stale copy. The controller may
    // demote it later, which rebinds to the cached Stale copy without converting.
    const PrefixCache::Variant v = cache_.best(h);
    if (v == PrefixCache::kNone) break;
    Row r;
    r.tier = cache_.kind(v);
    r.filled = static_cast<uint32_t>(B);
    r.sealed = true;
    r.hash = h;
    r.layers = cache_.row(v);
    for (const PageEntry& e : r.layers) pool_mut(e.format).add_ref(e.id, RefKind::kRequest);
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

ForwardStep KvStore::begin_step(std::span<const AppendChunk> chunks) {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  size_t new_rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Sequence& s = live_seq(chunks[i].seq, "begin_step");
    if (s.pending)
      throw InvalidArgument("begin_step: sequence " + std::to_string(chunks[i].seq) + " has a step in flight");
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].seq == chunks[i].seq)
        throw InvalidArgument("begin_step: sequence " + std::to_string(chunks[i].seq) + " appears twice in one step");
    const size_t n = chunks[i].ids.size();
    const size_t space = (!s.rows.empty() && s.rows.back().filled < B) ? B - s.rows.back().filled : 0;
    new_rows += n > space ? (n - space + B - 1) / B : 0;
  }
  const PageFormat f = append_format();
  reserve_free(f, new_rows * static_cast<size_t>(cfg_.layers));  // throws before any change, for the whole step
  std::vector<SeqId> seqs;
  for (const auto& c : chunks) {
    seqs.push_back(c.seq);
    Sequence& s = live_seq(c.seq, "begin_step");
    s.pending_first = s.tokens.size();
    s.pending = c.ids.size();
    for (const int32_t id : c.ids) {
      if (s.rows.empty() || s.rows.back().filled == B) {
        Row r;
        r.layers.reserve(cfg_.layers);
        for (int l = 0; l < cfg_.layers; ++l) {
          const PageId page = pool_mut(f).allocate(static_cast<uint16_t>(l));
          pool_mut(f).add_ref(page, RefKind::kRequest);
          r.layers.push_back({f, page});
        }
        s.rows.push_back(std::move(r));
      }
      ++s.rows.back().filled;
      s.tokens.push_back(id);
    }
  }
  ++ops_;
  debug_check();
  return ForwardStep(this, std::move(seqs), cfg_.layers);
}

std::vector<WriteSlot> KvStore::step_slots(SeqId seq, int layer) const {
  std::lock_guard lock(mu_);
  const Sequence& s = live_seq(seq, "write_slots");
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  std::vector<WriteSlot> slots;
  slots.reserve(s.pending);
  for (size_t t = 0; t < s.pending; ++t) {
    const size_t pos = s.pending_first + t;
    slots.push_back({s.rows[pos / B].layers[layer], static_cast<uint32_t>(pos % B)});
  }
  return slots;
}

KvStore::Sequence* KvStore::pending_seq(SeqId seq) {
  auto it = seqs_.find(seq);
  return it == seqs_.end() || !it->second.pending ? nullptr : &it->second;
}

void KvStore::step_commit(std::span<const SeqId> seqs) {
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  for (const SeqId seq : seqs) {
    Sequence* sp = pending_seq(seq);
    if (!sp) continue;
    Sequence& s = *sp;
    for (size_t r = s.pending_first / B; r < s.rows.size(); ++r)
      if (s.rows[r].filled == B && !s.rows[r].sealed) seal_row(s, r);
    s.pending = 0;
  }
  ++ops_;
  debug_check();
}

void KvStore::step_abandon(std::span<const SeqId> seqs) noexcept {
  // Only releases and shrinks: nothing here allocates or can fail.
  std::lock_guard lock(mu_);
  const size_t B = static_cast<size_t>(cfg_.tokens_per_page);
  for (const SeqId seq : seqs) {
    Sequence* sp = pending_seq(seq);
    if (!sp) continue;
    Sequence& s = *sp;
    const size_t keep = (s.pending_first + B - 1) / B;  // rows that held tokens before the step
    for (size_t r = keep; r < s.rows.size(); ++r) release_row(s.rows[r]);
    s.rows.resize(keep);
    if (keep) s.rows.back().filled = static_cast<uint32_t>(s.pending_first - (keep - 1) * B);
    s.tokens.resize(s.pending_first);
    s.pending = 0;
  }
  ++ops_;
}

void KvStore::append(SeqId seq, std::span<const int32_t> ids, std::span<const float> k, std::span<const float> v) {
  const size_t n = ids.size();
  const size_t head_floats = static_cast<size_t>(cfg_.kv_heads) * cfg_.head_dim;
  const size_t row_floats = static_cast<size_t>(cfg_.layers) * head_floats;
  if (!host_) throw InvalidArgument("append: the store's pages are not in host memory; write through a ForwardStep");
  if (k.size() != n * row_floats || v.size() != n * row_floats) {
    throw InvalidArgument("append: " + std::to_string(n) + " tokens need " + std::to_string(n * row_floats) +
                          " floats of K and of V, got " + std::to_string(k.size()) + " and " +
                          std::to_string(v.size()));
  }
  const AppendChunk chunk{seq, ids};
  ForwardStep step = begin_step(std::span<const AppendChunk>(&chunk, 1));
  std::vector<float> kl(n * head_floats), vl(n * head_floats);
  for (int l = 0; l < cfg_.layers; ++l) {
    for (size_t t = 0; t < n; ++t) {
      const size_t off = (t * cfg_.layers + l) * head_floats;
      std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(off), head_floats,
                  kl.begin() + static_cast<std::ptrdiff_t>(t * head_floats));
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(off), head_floats,
                  vl.begin() + static_cast<std::ptrdiff_t>(t * head_floats));
    }
    host_->write_tokens(step.write_slots(0, l), kl, vl);
  }
  step.commit();
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
      for (const PageEntry& e : r.layers) pool_mut(e.format).add_ref(e.id, RefKind::kRequest);
      if (src.variant != PrefixCache::kNone) hold(r, src.variant);
    } else {  // copy-on-write of the partial page: the child gets private copies
      for (int l = 0; l < cfg_.layers; ++l) {
        const PageEntry se = src.layers[l];
        PagePool& pl = pool_mut(se.format);
        const PageId id = pl.allocate(static_cast<uint16_t>(l));
        pl.add_ref(id, RefKind::kRequest);
        storage_->copy_page(se.format, se.id, id);
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
    PrefixCache::Variant rebind = PrefixCache::kNone;  // cached variant to install instead of converting
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
        const PrefixCache::Variant cached =
            r.hash ? cache_.find(r.hash, to_stale ? Tier::kStale : Tier::kRecent) : PrefixCache::kNone;
        if (cached != PrefixCache::kNone) {
          j.rebind = cached;
        } else {
          j.convert = true;
          for (int l = 0; l < cfg_.layers; ++l)
            if (!is_protected(l))
              ++need[codec::format_index(
                  storage_format(cfg_.mode, to_stale ? Tier::kStale : Tier::kRecent, stale_[l]))];
        }
      }
      jobs.push_back(std::move(j));
    }
    // Feasibility first, without touching anything (a failed plan changes nothing, LRU order included):
    // the variants this plan rebinds to do not count as reclaimable.
    std::unordered_set<PrefixCache::Variant> keep;
    for (const Job& j : jobs)
      if (j.rebind != PrefixCache::kNone) keep.insert(j.rebind);
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const auto pf = static_cast<PageFormat>(f);
      const size_t avail = pool(pf).free_pages() + cache_.freeable(pf, &keep);
      if (avail >= need[f]) continue;
      throw OutOfCapacity(std::string("KV capacity exhausted: the plan needs ") + std::to_string(need[f]) + " free " +
                          codec::to_string(pf) + " layer-pages, " + std::to_string(avail) +
                          " are free or reclaimable (capacity " + std::to_string(pool(pf).capacity()) + ")");
    }
    // Planned rebind targets are held, so neither the reservation below nor a concurrent eviction can
    // remove them while the lock is released.
    for (const Job& j : jobs)
      if (j.rebind != PrefixCache::kNone) cache_.plan(j.rebind);
    for (int f = 0; f < codec::kNumPageFormats; ++f) reserve_free(static_cast<PageFormat>(f), need[f]);
    // Take conversion references on sources and allocate destinations (private until published).
    for (Job& j : jobs) {
      if (!j.convert) continue;
      for (int l = 0; l < cfg_.layers; ++l) {
        if (is_protected(l)) continue;
        const PageFormat df = storage_format(cfg_.mode, j.target, stale_[l]);
        pool_mut(j.src[l].format).add_ref(j.src[l].id, RefKind::kConversion);
        const PageId id = pool_mut(df).allocate(static_cast<uint16_t>(l));
        pool_mut(df).add_ref(id, RefKind::kConversion);
        j.dst[l] = {df, id};
      }
      ++conversions_in_flight_;
    }
  }
  // Convert bytes without the metadata lock: sources are sealed, destinations private.
  std::vector<PageStorage::Conversion> conv;
  for (const Job& j : jobs) {
    if (!j.convert) continue;
    for (int l = 0; l < cfg_.layers; ++l)
      if (!is_protected(l)) conv.push_back({j.src[l], j.dst[l], static_cast<uint32_t>(l)});
  }
  if (!conv.empty()) storage_->convert(conv);
  {
    std::lock_guard lock(mu_);
    for (Job& j : jobs) {
      auto it = seqs_.find(j.seq);
      const bool valid = it != seqs_.end() && it->second.live && j.page < it->second.rows.size() &&
                         it->second.rows[j.page].layers == j.src;
      if (j.convert) {  // record completion: the destination is complete and immutable
        for (int l = 0; l < cfg_.layers; ++l)
          if (!is_protected(l)) pool_mut(j.dst[l].format).seal(j.dst[l].id);
      }
      if (j.rebind != PrefixCache::kNone) cache_.unplan(j.rebind);
      if (valid) {
        Row& r = it->second.rows[j.page];
        if (j.convert || j.rebind != PrefixCache::kNone) {
          const std::vector<PageEntry> next = j.rebind != PrefixCache::kNone ? cache_.row(j.rebind) : j.dst;
          for (const PageEntry& e : next) pool_mut(e.format).add_ref(e.id, RefKind::kRequest);
          unhold(r);
          for (const PageEntry& e : r.layers)
            pool_mut(e.format).release(e.id, RefKind::kRequest);  // publish: swap the row
          r.layers = next;
          if (j.rebind != PrefixCache::kNone) {
            r.variant = j.rebind;  // the planned hold becomes this row's hold
            ++res.rebound;
          } else {
            if (r.hash) {
              const PrefixCache::Variant v = cache_.bind(r.hash, j.target, r.layers);  // later holders rebind to it
              if (v != PrefixCache::kNone) hold(r, v);
            }
            ++(j.target == Tier::kStale ? res.converted : res.promoted);
          }
        } else if (r.tier != j.target) {
          ++res.retagged;
        }
        r.tier = j.target;
      } else {
        ++res.dropped;
        if (j.rebind != PrefixCache::kNone) cache_.unhold(j.rebind);
      }
      if (j.convert) {  // the source is freed here unless readers (or other holders) still have it
        for (int l = 0; l < cfg_.layers; ++l) {
          if (is_protected(l)) continue;
          pool_mut(j.dst[l].format).release(j.dst[l].id, RefKind::kConversion);
          pool_mut(j.src[l].format).release(j.src[l].id, RefKind::kConversion);
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

uint64_t KvStore::pin_entries(std::span<const PageEntry> entries) const {
  auto* self = const_cast<KvStore*>(this);
  for (const PageEntry& e : entries) self->pool_mut(e.format).add_ref(e.id, RefKind::kReader);
  const uint64_t id = next_pin_++;
  pins_.emplace(id, entries);
  return id;
}

PinnedSequence KvStore::pin(SeqId seq) const {
  std::lock_guard lock(mu_);
  const Sequence& s = live_seq(seq, "pin");
  PinnedSequence p(this);
  p.length_ = s.tokens.size();
  p.last_fill_ = s.rows.empty() ? 0 : s.rows.back().filled;
  p.rows_.layers_ = static_cast<size_t>(cfg_.layers);
  auto& flat = p.rows_.flat_;
  flat.reserve(s.rows.size() * p.rows_.layers_);
  for (const Row& r : s.rows) flat.insert(flat.end(), r.layers.begin(), r.layers.end());
  p.pin_id_ = pin_entries(flat);
  return p;
}

PagedView KvStore::view(SeqId seq, int layer) const {
  std::lock_guard lock(mu_);
  const Sequence& s = live_seq(seq, "view");
  if (layer < 0 || layer >= cfg_.layers)
    throw InvalidArgument("view: layer " + std::to_string(layer) + " out of range");
  // One layer's entries only: a decode step views every layer of every sequence once, so copying the
  // whole block table each time would cost layers times as much.
  PagedView v(this);
  v.layer_ = layer;
  v.length_ = s.tokens.size();
  v.last_fill_ = s.rows.empty() ? 0 : s.rows.back().filled;
  v.tokens_per_page_ = static_cast<uint32_t>(cfg_.tokens_per_page);
  v.entries_.reserve(s.rows.size());
  for (const Row& r : s.rows) v.entries_.push_back(r.layers[static_cast<size_t>(layer)]);
  v.pin_id_ = pin_entries(v.entries_);
  return v;
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
  const size_t n = cache_.evict_oldest(max_variants);
  ++ops_;
  debug_check();
  return n;
}

void KvStore::set_cache_quota(PageFormat f, size_t layer_pages) {
  std::lock_guard lock(mu_);
  cfg_.cache_quota[codec::format_index(f)] = layer_pages;
  cache_.set_quota(f, layer_pages);
  ++ops_;
  debug_check();
}

std::vector<std::pair<uint64_t, Tier>> KvStore::lru_snapshot() const {
  std::lock_guard lock(mu_);
  return cache_.lru_snapshot();
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

std::array<uint32_t, kNumRefKinds> KvStore::refs(PageEntry e) const {
  std::lock_guard lock(mu_);
  return pool(e.format).meta(e.id).refs;
}

size_t KvStore::available_pages(PageFormat f) const {
  std::lock_guard lock(mu_);
  return pool(f).free_pages() + cache_.freeable(f);
}

}  // namespace minimakv::cache
