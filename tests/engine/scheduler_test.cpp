// The scheduler against a reference that runs each request alone.
//
// Model-based: random arrivals, prompt lengths, shared prefixes, sampling, aborts and KV envelopes
// small enough to force waiting and preemption, on a network whose logits depend only on the token
// history the store holds (tests/engine/token_hash_network.h). Every request must end once, with the
// exact tokens of its solo run (aborted ones: a prefix of them); after every step the store's invariants
// hold, its accounting reconciles and its live sequences are the running requests; at the end no page
// is held by anyone but the prefix cache, and evicting the cache frees every page. Under kReserve no
// request is ever preempted. Also: the shipped model under preemption gives the tokens of generate(),
// a thread adding and aborting while the loop steps (TSan), and add_request's refusals.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "engine/needle_fixture.h"
#include "engine/token_hash_network.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/generate.h"
#include "minimakv/engine/scheduler.h"
#include "test_util.h"

namespace minimakv::engine {
namespace {

using testing::TokenHashNetwork;

struct Outcome {
  std::vector<int32_t> streamed;
  RequestSummary sum;
  int ends = 0;
};

Request make_request(std::vector<int32_t> prompt, const SamplingParams& sp, Outcome* out) {
  Request q;
  q.prompt = std::move(prompt);
  q.sampling = sp;
  q.sink = [out](const RequestOutput& o) {
    if (o.summary) {
      ++out->ends;
      out->sum = *o.summary;
    } else {
      out->streamed.push_back(o.token);
    }
  };
  return q;
}

Outcome solo(const Network& net, const KvOptions& kv, const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  SchedulerOptions so;
  so.kv = kv;
  so.max_running = 1;
  so.max_step_tokens = static_cast<size_t>(kv.prefill_chunk);
  so.admission = Admission::kReserve;
  Scheduler s(net, so, KvBudget(net.config(), kv).pools_for_tokens(prompt.size() + static_cast<size_t>(sp.max_new_tokens)));
  Outcome o;
  s.add_request(make_request(prompt, sp, &o));
  while (!s.idle()) {
    s.step();
  }
  EXPECT_EQ(s.counters().preemptions, 0u);
  EXPECT_NE(o.sum.reason, FinishReason::kError) << o.sum.error;
  return o;
}

void expect_consistent(const Scheduler& s) {
  const auto& st = s.store();
  st.check_invariants();
  const auto a = st.accounting();
  EXPECT_TRUE(a.reconciled);
  const auto c = s.counters();
  EXPECT_EQ(st.live_sequences().size(), c.running);
  for (const auto& f : a.formats) EXPECT_EQ(f.transient_pages, 0u);
}

void expect_nothing_leaked(cache::KvStore& st) {
  const auto a = st.accounting();
  EXPECT_EQ(a.live_sequences, 0u);
  for (const auto& f : a.formats) {
    EXPECT_EQ(f.request_pages, 0u);
    EXPECT_EQ(f.transient_pages, 0u);
  }
  st.evict_cached(std::numeric_limits<size_t>::max());
  for (const auto& f : st.accounting().formats) EXPECT_EQ(f.used_pages, 0u);
}

// Pools from the smallest envelope of at least k peak requests of `ref` tokens that the split accepts.
cache::StoreConfig tight_pools(const KvBudget& b, size_t ref, size_t step_tokens, double k) {
  for (int tries = 0;; ++tries, k *= 1.1) {
    try {
      const auto one = static_cast<double>(b.bytes(b.peak(ref)));
      const size_t head = b.step_headroom(step_tokens) * b.page_bytes(codec::PageFormat::kFp8);
      return b.pools_for_memory(static_cast<size_t>(k * one) + head, ref, step_tokens);
    } catch (const std::invalid_argument& e) {
      if (tries == 100) throw;
    }
  }
}

struct Scenario {
  KvOptions kv;
  SchedulerOptions so;
  cache::StoreConfig pools;
};

Scenario random_scenario(std::mt19937_64& rng, const TokenHashNetwork& net, size_t ref_tokens) {
  auto pick = [&](int lo, int hi) { return static_cast<int>(lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1))); };
  Scenario sc;
  auto& kv = sc.kv;
  kv.mode = static_cast<cache::KvMode>(pick(0, 2));
  kv.tokens_per_page = pick(3, 12);
  kv.prefill_chunk = pick(4, 40);
  kv.checkpoint_interval = pick(0, 9);
  kv.controller.recent_window = static_cast<uint32_t>(pick(1, 3));
  kv.controller.sink_pages = static_cast<uint32_t>(pick(0, 1));
  kv.controller.anchor_budget = static_cast<uint32_t>(pick(0, 2));
  kv.controller.scoring = pick(0, 1) == 1;
  const int layers = static_cast<int>(net.config().num_hidden_layers);
  if (pick(0, 2) == 0) kv.protected_layers = {pick(0, layers - 1)};
  if (pick(0, 2) == 0) {  // a TQ4 layer other than the protected one
    const int l = pick(0, layers - 1);
    if (kv.protected_layers.empty() || kv.protected_layers[0] != l) kv.tq4_layers = std::vector<int>{l};
  }
  sc.so.kv = kv;
  sc.so.admission = pick(0, 1) ? Admission::kPreempt : Admission::kReserve;
  sc.so.max_running = static_cast<size_t>(pick(1, 8));
  sc.so.max_step_tokens = std::max<size_t>(sc.so.max_running, static_cast<size_t>(pick(1, 64)));
  const KvBudget b(net.config(), kv);
  // an envelope of 1.1-3 peak requests of the reference length
  sc.pools = tight_pools(b, ref_tokens, sc.so.max_step_tokens, 1.1 + static_cast<double>(rng() % 190) / 100.0);
  return sc;
}

