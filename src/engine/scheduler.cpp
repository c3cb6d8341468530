#include "minimakv/engine/scheduler.h"

#include <algorithm>
#include <stdexcept>

namespace minimakv::engine {

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Admission parse_admission(std::string_view name) {
  if (name == "reserve") return Admission::kReserve;
  if (name == "preempt") return Admission::kPreempt;
  throw std::invalid_argument("admission policy must be reserve or preempt, got '" + std::string(name) + "'");
}

const char* to_string(Admission a) { return a == Admission::kReserve ? "reserve" : "preempt"; }

struct Scheduler::Live {
  RequestId id = 0;
  Request req;
  std::vector<int32_t> tokens;  // prompt, then every emitted token
  size_t prompt_len = 0;
  cache::SeqId seq = 0;         // 0 while waiting
  size_t fed = 0;               // tokens of `tokens` in the sequence's KV
  uint64_t rng = 0;
  PageCounts reserved{};        // kReserve: peak pages held against the pools
  RequestSummary sum;
  bool admitted_once = false;
};

Scheduler::Scheduler(const Network& net, SchedulerOptions opt, const cache::StoreConfig& pools)
    : net_(net), opt_(std::move(opt)), budget_(net.config(), opt_.kv), ctl_(opt_.kv.controller) {
  const auto& c = net.config();
  if (pools.layers != static_cast<int>(c.num_hidden_layers) || pools.kv_heads != static_cast<int>(c.num_key_value_heads) ||
      pools.head_dim != static_cast<int>(c.head_dim))
    throw std::invalid_argument("scheduler: the KV pools' geometry does not match the model");
  if (pools.mode != opt_.kv.mode || pools.tokens_per_page != opt_.kv.tokens_per_page)
    throw std::invalid_argument("scheduler: the KV pools' mode or page size differ from the KV options");
  if (opt_.max_running < 1) throw std::invalid_argument("scheduler: max_running must be at least 1");
  if (opt_.max_step_tokens < opt_.max_running)
    throw std::invalid_argument("scheduler: max_step_tokens (" + std::to_string(opt_.max_step_tokens) +
                                ") must be at least max_running (" + std::to_string(opt_.max_running) +
                                "), so every running request decodes in each pass");
  store_ = net.make_store(pools);
  for (int64_t e : c.eos_token_ids) eos_.push_back(static_cast<int32_t>(e));
}

Scheduler::~Scheduler() = default;

RequestId Scheduler::add_request(Request r) {
  const auto& c = net_.config();
  validate(r.sampling);
  if (r.prompt.empty()) throw std::invalid_argument("request: empty prompt");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= static_cast<int32_t>(c.vocab_size))
      throw std::invalid_argument("request: token id " + std::to_string(t) + " is outside the vocabulary of " +
                                  std::to_string(c.vocab_size));
  const size_t total = r.prompt.size() + static_cast<size_t>(r.sampling.max_new_tokens);
  if (total > static_cast<size_t>(c.max_position_embeddings))
    throw std::invalid_argument("request: " + std::to_string(r.prompt.size()) + " prompt tokens plus " +
                                std::to_string(r.sampling.max_new_tokens) + " new tokens exceed the model's context of " +
                                std::to_string(c.max_position_embeddings));
  const PageCounts peak = budget_.peak(total);
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const size_t cap = store_->pool(static_cast<codec::PageFormat>(f)).capacity();
    if (peak[static_cast<size_t>(f)] > cap)
      throw std::invalid_argument("request: " + std::to_string(total) + " tokens need up to " + budget_.describe(peak) +
                                  ", more than the KV pools hold (" + codec::to_string(static_cast<codec::PageFormat>(f)) +
                                  ": " + std::to_string(cap) + " layer-pages)");
  }
  auto live = std::make_unique<Live>();
  live->req = std::move(r);
  live->tokens = live->req.prompt;
  live->prompt_len = live->tokens.size();
  live->rng = live->req.sampling.seed;
  live->sum.prompt_tokens = live->prompt_len;
  live->sum.arrival = Clock::now();
  std::lock_guard lock(inbox_mu_);
  live->id = live->sum.id = next_id_++;
  active_.insert(live->id);
  ++counters_.waiting;
  const RequestId id = live->id;
  inbox_.push_back(std::move(live));
  return id;
}

bool Scheduler::abort(RequestId id) {
  std::lock_guard lock(inbox_mu_);
  if (!active_.contains(id)) return false;
  aborts_.push_back(id);
  return true;
}

