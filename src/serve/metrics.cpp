#include "minimakv/serve/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>

namespace minimakv::serve {

namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

double seconds(engine::Clock::time_point a, engine::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Latency buckets from 1 ms to 10 min, and length buckets in tokens, as vLLM's ranges go.
const Histogram::BucketBoundaries kLatency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                              1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0};
const Histogram::BucketBoundaries kTokens = {1, 16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};

}  // namespace

struct ServerMetrics::Impl {
  std::shared_ptr<prometheus::Registry> reg = std::make_shared<prometheus::Registry>();
  prometheus::Labels base;
  mutable std::mutex mu;  // guards the delta bookkeeping and the lazily added labelled series

  Gauge *running, *waiting, *usage;
  prometheus::Family<Gauge>*pages, *capacity_pages, *bytes, *capacity_bytes, *tier_bytes, *capacity_requests,
      *capacity_tokens, *request_pages, *cached_pages;
  Counter *preemptions, *prefix_queries, *prefix_hits, *prompt_tokens, *generation_tokens, *fallbacks, *dense_shadow;
  prometheus::Family<Counter>*routes, *bytes_read, *finished, *http_errors;
  Histogram *ttft, *itl, *e2e, *queue, *prompt_len, *gen_len;

  // last values of the cumulative sources, to turn them into counter increments
  engine::SchedulerCounters last{};
  backend::AttentionStats last_attention{};

  template <typename B>
  auto& family(B b, const std::string& name, const std::string& help) {
    return b.Name(name).Help(help).Labels(base).Register(*reg);
  }
};