TEST(Scheduler, RandomTrafficMatchesSoloRunsAndLeaksNothing) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const TokenHashNetwork net;
  const int V = static_cast<int>(net.config().vocab_size);
  size_t preemptions = 0, waited = 0, prefix_hits = 0;
  for (int round = 0; round < 24; ++round) {
    const size_t ref = 40 + rng() % 120;
    const Scenario sc = random_scenario(rng, net, ref);
    SCOPED_TRACE("round " + std::to_string(round) + " mode " + cache::to_string(sc.kv.mode) + " admission " +
                 to_string(sc.so.admission) + " page " + std::to_string(sc.kv.tokens_per_page) + " chunk " +
                 std::to_string(sc.kv.prefill_chunk) + " step " + std::to_string(sc.so.max_step_tokens));
    Scheduler s(net, sc.so, sc.pools);
    // prompts share prefixes of a few bases, so the prefix cache serves some of them
    std::vector<std::vector<int32_t>> bases(3);
    for (auto& b : bases)
      for (size_t i = 0; i < ref; ++i) b.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(V - 1)));
    struct Planned {
      size_t arrive, abort_at;
      std::vector<int32_t> prompt;
      SamplingParams sp;
    };
    std::vector<Planned> plan(10 + rng() % 12);
    for (auto& p : plan) {
      const size_t total = 2 + rng() % (ref - 1);
      const size_t prompt_len = 1 + rng() % (total - 1);
      const auto& base = bases[rng() % bases.size()];
      const size_t shared = rng() % (prompt_len + 1);
      p.prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(shared));
      while (p.prompt.size() < prompt_len) p.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(V)));
      p.sp.max_new_tokens = static_cast<int>(total - prompt_len);
      p.sp.temperature = rng() % 3 == 0 ? 1.0f : 0.0f;
      p.sp.seed = rng();
      p.arrive = rng() % 30;
      p.abort_at = rng() % 5 == 0 ? p.arrive + rng() % 20 : std::numeric_limits<size_t>::max();
    }
    std::vector<Outcome> out(plan.size());
    std::vector<RequestId> ids(plan.size(), 0);
    for (size_t step = 0; step < 100000; ++step) {
      for (size_t i = 0; i < plan.size(); ++i) {
        if (plan[i].arrive == step) ids[i] = s.add_request(make_request(plan[i].prompt, plan[i].sp, &out[i]));
        if (plan[i].abort_at == step && ids[i]) s.abort(ids[i]);
      }
      s.step();
      expect_consistent(s);
      if (sc.so.admission == Admission::kReserve) {
        ASSERT_EQ(s.counters().preemptions, 0u);
      }
      if (step > 60 && s.idle()) break;
    }
    ASSERT_TRUE(s.idle());
    const auto c = s.counters();
    preemptions += c.preemptions;
    prefix_hits += c.prefix_hit_tokens;
    waited += c.peak_running < plan.size();
    EXPECT_EQ(c.failed, 0u);
    EXPECT_EQ(c.finished + c.aborted, plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      ASSERT_EQ(out[i].ends, 1);
      EXPECT_EQ(out[i].streamed, out[i].sum.tokens);
      const Outcome ref_run = solo(net, sc.kv, plan[i].prompt, plan[i].sp);
      if (out[i].sum.reason == FinishReason::kAbort) {
        ASSERT_LE(out[i].sum.tokens.size(), ref_run.sum.tokens.size());
        EXPECT_TRUE(std::equal(out[i].sum.tokens.begin(), out[i].sum.tokens.end(), ref_run.sum.tokens.begin()));
      } else {
        EXPECT_EQ(out[i].sum.tokens, ref_run.sum.tokens);
        EXPECT_EQ(out[i].sum.reason, ref_run.sum.reason);
      }
    }
    expect_nothing_leaked(const_cast<cache::KvStore&>(s.store()));
  }
  EXPECT_GT(waited, 0u);       // the envelopes were small enough to queue requests
  EXPECT_GT(prefix_hits, 0u);  // and shared prefixes were served from the cache
  RecordProperty("preemptions", std::to_string(preemptions));
}