bool Scheduler::idle() const {
  std::lock_guard lock(inbox_mu_);
  return active_.empty();
}

SchedulerCounters Scheduler::counters() const {
  std::lock_guard lock(inbox_mu_);
  return counters_;
}

void Scheduler::drain_inbox() {
  std::vector<std::unique_ptr<Live>> in;
  std::vector<RequestId> ab;
  {
    std::lock_guard lock(inbox_mu_);
    in.swap(inbox_);
    ab.swap(aborts_);
  }
  for (auto& r : in) {
    waiting_.push_back(r.get());
    live_.emplace(r->id, std::move(r));
  }
  for (RequestId id : ab) {
    const auto it = live_.find(id);
    if (it != live_.end()) finish(*it->second, FinishReason::kAbort);
  }
}

bool Scheduler::fits(const Live& r) const {
  if (running_.size() >= opt_.max_running) return false;
  // Alone, every request fits (add_request checked its peak against the pools): the queue always moves.
  if (running_.empty()) return true;
  PageCounts need{};
  if (opt_.admission == Admission::kReserve) {
    need = budget_.peak(r.prompt_len + static_cast<size_t>(r.req.sampling.max_new_tokens));
    for (size_t f = 0; f < need.size(); ++f)
      if (reserved_[f] + need[f] > store_->pool(static_cast<codec::PageFormat>(f)).capacity()) return false;
    return true;
  }
  // kPreempt: the request at its current length, what running prompts still need, one pass's headroom
  need = budget_.settled(r.tokens.size());
  for (const Live* x : running_) {
    if (x->fed + 1 >= x->tokens.size()) continue;  // decoding: grows a token at a time, preemption covers it
    const PageCounts to = budget_.settled(x->tokens.size()), from = budget_.settled(x->fed);
    for (size_t f = 0; f < need.size(); ++f) need[f] += to[f] - from[f];
  }
  need[static_cast<size_t>(store_->append_format())] += budget_.step_headroom(opt_.max_step_tokens);
  for (size_t f = 0; f < need.size(); ++f) {
    if (!need[f]) continue;
    const auto pf = static_cast<codec::PageFormat>(f);
    if (need[f] > store_->pool(pf).free_pages() && need[f] > store_->available_pages(pf)) return false;
  }
  return true;
}

void Scheduler::admit(Live& r) {
  // The last token is always computed: its logits pick the next one.
  const auto [seq, covered] =
      store_->create_sequence_with_prefix(std::span<const int32_t>(r.tokens).first(r.tokens.size() - 1));
  r.seq = seq;
  r.fed = covered;
  if (opt_.admission == Admission::kReserve) {
    r.reserved = budget_.peak(r.prompt_len + static_cast<size_t>(r.req.sampling.max_new_tokens));
    for (size_t f = 0; f < r.reserved.size(); ++f) reserved_[f] += r.reserved[f];
  }
  if (!r.admitted_once) {
    r.admitted_once = true;
    r.sum.admitted = Clock::now();
    r.sum.reused_tokens = covered;
  }
  running_.push_back(&r);
  std::lock_guard lock(inbox_mu_);
  --counters_.waiting;
  ++counters_.running;
  counters_.peak_running = std::max(counters_.peak_running, counters_.running);
  counters_.prefix_query_tokens += r.tokens.size() - 1;
  counters_.prefix_hit_tokens += covered;
}

void Scheduler::release_pages(Live& r) {
  if (!r.seq) return;
  store_->finish(r.seq);
  ctl_.forget(r.seq);
  r.seq = 0;
  r.fed = 0;
  for (size_t f = 0; f < r.reserved.size(); ++f) reserved_[f] -= r.reserved[f];
  r.reserved = {};
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  std::lock_guard lock(inbox_mu_);
  --counters_.running;
  ++counters_.waiting;
}

void Scheduler::preempt(Live& r) {
  release_pages(r);
  waiting_.push_front(&r);
  ++r.sum.preemptions;
  std::lock_guard lock(inbox_mu_);
  ++counters_.preemptions;
}

Scheduler::Live* Scheduler::newest_running() { return running_.empty() ? nullptr : running_.back(); }

