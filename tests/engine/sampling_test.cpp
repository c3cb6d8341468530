// The sampler's top-k, OpenAI's penalties and per-token log-probabilities, against independent fp64
// references on fresh random logits; and the scheduler delivering them with each token.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/token_hash_network.h"
#include "minimakv/engine/kv_budget.h"
#include "minimakv/engine/options.h"
#include "minimakv/engine/scheduler.h"
#include "test_util.h"

namespace minimakv::engine {
namespace {

std::vector<float> random_logits(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> g;
  std::vector<float> l(n);
  for (auto& x : l) x = 2.0f * g(rng);
  return l;
}

TEST(Sampling, TopKDrawsOnlyFromTheKMostLikelyInProportion) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto logits = random_logits(rng, 50);
  const int k = 5;
  std::vector<size_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  const std::set<size_t> allowed(order.begin(), order.begin() + k);
  double z = 0;  // fp64 reference: softmax at temperature 0.8 renormalised over the top k
  for (size_t i : allowed) z += std::exp(static_cast<double>(logits[i]) / 0.8);
  std::map<int32_t, int> counts;
  uint64_t state = rng();
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[sample_token(logits, 0.8f, 1.0f, state, k)];
  for (const auto& [t, c] : counts)
    ASSERT_TRUE(allowed.count(static_cast<size_t>(t))) << "token " << t << " is outside the top k";
  for (size_t i : allowed) {
    const double want = std::exp(static_cast<double>(logits[i]) / 0.8) / z;
    EXPECT_NEAR(counts[static_cast<int32_t>(i)] / static_cast<double>(draws), want,
                4.5 * std::sqrt(want * (1 - want) / draws) + 1e-3);
  }
  uint64_t s1 = 5;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits, 3.0f, 1.0f, s1, 1), static_cast<int32_t>(order[0]));
  // top_k 0 and top_k >= vocabulary draw exactly what the sampler drew before top-k existed
  uint64_t a = 11, b = 11, c = 11;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = sample_token(logits, 1.0f, 0.9f, a);
    EXPECT_EQ(sample_token(logits, 1.0f, 0.9f, b, 0), x);
    EXPECT_EQ(sample_token(logits, 1.0f, 0.9f, c, 1000), x);
  }
}

TEST(Sampling, PenaltiesSubtractPresenceOnceAndFrequencyPerOccurrence) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto logits = random_logits(rng, 30);
  const auto before = logits;
  std::uniform_int_distribution<int32_t> tok(0, 29);
  std::vector<int32_t> generated(40);
  for (auto& t : generated) t = tok(rng);
  apply_penalties(logits, generated, 0.5f, 0.25f);
  for (size_t t = 0; t < logits.size(); ++t) {
    const auto n = std::count(generated.begin(), generated.end(), static_cast<int32_t>(t));
    const float want = before[t] - (n ? 0.5f : 0.0f) - 0.25f * static_cast<float>(n);
    EXPECT_FLOAT_EQ(logits[t], want) << "token " << t << " seen " << n << " times";
  }
}

TEST(Sampling, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto logits = random_logits(rng, 1000);
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  const int32_t t = static_cast<int32_t>(rng() % logits.size());
  const TokenLogprobs lp = token_logprobs(logits, t, 5);
  EXPECT_EQ(lp.token, t);
  EXPECT_NEAR(lp.logprob, static_cast<double>(logits[static_cast<size_t>(t)]) - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 5u);
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(logits[static_cast<size_t>(lp.top[i].first)], sorted[i]);
    EXPECT_NEAR(lp.top[i].second, static_cast<double>(sorted[i]) - std::log(z), 1e-5);
  }
  EXPECT_TRUE(token_logprobs(logits, t, 0).top.empty());
}

TEST(Sampling, ValidateRefusesBadSamplingParameters) {
  for (auto bad : {+[](SamplingParams& p) { p.top_k = -1; }, +[](SamplingParams& p) { p.presence_penalty = 2.5f; },
                   +[](SamplingParams& p) { p.frequency_penalty = std::nanf(""); },
                   +[](SamplingParams& p) { p.logprobs = 21; }, +[](SamplingParams& p) { p.logprobs = -2; }}) {
    SamplingParams p;
    bad(p);
    EXPECT_THROW(validate(p), std::invalid_argument);
  }
}

TEST(Sampling, TheSchedulerSendsEachTokenWithItsLogprobsAndAppliesPenalties) {
  const testing::TokenHashNetwork net;
  KvOptions kv;
  kv.mode = cache::KvMode::kFp8;
  kv.tokens_per_page = 16;
  SchedulerOptions so;
  so.kv = kv;
  Scheduler s(net, so, KvBudget(net.config(), kv).pools_for_tokens(256));
  SamplingParams sp;
  sp.max_new_tokens = 24;
  sp.stop_ids = {-1};
  sp.logprobs = 3;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> lps;
  Request q;
  q.prompt = {1, 2, 3, 4, 5};
  q.sampling = sp;
  q.sink = [&](const RequestOutput& o) {
    if (o.summary) return;
    tokens.push_back(o.token);
    ASSERT_NE(o.logprobs, nullptr);
    lps.push_back(*o.logprobs);
  };
  s.add_request(std::move(q));
  while (!s.idle()) s.step();
  ASSERT_EQ(tokens.size(), 24u);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(lps[i].token, tokens[i]);
    ASSERT_EQ(lps[i].top.size(), 3u);
    EXPECT_EQ(lps[i].top[0].first, tokens[i]);  // greedy: the chosen token is the most likely
    EXPECT_LE(lps[i].logprob, 0.0f);
  }
  // penalties: the scheduler's greedy tokens equal a reference loop over the same network that
  // penalises the logits by the tokens generated so far and takes the argmax
  SamplingParams pen = sp;
  pen.logprobs = -1;
  pen.frequency_penalty = 2.0f;
  pen.presence_penalty = 2.0f;
  pen.max_new_tokens = 60;  // from a vocabulary of 40: repeats are certain
  const std::vector<int32_t> prompt = {7, 3, 9};
  std::vector<int32_t> got;
  Request r;
  r.prompt = prompt;
  r.sampling = pen;
  r.sink = [&](const RequestOutput& o) {
    if (!o.summary) {
      got.push_back(o.token);
      EXPECT_EQ(o.logprobs, nullptr);
    }
  };
  s.add_request(std::move(r));
  while (!s.idle()) s.step();
  auto ref_store = net.make_store(KvBudget(net.config(), kv).pools_for_tokens(256));
  const auto seq = ref_store->create_sequence();
  std::vector<int32_t> want, feed = prompt;
  for (int i = 0; i < pen.max_new_tokens; ++i) {
    const Network::SeqChunk chunk{seq, feed};
    auto logits = net.forward_batch(*ref_store, {&chunk, 1}, false, nullptr);
    apply_penalties(logits, want, pen.presence_penalty, pen.frequency_penalty);
    const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    want.push_back(t);
    feed = {t};
  }
  EXPECT_EQ(got, want);
  // and they matter here: without them greedy decoding takes another path
  std::vector<int32_t> plain;
  Request u;
  u.prompt = prompt;
  u.sampling = pen;
  u.sampling.frequency_penalty = u.sampling.presence_penalty = 0.0f;
  u.sink = [&](const RequestOutput& o) {
    if (!o.summary) plain.push_back(o.token);
  };
  s.add_request(std::move(u));
  while (!s.idle()) s.step();
  EXPECT_NE(plain, got);
}

}  // namespace
}  // namespace minimakv::engine