// Tiny pages, a checkpoint every 4 tokens and a 2-page window: every mechanism acts within a few tokens.
KvOptions small_kv(cache::KvMode mode, int prefill_chunk) {
  KvOptions kv;
  kv.mode = mode;
  kv.tokens_per_page = 4;
  kv.prefill_chunk = prefill_chunk;
  kv.checkpoint_interval = 4;
  kv.controller.recent_window = 2;
  return kv;
}

// Two long requests in an envelope of 1.2 peak requests (minima: fewer settled ones): the second is admitted on its prompt,
// runs out of pages while both decode, is preempted, is prefilled again from its prompt and the tokens
// it had produced, and still produces its solo tokens.
TEST(Scheduler, PreemptionByRecomputeResumesExactly) {
  const TokenHashNetwork net(2, 40);
  for (const auto mode : {cache::KvMode::kBf16, cache::KvMode::kFp8, cache::KvMode::kMinima}) {
    SCOPED_TRACE(cache::to_string(mode));
    const KvOptions kv = small_kv(mode, 16);
    SchedulerOptions so;
    so.kv = kv;
    so.max_running = 4;
    so.max_step_tokens = 8;  // a small pass, so little FP8 headroom is set aside for it
    const KvBudget b(net.config(), kv);
    Scheduler s(net, so, tight_pools(b, 200, 8, 1.2));
    SamplingParams sp;
    sp.max_new_tokens = 150;
    sp.stop_ids = {-1};  // never stop early
    std::vector<Outcome> out(2);
    std::vector<std::vector<int32_t>> prompts(2);
    for (int i = 0; i < 2; ++i)
      for (int t = 0; t < 50; ++t) prompts[i].push_back((t * 7 + i * 3) % 39);
    for (int i = 0; i < 2; ++i) s.add_request(make_request(prompts[i], sp, &out[i]));
    while (!s.idle()) {
      s.step();
      expect_consistent(s);
    }
    EXPECT_GT(s.counters().preemptions, 0u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(out[i].sum.tokens, solo(net, kv, prompts[i], sp).sum.tokens);
      EXPECT_EQ(out[i].sum.tokens.size(), 150u);
    }
    EXPECT_GT(out[1].sum.preemptions, 0u);
    expect_nothing_leaked(const_cast<cache::KvStore&>(s.store()));
  }
}

