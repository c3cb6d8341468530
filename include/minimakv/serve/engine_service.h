// The engine behind the HTTP server: one thread drives the scheduler; any thread submits requests and
// reads their tokens.
//
// Owns: the scheduler (and through it the KV store), the engine thread, and one RequestStream per
// submitted request. The engine thread steps while any request is waiting or running and sleeps
// otherwise; after every step it records the scheduler's and the store's state in the metrics (the
// tier breakdown, a walk over every page, at most every `accounting_interval`).
// Invariants: a request's stream receives its tokens in order and then exactly one end event;
// cancel() (a client gone) aborts the request in the scheduler, which frees its pages at the next
// step; after drain() returns, nothing is running and no new request is accepted; the destructor
// drains with no grace period. Streams outlive the service safely (the engine only appends to them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "minimakv/engine/model.h"
#include "minimakv/engine/scheduler.h"
#include "minimakv/serve/metrics.h"

namespace minimakv::serve {

class EngineService;

// One event of a request: a token (with its log-probabilities when asked for), or the end.
struct StreamEvent {
  int32_t token = -1;
  std::optional<engine::TokenLogprobs> logprobs;
  bool end = false;
  engine::RequestSummary summary;  // the end event only
};

// What a stream and its service share, so a stream may outlive the service: cancel() then does nothing.
struct ServiceLink {
  std::mutex mu;
  EngineService* service = nullptr;
};

// The events of one request, consumed by one thread (the HTTP handler that owns it).
class RequestStream {
 public:
  // The next event, or nullopt when none arrived within `timeout`.
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);
  // Abort the request (idempotent; harmless after its end). as_stop: the server ended it on a stop
  // string, so the metrics count it as finished by "stop", not "abort".
  void cancel(bool as_stop = false);
  engine::RequestId id() const { return id_; }

 private:
  friend class EngineService;
  void push(StreamEvent e);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  engine::RequestId id_ = 0;
  std::shared_ptr<ServiceLink> link_;
  std::atomic<bool> cancelled_{false}, stopped_by_server_{false};
};

class EngineService {
 public:
  EngineService(const engine::Network& net, engine::SchedulerOptions opt, const cache::StoreConfig& pools,
                ServerMetrics& metrics, const backend::Backend* backend = nullptr,
                std::chrono::milliseconds accounting_interval = std::chrono::milliseconds(500));
  ~EngineService();
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // Queues a request. Throws std::invalid_argument (the scheduler's refusal: too long for the
  // context, bad sampling, more pages than the pools hold) or std::runtime_error once draining.
  std::shared_ptr<RequestStream> submit(std::vector<int32_t> prompt, const engine::SamplingParams& sampling);
  // Stops accepting, lets running and waiting requests finish for up to `grace`, aborts the rest and
  // returns once the scheduler is idle.
  void drain(std::chrono::milliseconds grace);
  bool accepting() const { return accepting_.load(); }
  engine::SchedulerCounters counters() const { return sched_.counters(); }
  const engine::Scheduler& scheduler() const { return sched_; }

 private:
  friend class RequestStream;
  void abort(engine::RequestId id);
  void loop();
  void fail_all(const std::string& why);

  engine::Scheduler sched_;
  ServerMetrics& metrics_;
  const backend::Backend* backend_;
  std::chrono::milliseconds accounting_interval_;
  std::shared_ptr<ServiceLink> link_ = std::make_shared<ServiceLink>();
  std::atomic<bool> accepting_{true}, stop_{false};
  std::mutex mu_;  // guards wake_ and active_
  std::condition_variable cv_;
  bool wake_ = false;
  std::map<engine::RequestId, std::weak_ptr<RequestStream>> active_;  // submitted, end not yet delivered
  std::thread thread_;
};

}  // namespace minimakv::serve