ServerMetrics::ServerMetrics(const std::string& model_name) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.base = {{"model_name", model_name}};
  auto gauge = [&](const std::string& n, const std::string& h) { return &m.family(prometheus::BuildGauge(), n, h); };
  auto counter = [&](const std::string& n, const std::string& h) {
    return &m.family(prometheus::BuildCounter(), n, h);
  };
  auto histogram = [&](const std::string& n, const std::string& h, const Histogram::BucketBoundaries& b) {
    return &m.family(prometheus::BuildHistogram(), n, h).Add({}, b);
  };
  m.running = &gauge("minimakv:num_requests_running", "Requests holding KV pages.")->Add({});
  m.waiting =
      &gauge("minimakv:num_requests_waiting", "Requests queued for admission (preempted ones included).")->Add({});
  m.usage =
      &gauge("minimakv:kv_cache_usage_perc",
             "Share of the KV pools' bytes held by live requests (evictable prefix-cache pages count as free), 0 to 1.")
           ->Add({});
  m.pages =
      gauge("minimakv:kv_cache_pages", "KV layer-pages in use (live requests and the prefix cache), by page format.");
  m.request_pages = gauge("minimakv:kv_cache_request_pages", "KV layer-pages held by live requests, by page format.");
  m.cached_pages = gauge("minimakv:kv_cache_cached_pages",
                         "KV layer-pages only the prefix cache holds (evictable), by page format.");
  m.capacity_pages = gauge("minimakv:kv_cache_capacity_pages", "KV layer-pages each pool holds, by page format.");
  m.bytes = gauge("minimakv:kv_cache_bytes", "KV bytes in use, by page format.");
  m.capacity_bytes = gauge("minimakv:kv_cache_capacity_bytes", "KV pool bytes, by page format.");
  m.tier_bytes =
      gauge("minimakv:kv_cache_tier_bytes", "KV bytes held by live requests, by tier (Recent, Anchor, Stale).");
  m.capacity_requests = gauge("minimakv:kv_capacity_requests",
                              "Requests of the reference length the KV envelope holds, measured per KV mode (Eq. 14).");
  m.capacity_tokens = gauge("minimakv:kv_capacity_tokens", "Tokens the KV envelope holds, measured per KV mode.");
  m.preemptions =
      &counter("minimakv:num_preemptions_total", "Requests preempted (recomputed later) for lack of KV pages.")
           ->Add({});
  m.prefix_queries =
      &counter(
           "minimakv:prefix_cache_queries_total",
           "Prompt tokens looked up in the prefix cache (every admission, re-admissions after preemption included).")
           ->Add({});
  m.prefix_hits =
      &counter("minimakv:prefix_cache_hits_total", "Prompt tokens found in the prefix cache at admissions.")->Add({});
  m.prompt_tokens = &counter("minimakv:prompt_tokens_total", "Prompt tokens of finished requests.")->Add({});
  m.generation_tokens = &counter("minimakv:generation_tokens_total", "Tokens generated.")->Add({});
  m.routes = counter("minimakv:attention_calls_total", "Attention calls by route (mixed, fp8-only, tq3-only, dense).");
  m.bytes_read = counter("minimakv:attention_bytes_read_total", "KV bytes attention read, by page format.");
  m.fallbacks =
      &counter("minimakv:attention_fallbacks_total", "Attention calls that fell back to a slower path.")->Add({});
  m.dense_shadow =
      &counter("minimakv:attention_dense_shadow_bytes_total", "Bytes of dense copies attention made.")->Add({});
  m.finished = counter("minimakv:request_success_total", "Requests finished, by finish reason.");
  m.http_errors = counter("minimakv:http_errors_total", "Requests answered with an error, by HTTP status.");
  m.ttft = histogram("minimakv:time_to_first_token_seconds", "From arrival to the first token.", kLatency);
  m.itl = histogram("minimakv:inter_token_latency_seconds", "Between consecutive tokens of a request.", kLatency);
  m.e2e = histogram("minimakv:e2e_request_latency_seconds", "From arrival to the last token.", kLatency);
  m.queue = histogram("minimakv:request_queue_time_seconds", "From arrival to the first admission.", kLatency);
  m.prompt_len = histogram("minimakv:request_prompt_tokens", "Prompt tokens per request.", kTokens);
  m.gen_len = histogram("minimakv:request_generation_tokens", "Generated tokens per request.", kTokens);
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const std::string name = codec::to_string(static_cast<codec::PageFormat>(f));
    m.pages->Add({{"format", name}});
    m.request_pages->Add({{"format", name}});
    m.cached_pages->Add({{"format", name}});
    m.capacity_pages->Add({{"format", name}});
    m.bytes->Add({{"format", name}});
    m.capacity_bytes->Add({{"format", name}});
    m.bytes_read->Add({{"format", name}});
  }
  for (int t = 0; t < cache::kNumTiers; ++t)
    m.tier_bytes->Add({{"tier", cache::to_string(static_cast<cache::Tier>(t))}});
  for (const char* r : {"stop", "length", "abort", "error"}) m.finished->Add({{"finished_reason", r}});
  for (const char* r : {"mixed", "fp8-only", "tq3-only", "dense"}) m.routes->Add({{"route", r}});
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::set_capacity(std::span<const engine::CapacityRow> rows) {
  auto& m = *impl_;
  for (const auto& r : rows) {
    const prometheus::Labels l = {{"kv_mode", cache::to_string(r.mode)},
                                  {"reference_tokens", std::to_string(r.request_tokens)}};
    m.capacity_requests->Add(l).Set(static_cast<double>(r.max_requests));
    m.capacity_tokens->Add({{"kv_mode", cache::to_string(r.mode)}}).Set(static_cast<double>(r.tokens_held));
  }
}

