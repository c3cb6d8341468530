// The engine on the shipped model (CPU): the files load, greedy decoding is deterministic, and a
// needle placed early in the prompt is retrieved in every KV mode, with minima's context already in
// TQ3 when the question is read (chunked prefill with a retier checkpoint after each chunk).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "minimakv/engine/generate.h"
#include "test_util.h"

namespace minimakv::engine {
namespace {

const std::string kDir = std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m";

std::string needle_prompt(const std::string& value) {
  std::string hay;
  for (int i = 0; i < 14; ++i) hay += "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
  return "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
         "about the number afterwards.\nOne of the special magic numbers for vivid-lantern is: " + value + ".\n" + hay +
         "What is the special magic number for vivid-lantern mentioned in the provided text? The special magic "
         "number for vivid-lantern mentioned in the provided text is";
}

// Small pages and chunks with a 2-page Recent window, so a 300-token prompt exercises every tier.
GenerateOptions needle_options(cache::KvMode mode) {
  GenerateOptions o;
  o.mode = mode;
  o.tokens_per_page = 32;
  o.prefill_chunk = 128;
  o.max_new_tokens = 10;
  o.controller.recent_window = 2;
  o.controller.anchor_budget = 0;
  o.controller.sink_pages = 1;
  return o;
}

const Model& shipped() {
  static const auto m = Model::load(kDir);
  return *m;
}

TEST(Engine, ShippedModelLoadsWithItsConfig) {
  const Model& m = shipped();
  EXPECT_EQ(m.config().head_dim, 128);
  EXPECT_EQ(m.tokenizer().vocab_size(), static_cast<size_t>(m.config().vocab_size));
  const auto sc = m.store_config(cache::KvMode::kMinima, 64, 1024);
  EXPECT_EQ(sc.layers, m.config().num_hidden_layers);
}

TEST(Engine, GreedyIsDeterministicAndRetrievesInEveryMode) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const std::string value = std::to_string(1000000 + rng() % 9000000);
  const Model& m = shipped();
  const auto ids = m.tokenizer().encode(needle_prompt(value));
  ASSERT_GT(ids.size(), 300u);
  attention::ThreadPool pool(2);
  std::vector<int32_t> first;
  for (auto mode : {cache::KvMode::kBf16, cache::KvMode::kFp8, cache::KvMode::kMinima}) {
    const GenerateOptions o = needle_options(mode);
    const auto r = generate(m, ids, o, &pool);
    const std::string text = m.tokenizer().decode(r.tokens);
    EXPECT_NE(text.find(value), std::string::npos) << cache::to_string(mode) << ": '" << text << "'";
    EXPECT_TRUE(r.accounting.reconciled);
    if (mode == cache::KvMode::kMinima) {
      EXPECT_GT(r.accounting.tier_bytes[static_cast<int>(cache::Tier::kStale)], 0u);  // the needle's page is TQ3
    }
    if (mode == cache::KvMode::kBf16) {
      first = r.tokens;
      const auto again = generate(m, ids, o, &pool);
      EXPECT_EQ(again.tokens, first);  // deterministic
    }
  }
}

TEST(Engine, PrefixReuseWarmEqualsCold) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const std::string value = std::to_string(1000000 + rng() % 9000000);
  const Model& m = shipped();
  const auto ids = m.tokenizer().encode(needle_prompt(value));
  attention::ThreadPool pool(2);
  for (auto mode : {cache::KvMode::kFp8, cache::KvMode::kMinima}) {
    Session session(m, needle_options(mode), 4 * ids.size(), &pool);
    const auto cold = session.run(ids);
    const auto warm = session.run(ids);
    EXPECT_EQ(cold.reused_tokens, 0u);
    EXPECT_GE(warm.reused_tokens, ids.size() - 32);  // every full page but the one holding the last token
    const std::string text = m.tokenizer().decode(warm.gen.tokens);
    EXPECT_NE(text.find(value), std::string::npos) << cache::to_string(mode) << ": '" << text << "'";
    if (mode == cache::KvMode::kFp8) {
      EXPECT_EQ(warm.gen.tokens, cold.gen.tokens);  // same bytes, same tokens
    }
    session.store().check_invariants();
  }
}

TEST(Engine, SamplingIsSeededAndTopPRestricts) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  std::vector<float> logits(64);
  for (auto& x : logits) x = 2.0f * g(rng);
  uint64_t a = 42, b = 42;
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(sample_token(logits, 1.0f, 0.9f, a));
    sb.push_back(sample_token(logits, 1.0f, 0.9f, b));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_GT(std::set<int32_t>(sa.begin(), sa.end()).size(), 1u);  // it does sample
  uint64_t c = 7;
  EXPECT_EQ(sample_token(logits, 0.0f, 1.0f, c), argmax(logits));
  EXPECT_EQ(sample_token(logits, 1.0f, 1e-6f, c), argmax(logits));  // a tiny nucleus is the top token
  // empirical frequencies follow the softmax (temperature 1, no truncation)
  std::vector<int> counts(64, 0);
  uint64_t d = 99;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[sample_token(logits, 1.0f, 1.0f, d)];
  const float m = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float x : logits) z += std::exp(x - m);
  const int top = argmax(logits);
  EXPECT_NEAR(counts[top] / static_cast<double>(draws), std::exp(logits[top] - m) / z, 0.02);
}

TEST(Engine, RejectsBadInput) {
  const Model& m = shipped();
  cache::KvStore store(m.store_config(cache::KvMode::kFp8, 32, 64));
  const auto s = store.create_sequence();
  const int32_t bad = static_cast<int32_t>(m.config().vocab_size);
  EXPECT_THROW(m.forward(store, s, std::span<const int32_t>(&bad, 1)), std::invalid_argument);
  EXPECT_EQ(store.length(s), 0u);
  EXPECT_THROW(Model::load("/nonexistent"), std::exception);
}

}  // namespace
}  // namespace minimakv::engine
