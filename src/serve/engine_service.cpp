#include "minimakv/serve/engine_service.h"

#include <cstdio>
#include <stdexcept>

namespace minimakv::serve {

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::push(StreamEvent e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

void RequestStream::cancel(bool as_stop) {
  if (as_stop) stopped_by_server_ = true;
  if (cancelled_.exchange(true)) return;
  std::lock_guard lock(link_->mu);
  if (link_->service) link_->service->abort(id_);
}

EngineService::EngineService(const engine::Network& net, engine::SchedulerOptions opt, const cache::StoreConfig& pools,
                             ServerMetrics& metrics, const backend::Backend* backend,
                             std::chrono::milliseconds accounting_interval)
    : sched_(net, std::move(opt), pools),
      metrics_(metrics),
      backend_(backend),
      accounting_interval_(accounting_interval) {
  link_->service = this;
  thread_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() {
  drain(std::chrono::milliseconds(0));
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard lock(link_->mu);
  link_->service = nullptr;
}

std::shared_ptr<RequestStream> EngineService::submit(std::vector<int32_t> prompt,
                                                     const engine::SamplingParams& sampling) {
  if (!accepting_) throw std::runtime_error("the server is shutting down");
  auto stream = std::make_shared<RequestStream>();
  stream->link_ = link_;
  engine::Request q;
  q.prompt = std::move(prompt);
  q.sampling = sampling;
  q.sink = [this, stream](const engine::RequestOutput& o) {
    StreamEvent e;
    if (o.summary) {
      e.end = true;
      e.summary = *o.summary;
      const bool stop = stream->stopped_by_server_ && o.summary->reason == engine::FinishReason::kAbort;
      metrics_.request_finished(*o.summary, stop ? "stop" : engine::to_string(o.summary->reason));
      {
        std::lock_guard lock(mu_);
        active_.erase(o.id);
      }
    } else {
      e.token = o.token;
      if (o.logprobs) e.logprobs = *o.logprobs;
    }
    stream->push(std::move(e));
  };
  std::lock_guard lock(mu_);                       // held across add_request, so the id is registered before any event
  stream->id_ = sched_.add_request(std::move(q));  // throws invalid_argument, nothing queued
  active_.emplace(stream->id_, stream);
  wake_ = true;
  cv_.notify_one();
  return stream;
}

void EngineService::abort(engine::RequestId id) {
  sched_.abort(id);
  std::lock_guard lock(mu_);
  wake_ = true;
  cv_.notify_one();
}

void EngineService::drain(std::chrono::milliseconds grace) {
  accepting_ = false;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!sched_.idle() && std::chrono::steady_clock::now() < deadline && !stop_)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::vector<engine::RequestId> left;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : active_) left.push_back(id);
  }
  for (auto id : left) abort(id);
  const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!sched_.idle() && !stop_ && std::chrono::steady_clock::now() < hard)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void EngineService::fail_all(const std::string& why) {
  accepting_ = false;
  std::map<engine::RequestId, std::weak_ptr<RequestStream>> streams;
  {
    std::lock_guard lock(mu_);
    streams.swap(active_);
  }
  for (auto& [id, w] : streams)
    if (auto s = w.lock()) {
      StreamEvent e;
      e.end = true;
      e.summary.id = id;
      e.summary.reason = engine::FinishReason::kError;
      e.summary.error = why;
      s->push(std::move(e));
    }
}

void EngineService::loop() {
  auto last_accounting = std::chrono::steady_clock::now() - accounting_interval_;
  bool failed = false;
  while (true) {
    if (failed || sched_.idle()) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return wake_ || stop_; });
      wake_ = false;
      if (stop_) return;
      if (failed || sched_.idle()) continue;
    }
    try {
      sched_.step();
      const auto now = std::chrono::steady_clock::now();
      const bool walk = now - last_accounting >= accounting_interval_ || sched_.idle();
      std::optional<cache::Accounting> acc;
      if (walk) {
        acc = sched_.store().accounting();
        last_accounting = now;
      }
      metrics_.observe_step(sched_.counters(), sched_.store(), acc ? &*acc : nullptr,
                            backend_ ? backend_->attention_stats() : backend::AttentionStats{});
    } catch (const std::exception& e) {
      // A failed forward pass leaves the store in no state to continue: end every request with the
      // error and refuse new ones (the process keeps answering /health with the failure).
      std::fprintf(stderr, "minimakv serve: the engine failed: %s\n", e.what());
      fail_all(std::string("the engine failed: ") + e.what());
      failed = true;
    }
  }
}

}  // namespace minimakv::serve
