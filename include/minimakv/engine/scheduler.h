// The request loop: continuous batching over one paged KV store, admission by KV memory, preemption by
// recompute, abort.
//
// Owns: the store, the tier controller and every request from add_request() until its last event.
// One step() builds one forward pass within a token budget: first one row for every running request
// that is decoding, then prompt chunks of running requests still in prefill (at most prefill_chunk
// tokens each), then new admissions in arrival order (preempted requests first). After the pass it runs
// the retier checkpoint of every sequence that took a prompt chunk or reached its checkpoint interval,
// samples, and emits tokens to each request's sink; finished and aborted requests release their pages
// at once.
// Admission compares the layer-pages a request will hold in each format (engine::KvBudget, page sizes
// as the pools allocate them) with what the pools have:
//   kReserve  a request is admitted only when its peak pages for prompt + max_new_tokens fit beside
//             every running request's reservation; it never preempts.
//   kPreempt  (vLLM's default) a request is admitted when its current length fits what is free and
//             reclaimable, after what running prompts still need; when a pass or a checkpoint runs out
//             of pages, the most recently admitted request is preempted: its pages are released (full
//             pages stay in the prefix cache), and it waits at the front of the queue to be prefilled
//             again from its prompt and the tokens it has produced, reusing surviving cached pages.
// Invariants: a request's tokens are emitted once, in order; a preempted request resumes with the same
// token history and sampler state, so greedy output equals a solo run up to floating-point
// reassociation (exactly, for a network whose output depends only on the tokens); a request no pool
// could ever hold is refused by add_request(), so the loop never waits on it forever; after every step
// the live sequences of the store are exactly the running requests'.
// Thread safety: add_request(), abort(), idle() and counters() may be called from any thread; step()
// from one thread at a time (the loop's). Sinks run on the step() thread and must not call step().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "minimakv/engine/kv_budget.h"
#include "minimakv/engine/network.h"
#include "minimakv/engine/options.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::engine {

using RequestId = uint64_t;
using Clock = std::chrono::steady_clock;

enum class FinishReason : uint8_t { kStop, kLength, kAbort, kError };
const char* to_string(FinishReason r);

// Everything about a request when it ends (passed to its sink with the last event).
struct RequestSummary {
  RequestId id = 0;
  FinishReason reason = FinishReason::kLength;
  std::string error;              // kError: why
  std::vector<int32_t> tokens;    // generated ids (a stop token excluded)
  size_t prompt_tokens = 0;
  size_t reused_tokens = 0;       // prompt tokens served from the prefix cache at the first admission
  size_t preemptions = 0;
  Clock::time_point arrival, admitted, first_token, finished;  // admitted: first admission
  std::vector<Clock::time_point> token_times;                 // when each token was emitted
  double prefill_seconds = 0;     // first admission to the first sampled token
  std::vector<double> step_seconds;  // wall time of each pure decode pass it was in (no prompt chunk in the
                                     // pass; checkpoint included)
  std::vector<float> prompt_logits;  // SamplingParams::keep_prompt_logits
  cache::Accounting accounting;      // Request::keep_accounting: the store's, before the pages went
};

// One event to a request's sink: a new token, or the end (summary set; token -1).
struct RequestOutput {
  RequestId id = 0;
  int32_t token = -1;
  const RequestSummary* summary = nullptr;  // valid during the call only
  const TokenLogprobs* logprobs = nullptr;  // with SamplingParams::logprobs >= 0; valid during the call only
};

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::function<void(const RequestOutput&)> sink;
  std::function<void(size_t done, size_t total)> on_prefill_progress;  // after each prompt chunk
  bool keep_accounting = false;  // RequestSummary::accounting (costs a walk over every page)
};

enum class Admission : uint8_t { kReserve, kPreempt };
Admission parse_admission(std::string_view name);  // "reserve" or "preempt"
const char* to_string(Admission a);

struct SchedulerOptions {
  KvOptions kv;
  size_t max_step_tokens = 2048;  // tokens of one forward pass (decode rows and prompt chunks)
  size_t max_running = 256;       // requests holding pages at once
  Admission admission = Admission::kPreempt;
  // Offline batches (generate --batch): decode rows wait while any running request has prompt left or
  // a waiting one can be admitted, so every prompt is prefilled first and the batch then decodes
  // together in pure decode passes, the steps a decode benchmark means. Serving leaves it off (decode
  // rows go first in every pass, so running requests keep streaming while others prefill).
  bool prefill_first = false;
};

struct StepStats {
  size_t decode_rows = 0, prompt_tokens = 0, admitted = 0, preempted = 0, finished = 0;
  double forward_seconds = 0, checkpoint_seconds = 0, sample_seconds = 0;
  double total_seconds = 0;  // the whole step; minus the three above: the loop's own cost
};

struct SchedulerCounters {
  size_t waiting = 0, running = 0, peak_running = 0;
  size_t finished = 0, aborted = 0, failed = 0, preemptions = 0, steps = 0;
  size_t prompt_tokens = 0, generated_tokens = 0;
  size_t prefix_query_tokens = 0, prefix_hit_tokens = 0;  // tokens looked up / found at admissions
};

class Scheduler {
 public:
  // `pools`: the store's configuration (KvBudget::pools_for_memory or pools_for_tokens); its geometry
  // and mode must match the network and opt.kv. Throws std::invalid_argument otherwise.
  Scheduler(const Network& net, SchedulerOptions opt, const cache::StoreConfig& pools);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; it is admitted by a later step(). Throws std::invalid_argument (nothing queued)
  // for an empty prompt, a token out of the vocabulary, a prompt plus max_new_tokens past the model's
  // context, bad sampling parameters, or a request whose peak pages exceed a pool's capacity.
  RequestId add_request(Request r);
  // Ends a waiting or running request at the next step (reason kAbort; its pages are released). False
  // when the id is unknown or already finished.
  bool abort(RequestId id);
  // One forward pass, or nothing when no request is waiting or running.
  StepStats step();
  bool idle() const;
  SchedulerCounters counters() const;
  const cache::KvStore& store() const { return *store_; }
  const KvBudget& budget() const { return budget_; }
  const SchedulerOptions& options() const { return opt_; }

 private:
  struct Live;
  void drain_inbox();
  bool fits(const Live& r) const;
  void admit(Live& r);
  void preempt(Live& r);
  void finish(Live& r, FinishReason why, std::string error = {});
  void emit(Live& r, int32_t token, const TokenLogprobs* lp);
  void sample(Live& r, std::span<const float> logits, StepStats& st);
  void release_pages(Live& r);
  Live* newest_running();

  const Network& net_;
  SchedulerOptions opt_;
  KvBudget budget_;
  std::unique_ptr<cache::KvStore> store_;
  policy::TierController ctl_;
  std::vector<int32_t> eos_;
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  std::deque<Live*> waiting_;
  std::vector<Live*> running_;  // in admission order
  PageCounts reserved_{};       // kReserve: peak pages of the running requests

  mutable std::mutex inbox_mu_;  // guards the three below and counters_
  std::vector<std::unique_ptr<Live>> inbox_;
  std::vector<RequestId> aborts_;
  std::unordered_set<RequestId> active_;  // added and not yet finished
  RequestId next_id_ = 1;
  SchedulerCounters counters_;
};

}  // namespace minimakv::engine
