// The engine service's threading contract, on the token-history network (exact outputs): requests
// submitted from many threads at once each receive exactly the tokens of a solo run and one end event;
// cancel() ends a request with kAbort and frees its pages; drain() refuses new requests and aborts what
// outlives the grace period. Runs under ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <thread>

#include "engine/token_hash_network.h"
#include "minimakv/engine/kv_budget.h"
#include "minimakv/serve/engine_service.h"

namespace minimakv::serve {
namespace {

engine::SchedulerOptions options() {
  engine::SchedulerOptions so;
  so.kv.mode = cache::KvMode::kMinima;
  so.kv.tokens_per_page = 16;
  so.kv.prefill_chunk = 32;
  so.max_step_tokens = 256;
  return so;
}

struct Collected {
  std::vector<int32_t> tokens;
  int ends = 0;
  engine::FinishReason reason = engine::FinishReason::kError;
};

Collected drain_stream(RequestStream& s) {
  Collected c;
  for (int spins = 0; spins < 20000 && c.ends == 0; ++spins)
    if (auto e = s.next(std::chrono::milliseconds(5))) {
      if (e->end) {
        ++c.ends;
        c.reason = e->summary.reason;
      } else {
        c.tokens.push_back(e->token);
      }
    }
  // nothing may follow the end
  EXPECT_FALSE(s.next(std::chrono::milliseconds(20)).has_value());
  return c;
}

TEST(EngineService, ConcurrentSubmittersGetTheirSoloTokensAndOneEnd) {
  const testing::TokenHashNetwork net;
  const auto so = options();
  const auto pools = engine::KvBudget(net.config(), so.kv).pools_for_memory(64u << 20, 512, so.max_step_tokens);
  ServerMetrics metrics("test");
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 20 + 13 * i; ++k) p.push_back((i * 7 + k * 3) % 39);
    prompts.push_back(p);
  }
  engine::SamplingParams sp;
  sp.max_new_tokens = 40;
  sp.stop_ids = {-1};
  // solo runs: one request at a time through its own service
  std::vector<std::vector<int32_t>> solo;
  {
    EngineService one(net, so, pools, metrics);
    for (const auto& p : prompts) solo.push_back(drain_stream(*one.submit(p, sp)).tokens);
  }
  EngineService svc(net, so, pools, metrics);
  std::vector<Collected> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] { got[i] = drain_stream(*svc.submit(prompts[i], sp)); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].ends, 1);
    EXPECT_EQ(got[i].reason, engine::FinishReason::kLength);
    EXPECT_EQ(got[i].tokens, solo[i]) << "request " << i;
  }
  EXPECT_GE(svc.counters().peak_running, 2u);  // they did run together
  EXPECT_NE(metrics.render().find("minimakv:request_success_total{model_name=\"test\",finished_reason=\"length\"} 48"),
            std::string::npos);
}

TEST(EngineService, CancelAbortsAndFreesAndDrainRefusesThenAborts) {
  const testing::TokenHashNetwork net;
  const auto so = options();
  const auto pools = engine::KvBudget(net.config(), so.kv).pools_for_memory(64u << 20, 4096, so.max_step_tokens);
  ServerMetrics metrics("test");
  EngineService svc(net, so, pools, metrics);
  engine::SamplingParams sp;
  sp.max_new_tokens = 50000;  // runs until aborted
  sp.stop_ids = {-1};
  std::vector<int32_t> prompt(100, 5);
  auto s = svc.submit(prompt, sp);
  size_t seen = 0;
  while (seen < 10)
    if (auto e = s->next(std::chrono::milliseconds(100)); e && !e->end) ++seen;
  s->cancel();
  const Collected rest = drain_stream(*s);
  EXPECT_EQ(rest.ends, 1);
  EXPECT_EQ(rest.reason, engine::FinishReason::kAbort);
  for (int i = 0; i < 200 && svc.scheduler().store().live_sequences().size() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(svc.scheduler().store().live_sequences().empty());
  // drain: the running request is aborted after the grace period, new ones are refused
  auto t = svc.submit(prompt, sp);
  svc.drain(std::chrono::milliseconds(50));
  EXPECT_FALSE(svc.accepting());
  EXPECT_THROW(svc.submit(prompt, sp), std::runtime_error);
  EXPECT_EQ(drain_stream(*t).reason, engine::FinishReason::kAbort);
}

TEST(EngineService, RefusalsLeaveNothingQueued) {
  const testing::TokenHashNetwork net;
  const auto so = options();
  ServerMetrics metrics("test");
  EngineService svc(net, so, engine::KvBudget(net.config(), so.kv).pools_for_memory(8u << 20, 512, so.max_step_tokens),
                    metrics);
  engine::SamplingParams sp;
  EXPECT_THROW(svc.submit({}, sp), std::invalid_argument);
  EXPECT_THROW(svc.submit({1, 999}, sp), std::invalid_argument);
  sp.temperature = -1;
  EXPECT_THROW(svc.submit({1, 2}, sp), std::invalid_argument);
  EXPECT_EQ(svc.counters().waiting + svc.counters().running, 0u);
}

}  // namespace
}  // namespace minimakv::serve