void Scheduler::finish(Live& r, FinishReason why, std::string error) {
  const RequestId id = r.id;
  if (r.req.keep_accounting) r.sum.accounting = store_->accounting();
  release_pages(r);
  const auto w = std::find(waiting_.begin(), waiting_.end(), &r);
  if (w != waiting_.end()) waiting_.erase(w);
  r.sum.reason = why;
  r.sum.error = std::move(error);
  r.sum.finished = Clock::now();
  {
    std::lock_guard lock(inbox_mu_);
    active_.erase(id);
    --counters_.waiting;
    if (why == FinishReason::kAbort) ++counters_.aborted;
    else if (why == FinishReason::kError) ++counters_.failed;
    else ++counters_.finished;
  }
  const auto owned = std::move(live_.at(id));
  live_.erase(id);
  if (owned->req.sink) owned->req.sink({id, -1, &owned->sum});
}

void Scheduler::emit(Live& r, int32_t token, const TokenLogprobs* lp) {
  r.tokens.push_back(token);
  r.sum.tokens.push_back(token);
  const auto now = Clock::now();
  if (r.sum.token_times.empty()) r.sum.first_token = now;
  r.sum.token_times.push_back(now);
  {
    std::lock_guard lock(inbox_mu_);
    ++counters_.generated_tokens;
  }
  if (r.req.sink) r.req.sink({r.id, token, nullptr, lp});
}

// The request's logits after its whole history: the next token, or the end.
void Scheduler::sample(Live& r, std::span<const float> logits, StepStats& st) {
  const auto& sp = r.req.sampling;
  if (r.sum.tokens.empty()) {
    r.sum.prefill_seconds = seconds_since(r.sum.admitted);
    if (sp.keep_prompt_logits && r.sum.prompt_logits.empty()) r.sum.prompt_logits.assign(logits.begin(), logits.end());
  }
  if (r.sum.tokens.size() >= static_cast<size_t>(sp.max_new_tokens)) {
    ++st.finished;
    finish(r, FinishReason::kLength);
    return;
  }
  int32_t t;
  if (sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
    std::vector<float> adjusted(logits.begin(), logits.end());
    apply_penalties(adjusted, r.sum.tokens, sp.presence_penalty, sp.frequency_penalty);
    t = sample_token(adjusted, sp.temperature, sp.top_p, r.rng, sp.top_k);
  } else {
    t = sample_token(logits, sp.temperature, sp.top_p, r.rng, sp.top_k);
  }
  const auto& stops = sp.stop_ids.empty() ? eos_ : sp.stop_ids;
  if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
    ++st.finished;
    finish(r, FinishReason::kStop);
    return;
  }
  if (sp.logprobs >= 0) {
    const TokenLogprobs lp = token_logprobs(logits, t, sp.logprobs);
    emit(r, t, &lp);
  } else {
    emit(r, t, nullptr);
  }
  if (r.sum.tokens.size() >= static_cast<size_t>(sp.max_new_tokens)) {
    ++st.finished;
    finish(r, FinishReason::kLength);
  }
}