// prefill_first (the offline batch): no pass mixes decode rows with prompt chunks, every prompt is in
// before the first decode pass, every decode pass carries the whole running batch, and each request
// still produces its solo tokens.
TEST(Scheduler, PrefillFirstDecodesTheWholeBatchInPureDecodePasses) {
  const TokenHashNetwork net(2, 40);
  auto rng = testing::rng_for_test();
  MINIMAKV_SEED_TRACE();
  for (const auto mode : {cache::KvMode::kBf16, cache::KvMode::kMinima}) {
    SCOPED_TRACE(cache::to_string(mode));
    const KvOptions kv = small_kv(mode, 8);
    SchedulerOptions so;
    so.kv = kv;
    so.max_running = 5;
    so.max_step_tokens = 8;
    so.admission = Admission::kReserve;
    so.prefill_first = true;
    SamplingParams sp;
    sp.max_new_tokens = 12;
    sp.stop_ids = {-1};
    std::vector<std::vector<int32_t>> prompts(5);
    std::vector<size_t> lengths;
    for (auto& p : prompts) {
      p.resize(5 + rng() % 30);
      for (auto& t : p) t = static_cast<int32_t>(rng() % 39);
      lengths.push_back(p.size() + 12);
    }
    Scheduler s(net, so, KvBudget(net.config(), kv).pools_for_requests(lengths));
    std::vector<Outcome> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) s.add_request(make_request(prompts[i], sp, &out[i]));
    bool decoding = false;
    size_t decode_passes = 0;
    while (!s.idle()) {
      const size_t running = s.counters().running;
      const StepStats st = s.step();
      EXPECT_FALSE(st.decode_rows > 0 && st.prompt_tokens > 0) << "a pass mixed decode rows and prompt chunks";
      if (st.decode_rows > 0) {
        decoding = true;
        ++decode_passes;
        EXPECT_EQ(st.decode_rows, running) << "a decode pass left a running request out";
      } else {
        EXPECT_FALSE(decoding && st.prompt_tokens > 0) << "prefill after decoding began";
      }
      expect_consistent(s);
    }
    EXPECT_EQ(decode_passes, 11u);  // tokens 2..12 of every request, together
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(out[i].sum.tokens, solo(net, kv, prompts[i], sp).sum.tokens);
      EXPECT_EQ(out[i].sum.step_seconds.size(), 11u);
    }
    expect_nothing_leaked(const_cast<cache::KvStore&>(s.store()));
  }
}

TEST(Scheduler, RefusesWhatCouldNeverRunAndChangesNothing) {
  const TokenHashNetwork net;
  KvOptions kv;
  kv.tokens_per_page = 8;
  SchedulerOptions so;
  so.kv = kv;
  so.max_running = 2;
  so.max_step_tokens = 64;
  const KvBudget b(net.config(), kv);
  Scheduler s(net, so, b.pools_for_tokens(100));
  SamplingParams sp;
  sp.max_new_tokens = 10;
  Outcome o;
  EXPECT_THROW(s.add_request(make_request({}, sp, &o)), std::invalid_argument);
  EXPECT_THROW(s.add_request(make_request({1, 2, 40}, sp, &o)), std::invalid_argument);  // outside the vocabulary
  EXPECT_THROW(s.add_request(make_request(std::vector<int32_t>(500, 1), sp, &o)), std::invalid_argument);
  sp.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(s.add_request(make_request({1, 2}, sp, &o)), std::invalid_argument);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.counters().waiting, 0u);
  EXPECT_FALSE(s.abort(12345));
  EXPECT_EQ(o.ends, 0);
  so.max_step_tokens = 1;  // fewer than max_running
  EXPECT_THROW(Scheduler(net, so, b.pools_for_tokens(100)), std::invalid_argument);
}

// The settled page counts are what a real store holds after the mode's chunked prefill.
TEST(KvBudget, SettledPagesMatchARealStore) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  model::ModelConfig cfg;
  cfg.num_hidden_layers = 3;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 64;
  cfg.vocab_size = 100;
  for (int trial = 0; trial < 30; ++trial) {
    GenerateOptions o;
    o.mode = static_cast<cache::KvMode>(rng() % 3);
    o.tokens_per_page = 2 + static_cast<int>(rng() % 14);
    o.prefill_chunk = 1 + static_cast<int>(rng() % 50);
    o.controller.recent_window = 1 + static_cast<uint32_t>(rng() % 4);
    o.controller.sink_pages = static_cast<uint32_t>(rng() % 2);
    if (rng() % 2) o.protected_layers = {static_cast<int>(rng() % 3)};
    std::vector<int> tq4;
    for (int l = 0; l < 3; ++l)  // some other layers' Stale pages in TQ4
      if (rng() % 3 == 0 && (o.protected_layers.empty() || o.protected_layers[0] != l)) tq4.push_back(l);
    o.tq4_layers = tq4;
    const size_t T = 1 + rng() % 300;
    const auto a = hold_one_request(cfg, o, T);
    const auto want = KvBudget(cfg, o).settled(T);
    const auto peak = KvBudget(cfg, o).peak(T);
    for (size_t f = 0; f < codec::kNumPageFormats; ++f) {
      EXPECT_EQ(a.formats[f].request_pages, want[f]) << "format " << f << " T " << T << " mode " << cache::to_string(o.mode);
      EXPECT_LE(want[f], peak[f]);
    }
  }
}

