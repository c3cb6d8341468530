// Evaluation runs on the shipped model: every arm answers the same examples, the prefix-reuse arm really
// serves the document from the cache, KV bytes reconcile and add up to whole pages of each format, and
// the memory projection's bytes equal the page layouts' sizes times the page counts; KL records carry the
// held-out perplexity, checked against one forward pass's logits.
#include <gtest/gtest.h>

#include <cmath>

#include "minimakv/codec/page_layout.h"
#include "minimakv/eval/runner.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

const engine::Model& model() {
  static const auto m = engine::Model::load(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m");
  return *m;
}

NiahData small_data() {
  NiahData d;
  for (int i = 0; i < 200; ++i)
    d.essay_sentences.push_back("Sentence number " + std::to_string(i) + " talks about rivers, maps and quiet towns.");
  d.adjectives = {"calm", "bright", "hollow", "rapid"};
  d.nouns = {"owl", "canyon", "ladder", "meadow"};
  return d;
}

TEST(EvalRunner, ArmsRunIdenticalExamplesAndReuseHitsTheCache) {
  const auto data = small_data();
  NiahConfig cfg;
  cfg.tasks = {"niah_single_1", "niah_multikey_1"};
  cfg.lengths = {448};
  cfg.examples = 1;
  cfg.seed = testing::test_seed();
  cfg.arms = {"bf16", "minima", "minima-reuse", "minima-scored"};
  cfg.page_size = 32;
  cfg.prefill_chunk = 128;
  cfg.gen_budget = 24;
  const auto recs = run_niah(model(), data, cfg);
  ASSERT_EQ(recs.size(), 2u * 4u);
  for (const auto& r : recs) {
    SCOPED_TRACE(r.task + " " + r.arm);
    EXPECT_EQ(r.prompt_tokens, recs[r.task == recs[0].task ? 0 : 4].prompt_tokens) << "same prompt for every arm";
    EXPECT_TRUE(r.kv.reconciled);
    EXPECT_GE(r.score, 0.0);
    EXPECT_LE(r.score, 1.0);
    if (r.arm == "minima-reuse") {
      EXPECT_GT(r.reused_tokens, r.prompt_tokens / 2) << "the document came from the prefix cache";
    } else {
      EXPECT_EQ(r.reused_tokens, 0u);
    }
    if (r.arm != "bf16") {
      EXPECT_GT(r.kv.stale, 0u) << "the context was compressed before the question";
    }
  }
  // Attention scores from the engine reach the controller: the scored arm keeps Anchor pages beyond the
  // sink that the recency-only arm has.
  for (size_t t = 0; t < 2; ++t) {
    const auto& plain = recs[t * 4 + 1];
    const auto& scored = recs[t * 4 + 3];
    ASSERT_EQ(plain.arm, "minima");
    ASSERT_EQ(scored.arm, "minima-scored");
    EXPECT_GT(scored.kv.anchor, plain.kv.anchor);
  }
  EXPECT_THROW(make_arm("minima-turbo", 32, 128), std::invalid_argument);
}

TEST(EvalRunner, ArmModifiersSetTheControllerAndProtectedLayers) {
  const auto a = make_arm("minima@recent=8@protect=0+7@sinks=2", 64, 512);
  EXPECT_EQ(a.opt.mode, cache::KvMode::kMinima);
  EXPECT_EQ(a.opt.controller.recent_window, 8u);
  EXPECT_EQ(a.opt.controller.sink_pages, 2u);
  EXPECT_EQ(a.opt.protected_layers, (std::vector<int>{0, 7}));
  EXPECT_FALSE(a.opt.controller.scoring);
  EXPECT_NE(a.describe().find("layers 0, 7 kept in FP8"), std::string::npos) << a.describe();
  const auto s = make_arm("minima-scored@anchors=8", 64, 512);
  EXPECT_TRUE(s.opt.controller.scoring);
  EXPECT_EQ(s.opt.controller.anchor_budget, 8u);
  EXPECT_FALSE(make_arm("minima-scored@anchors=0", 64, 512).opt.controller.scoring);
  EXPECT_TRUE(make_arm("minima-reuse@recent=2", 64, 512).prefix_reuse);
  for (const char* bad :
       {"minima@recent=0", "minima@recent=x", "minima@recent=", "minima@recent", "minima@color=2", "minima@protect=0+",
        "minima@protect=-1", "minima@protect=", "minima@protect=0++1", "minima@recent=8@@sinks=1", "fp8@recent=8",
        "bf16@protect=0", "minima@", "minima@recent=8x", "minima@tq4=", "minima@tq4=1+", "fp8@tq4=0"})
    EXPECT_THROW(make_arm(bad, 64, 512), std::invalid_argument) << bad;
  // A protected layer's Stale pages stay FP8: the same Recent and Anchor bytes, more Stale bytes, by
  // exactly one layer's Stale pages at FP8 instead of TQ3.
  const auto mem = project_memory(model(), {"minima@tq4=none", "minima@tq4=none@protect=0"}, {3000}, 64, 512);
  ASSERT_EQ(mem.size(), 2u);
  EXPECT_EQ(mem[1].kv.recent + mem[1].kv.anchor, mem[0].kv.recent + mem[0].kv.anchor);
  const auto& c = model().config();
  const codec::PageGeometry g{64, static_cast<int>(c.num_key_value_heads), static_cast<int>(c.head_dim)};
  const size_t fp8 = codec::PageLayout(codec::PageFormat::kFp8, g).bytes();
  const size_t tq3 = codec::PageLayout(codec::PageFormat::kTq3, g).bytes();
  const size_t stale_pages_per_layer = mem[0].kv.stale / (tq3 * c.num_hidden_layers);
  ASSERT_GT(stale_pages_per_layer, 0u);
  EXPECT_EQ(mem[1].kv.stale, mem[0].kv.stale + stale_pages_per_layer * (fp8 - tq3));
  // TQ4 layers: their Stale pages cost a TQ4 page instead of a TQ3 one, nothing else changes.
  const auto t4 = make_arm("minima@tq4=0+1", 64, 512);
  EXPECT_EQ(t4.opt.tq4_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(make_arm("minima@tq4=none", 64, 512).opt.tq4_layers, std::vector<int>{});
  EXPECT_FALSE(make_arm("minima", 64, 512).opt.tq4_layers.has_value()) << "the model's profile decides";
  EXPECT_NE(t4.describe().find("layers 0, 1 in TQ4"), std::string::npos) << t4.describe();
  const auto mem4 = project_memory(model(), {"minima@tq4=none", "minima@tq4=0+1"}, {3000}, 64, 512);
  const size_t tq4 = codec::PageLayout(codec::PageFormat::kTq4, g).bytes();
  EXPECT_EQ(mem4[1].kv.recent + mem4[1].kv.anchor, mem4[0].kv.recent + mem4[0].kv.anchor);
  EXPECT_EQ(mem4[1].kv.stale, mem4[0].kv.stale + 2 * stale_pages_per_layer * (tq4 - tq3));
}

TEST(EvalRunner, MemoryProjectionIsWholePagesOfEachFormat) {
  const auto& c = model().config();
  const codec::PageGeometry g{64, static_cast<int>(c.num_key_value_heads), static_cast<int>(c.head_dim)};
  const size_t bf16 = codec::PageLayout(codec::PageFormat::kBf16, g).bytes();
  const size_t fp8 = codec::PageLayout(codec::PageFormat::kFp8, g).bytes();
  const size_t tq3 = codec::PageLayout(codec::PageFormat::kTq3, g).bytes();
  const size_t L = static_cast<size_t>(c.num_hidden_layers);
  const size_t T = 5000, pages = (T + 63) / 64;
  const auto mem =
      project_memory(model(), {"bf16", "fp8", "minima@tq4=none", "minima-aggr@tq4=none", "minima"}, {T}, 64, 512);
  ASSERT_EQ(mem.size(), 5u);
  EXPECT_EQ(mem[0].kv.recent + mem[0].kv.anchor + mem[0].kv.stale, L * pages * bf16);
  EXPECT_EQ(mem[1].kv.recent + mem[1].kv.anchor + mem[1].kv.stale, L * pages * fp8);
  for (int i : {2, 3}) {
    const auto& k = mem[i].kv;
    ASSERT_EQ((k.recent + k.anchor) % (L * fp8), 0u);
    ASSERT_EQ(k.stale % (L * tq3), 0u);
    EXPECT_EQ((k.recent + k.anchor) / (L * fp8) + k.stale / (L * tq3), pages);
    EXPECT_TRUE(k.reconciled);
    EXPECT_EQ(k.live_tokens, T);
  }
  EXPECT_LT(mem[3].kv.bytes_per_token, mem[2].kv.bytes_per_token) << "a smaller Recent window keeps fewer FP8 pages";
  // The default minima arm follows the model's KV profile: its TQ4 layers' Stale pages are TQ4 pages.
  const size_t tq4 = codec::PageLayout(codec::PageFormat::kTq4, g).bytes();
  const size_t P = c.profile_tq4_layers.size(), stale_pages = mem[2].kv.stale / (L * tq3);
  EXPECT_EQ(mem[4].kv.recent + mem[4].kv.anchor, mem[2].kv.recent + mem[2].kv.anchor);
  EXPECT_EQ(mem[4].kv.stale, stale_pages * ((L - P) * tq3 + P * tq4));
  EXPECT_GT(mem[0].kv.bytes_per_token / mem[2].kv.bytes_per_token, 3.5);
}

TEST(EvalRunner, KlRecordsCarryTheHeldOutPerplexityOfEachArm) {
  const auto data = small_data();
  const int len = 192, score = 40;
  const auto recs = run_kl(model(), data, {len}, 1, score, {"fp8", "bf16"}, 32, 64, testing::test_seed());
  ASSERT_EQ(recs.size(), 2u);
  ASSERT_EQ(recs[0].arm, "bf16") << "the reference comes first, once";
  ASSERT_EQ(recs[1].arm, "fp8");
  EXPECT_EQ(recs[0].mean, 0.0);
  EXPECT_EQ(recs[0].ppl, recs[0].ppl_bf16);
  EXPECT_EQ(recs[1].ppl_bf16, recs[0].ppl);
  EXPECT_GT(recs[1].mean, 0.0);
  // Reference: the same window (run_kl's draw) in one forward pass over a bf16 store, every position's
  // logits, log-softmax in double.
  SplitMix rng(testing::test_seed() ^ static_cast<uint64_t>(len));
  const auto ids = essay_window(data, model().tokenizer(), rng.below(data.essay_sentences.size()), len);
  auto store = model().make_store(model().store_config(cache::KvMode::kBf16, 32, ids.size()));
  const auto logits = model().forward(*store, store->create_sequence(), ids, /*all_logits=*/true);
  const size_t V = model().config().vocab_size;
  double nll = 0;
  for (size_t p = ids.size() - score; p + 1 < ids.size(); ++p) {
    const float* row = logits.data() + p * V;
    double mx = row[0], z = 0;
    for (size_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    nll += -(static_cast<double>(row[static_cast<size_t>(ids[p + 1])]) - mx - std::log(z));
  }
  const double ppl = std::exp(nll / (score - 1));
  EXPECT_NEAR(recs[0].ppl, ppl, 2e-3 * ppl);
  EXPECT_GT(ppl, 1.0);
  EXPECT_TRUE(std::isfinite(recs[1].ppl));
  EXPECT_GT(recs[1].ppl, 1.0);
  EXPECT_NE(recs[1].ppl, recs[0].ppl) << "fp8 KV reads other values";
}

}  // namespace
}  // namespace minimakv::eval