StepStats Scheduler::step() {
  const auto t0 = Clock::now();
  StepStats st;
  drain_inbox();
  // ---- build the pass: decode rows, then prompt chunks, then admissions
  struct Item {
    Live* r;
    size_t begin, n;  // positions [begin, begin + n) of r->tokens
    size_t row = 0;   // its logits in the pass
  };
  std::vector<Item> items;
  size_t budget = opt_.max_step_tokens;
  const size_t chunk = static_cast<size_t>(opt_.kv.prefill_chunk);
  // A one-token row feeds either a generated token (a decode row) or the last token of a prompt.
  const auto decoding = [](const Live* r) { return r->tokens.size() - r->fed == 1 && r->fed >= r->prompt_len; };
  bool hold_decode = false;
  if (opt_.prefill_first) {
    for (const Live* r : running_) hold_decode |= !decoding(r);
    hold_decode |= !waiting_.empty() && fits(*waiting_.front());
  }
  for (Live* r : running_)
    if (r->tokens.size() - r->fed == 1 && !(hold_decode && decoding(r))) {
      items.push_back({r, r->fed, 1});
      --budget;
      ++(decoding(r) ? st.decode_rows : st.prompt_tokens);
    }
  auto take_prompt = [&](Live* r) {
    const size_t n = std::min({chunk, r->tokens.size() - r->fed, budget});
    if (!n) return;
    items.push_back({r, r->fed, n});
    budget -= n;
    st.prompt_tokens += n;
  };
  for (Live* r : running_)
    if (r->tokens.size() - r->fed > 1) take_prompt(r);
  std::vector<cache::SeqId> installed;  // admitted with pages from the prefix cache
  while (budget > 0 && !waiting_.empty() && fits(*waiting_.front())) {
    Live* r = waiting_.front();
    waiting_.pop_front();
    admit(*r);
    ++st.admitted;
    if (r->fed) installed.push_back(r->seq);
    take_prompt(r);
  }
  // A prefix hit installs the cached FP8 copy of each page where the cache has one; retier at once, so
  // the request holds what its length settles at (the same formats a cold run's later chunks read) and
  // the FP8 copies beyond its window become evictable again.
  if (cache::retiers(opt_.kv.mode) && !installed.empty()) {
    const auto c0 = Clock::now();
    try {
      ctl_.checkpoint(*store_, installed);
    } catch (const cache::OutOfCapacity&) {
      // no TQ3 room to convert into: the copies stay FP8; the pass below preempts if that is too much
    }
    st.checkpoint_seconds += seconds_since(c0);
  }
  if (items.empty()) {
    st.total_seconds = seconds_since(t0);
    return st;
  }
  // ---- the forward pass; out of pages: preempt the newest request and retry without it
  const bool scoring = wants_page_scores(opt_.kv);
  std::vector<float> logits;
  std::vector<std::vector<float>> scores;
  auto drop_items_of = [&](const Live* r) {
    items.erase(std::remove_if(items.begin(), items.end(), [&](const Item& i) { return i.r == r; }), items.end());
  };
  while (!items.empty()) {
    std::vector<Network::SeqChunk> chunks;
    for (const Item& i : items)
      chunks.push_back({i.r->seq, std::span<const int32_t>(i.r->tokens).subspan(i.begin, i.n)});
    const auto f0 = Clock::now();
    try {
      logits = net_.forward_batch(*store_, chunks, false, scoring ? &scores : nullptr);
      st.forward_seconds += seconds_since(f0);
      for (size_t k = 0; k < items.size(); ++k) items[k].row = k;
      break;
    } catch (const cache::OutOfCapacity& e) {
      st.forward_seconds += seconds_since(f0);
      Live* victim = newest_running();
      if (running_.size() <= 1) {  // alone and still short: this request cannot continue
        drop_items_of(victim);
        finish(*victim, FinishReason::kError, e.what());
        ++st.finished;
        continue;
      }
      drop_items_of(victim);
      preempt(*victim);
      ++st.preempted;
    }
  }
  if (items.empty()) {
    st.total_seconds = seconds_since(t0);
    return st;
  }
  // ---- bookkeeping, checkpoints, sampling
  const size_t V = static_cast<size_t>(net_.config().vocab_size);
  std::vector<cache::SeqId> ckpt;
  for (size_t k = 0; k < items.size(); ++k) {
    Live& r = *items[k].r;
    r.fed += items[k].n;
    if (scoring) ctl_.observe(r.seq, scores[items[k].row]);
    const bool prompt_chunk = items[k].begin < r.prompt_len || items[k].n > 1;
    const size_t generated_fed = r.fed - r.prompt_len;
    const int every = opt_.kv.checkpoint_interval;
    if (prompt_chunk || (every > 0 && generated_fed % static_cast<size_t>(every) == 0)) ckpt.push_back(r.seq);
    if (items[k].begin < r.prompt_len && r.req.on_prefill_progress)
      r.req.on_prefill_progress(std::min(r.fed, r.prompt_len), r.prompt_len);
  }
  const auto c0 = Clock::now();
  while (cache::retiers(opt_.kv.mode) && !ckpt.empty()) {
    try {
      ctl_.checkpoint(*store_, ckpt);
      break;
    } catch (const cache::OutOfCapacity&) {
      if (running_.size() <= 1) break;  // the pages stay FP8; the next pass finds out whether they fit
      Live* victim = newest_running();
      ckpt.erase(std::remove(ckpt.begin(), ckpt.end(), victim->seq), ckpt.end());
      drop_items_of(victim);
      preempt(*victim);
      ++st.preempted;
    }
  }
  st.checkpoint_seconds += seconds_since(c0);
  const double pass_seconds = seconds_since(t0);
  const auto s0 = Clock::now();
  for (const Item& it : items) {  // requests preempted by a checkpoint are no longer here
    Live& r = *it.r;
    if (r.fed != r.tokens.size()) continue;  // mid-prompt
    if (it.n == 1 && it.begin >= r.prompt_len && st.prompt_tokens == 0) r.sum.step_seconds.push_back(pass_seconds);
    sample(r, std::span<const float>(logits).subspan(it.row * V, V), st);
  }
  st.sample_seconds = seconds_since(s0);
  st.total_seconds = seconds_since(t0);
  std::lock_guard lock(inbox_mu_);
  ++counters_.steps;
  counters_.prompt_tokens += st.prompt_tokens;
  return st;
}

}  // namespace minimakv::engine