TEST(Scheduler, ThreadsAddAndAbortWhileTheLoopSteps) {
  const TokenHashNetwork net;
  KvOptions kv;
  kv.tokens_per_page = 4;
  kv.prefill_chunk = 8;
  SchedulerOptions so;
  so.kv = kv;
  so.max_running = 4;
  so.max_step_tokens = 16;
  const KvBudget b(net.config(), kv);
  Scheduler s(net, so, tight_pools(b, 60, 16, 2.0));
  constexpr int kRequests = 40;
  std::atomic<int> ends{0}, tokens{0};
  std::atomic<bool> done{false};
  std::thread producer([&] {
    std::mt19937_64 rng(7);
    std::vector<RequestId> ids;
    for (int i = 0; i < kRequests; ++i) {
      Request q;
      q.prompt.assign(1 + rng() % 30, static_cast<int32_t>(rng() % 39));
      q.sampling.max_new_tokens = static_cast<int>(rng() % 25);
      q.sink = [&](const RequestOutput& o) { (o.summary ? ends : tokens).fetch_add(1); };
      ids.push_back(s.add_request(std::move(q)));
      if (rng() % 4 == 0) s.abort(ids[rng() % ids.size()]);
      (void)s.counters();
      std::this_thread::yield();
    }
    done = true;
  });
  while (!done || !s.idle()) s.step();
  producer.join();
  EXPECT_EQ(ends.load(), kRequests);
  const auto c = s.counters();
  EXPECT_EQ(c.finished + c.aborted, static_cast<size_t>(kRequests));
  EXPECT_EQ(c.generated_tokens, static_cast<size_t>(tokens.load()));
  expect_nothing_leaked(const_cast<cache::KvStore&>(s.store()));
}

// The shipped model: three needle requests in an envelope that holds about one, admitted on their
// prompts (kPreempt); each answer equals generate()'s alone and holds its needle. (Past the answer the
// model's logits have near-ties, where batching and recompute may reassociate sums differently.)
TEST(Scheduler, ShippedModelUnderPreemptionGivesSoloTokens) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  static const auto model = Model::load(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m");
  for (const auto mode : {cache::KvMode::kFp8, cache::KvMode::kMinima}) {
    SCOPED_TRACE(cache::to_string(mode));
    GenerateOptions o = testing::needle_options(mode);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> values;
    for (int i = 0; i < 3; ++i) {
      values.push_back(std::to_string(1000000 + rng() % 9000000));
      auto ids = model->tokenizer().encode(testing::needle_prompt(values.back()));
      ids.erase(ids.begin() + 60, ids.begin() + 150 - 20 * i);
      prompts.push_back(std::move(ids));
    }
    SchedulerOptions so;
    so.kv = o;
    so.max_running = 3;
    so.max_step_tokens = 256;
    const KvBudget b(model->config(), o);
    const size_t longest = prompts[2].size() + static_cast<size_t>(o.max_new_tokens);
    Scheduler s(*model, so, tight_pools(b, longest, 256, 1.2));
    std::vector<Outcome> out(3);
    for (int i = 0; i < 3; ++i) s.add_request(make_request(prompts[i], o, &out[i]));
    while (!s.idle()) {
      s.step();
      expect_consistent(s);
    }
    EXPECT_GT(s.counters().preemptions + (s.counters().peak_running < 3), 0u);  // it had to queue or preempt
    for (int i = 0; i < 3; ++i) {
      const auto alone = generate(*model, prompts[i], o);
      EXPECT_EQ(out[i].sum.tokens, alone.tokens) << "request " << i;
      EXPECT_NE(model->tokenizer().decode(out[i].sum.tokens).find(values[i]), std::string::npos);
    }
    expect_nothing_leaked(const_cast<cache::KvStore&>(s.store()));
  }
}

}  // namespace
}  // namespace minimakv::engine
