// The server's Prometheus metrics, named as users know them from vLLM (prefix "minimakv:", label
// model_name): requests running and waiting, KV pages in use / held by requests / cached per format,
// bytes per format and by tier, KV
// usage, the envelope's measured capacity per mode, prefix-cache queries and hits, preemptions,
// attention routes / fallbacks / dense-shadow bytes, tokens in and out, requests by finish reason,
// HTTP errors by status, and histograms of queue time, time to first token, inter-token latency,
// end-to-end latency and request lengths.
//
// Owns: the registry (prometheus-cpp) and its text exposition. Every method is thread-safe: the
// engine thread records step state and finished requests, HTTP threads record errors and scrape.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "minimakv/backend/backend.h"
#include "minimakv/cache/kv_store.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/scheduler.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace minimakv::serve {

class ServerMetrics {
 public:
  explicit ServerMetrics(const std::string& model_name);
  ~ServerMetrics();

  // The envelope's capacity per mode (measured at startup, engine::measure_capacity).
  void set_capacity(std::span<const engine::CapacityRow> modes);
  // After a step: the scheduler's counters and the store's pools (cheap); with `accounting` also the
  // pages live requests hold, the cache-only pages, KV usage and the tier breakdown (a walk over every
  // page, so the caller rate-limits it).
  void observe_step(const engine::SchedulerCounters& c, const cache::KvStore& store,
                    const cache::Accounting* accounting, const backend::AttentionStats& attention);
  void request_finished(const engine::RequestSummary& s, const std::string& finish_reason);
  void http_error(int status);
  std::string render() const;  // Prometheus text format 0.0.4

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minimakv::serve