void ServerMetrics::observe_step(const engine::SchedulerCounters& c, const cache::KvStore& store,
                                 const cache::Accounting* acc, const backend::AttentionStats& att) {
  auto& m = *impl_;
  std::lock_guard lock(m.mu);
  m.running->Set(static_cast<double>(c.running));
  m.waiting->Set(static_cast<double>(c.waiting));
  double held = 0, total = 0;
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const auto pf = static_cast<codec::PageFormat>(f);
    const auto& pool = store.pool(pf);
    const std::string name = codec::to_string(pf);
    const double in_use = static_cast<double>(pool.capacity() - pool.free_pages());
    const double page = static_cast<double>(pool.page_bytes());
    m.pages->Add({{"format", name}}).Set(in_use);
    m.capacity_pages->Add({{"format", name}}).Set(static_cast<double>(pool.capacity()));
    m.bytes->Add({{"format", name}}).Set(in_use * page);
    m.capacity_bytes->Add({{"format", name}}).Set(static_cast<double>(pool.capacity()) * page);
    total += static_cast<double>(pool.capacity()) * page;
    if (acc) {
      const auto& fa = acc->formats[static_cast<size_t>(f)];
      m.request_pages->Add({{"format", name}}).Set(static_cast<double>(fa.request_pages));
      m.cached_pages->Add({{"format", name}}).Set(static_cast<double>(fa.cache_only_pages));
      held += static_cast<double>(fa.request_pages + fa.transient_pages) * page;
    }
    const uint64_t read = att.bytes_read[static_cast<size_t>(f)],
                   before = m.last_attention.bytes_read[static_cast<size_t>(f)];
    if (read > before) m.bytes_read->Add({{"format", name}}).Increment(static_cast<double>(read - before));
  }
  if (acc) {
    m.usage->Set(total > 0 ? held / total : 0.0);
    for (int t = 0; t < cache::kNumTiers; ++t)
      m.tier_bytes->Add({{"tier", cache::to_string(static_cast<cache::Tier>(t))}})
          .Set(static_cast<double>(acc->tier_bytes[static_cast<size_t>(t)]));
  }
  auto inc = [](Counter* k, size_t now, size_t before) {
    if (now > before) k->Increment(static_cast<double>(now - before));
  };
  inc(m.preemptions, c.preemptions, m.last.preemptions);
  inc(m.prefix_hits, c.prefix_hit_tokens, m.last.prefix_hit_tokens);
  inc(m.prefix_queries, c.prefix_query_tokens, m.last.prefix_query_tokens);
  inc(m.generation_tokens, c.generated_tokens, m.last.generated_tokens);
  m.last = c;
  for (const auto& [route, n] : att.routes) {
    const auto it = m.last_attention.routes.find(route);
    const uint64_t before = it == m.last_attention.routes.end() ? 0 : it->second;
    if (n > before) m.routes->Add({{"route", route}}).Increment(static_cast<double>(n - before));
  }
  if (att.fallbacks > m.last_attention.fallbacks)
    m.fallbacks->Increment(static_cast<double>(att.fallbacks - m.last_attention.fallbacks));
  if (att.dense_shadow_bytes > m.last_attention.dense_shadow_bytes)
    m.dense_shadow->Increment(static_cast<double>(att.dense_shadow_bytes - m.last_attention.dense_shadow_bytes));
  m.last_attention = att;
}

void ServerMetrics::request_finished(const engine::RequestSummary& s, const std::string& reason) {
  auto& m = *impl_;
  std::lock_guard lock(m.mu);
  m.finished->Add({{"finished_reason", reason}}).Increment();
  m.prompt_tokens->Increment(static_cast<double>(s.prompt_tokens));
  m.prompt_len->Observe(static_cast<double>(s.prompt_tokens));
  m.gen_len->Observe(static_cast<double>(s.tokens.size()));
  if (s.admitted != engine::Clock::time_point{}) m.queue->Observe(seconds(s.arrival, s.admitted));
  if (!s.token_times.empty()) {
    m.ttft->Observe(seconds(s.arrival, s.first_token));
    for (size_t i = 1; i < s.token_times.size(); ++i) m.itl->Observe(seconds(s.token_times[i - 1], s.token_times[i]));
  }
  m.e2e->Observe(seconds(s.arrival, s.finished));
}

void ServerMetrics::http_error(int status) {
  auto& m = *impl_;
  std::lock_guard lock(m.mu);
  m.http_errors->Add({{"status", std::to_string(status)}}).Increment();
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(impl_->mu);
  return prometheus::TextSerializer().Serialize(impl_->reg->Collect());
}

}  // namespace minimakv::serve
