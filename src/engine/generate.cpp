#include "minimakv/engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "minimakv/backend/cpu_ops.h"

namespace minimakv::engine {

int32_t sample_token(std::span<const float> logits, float temperature, float top_p, uint64_t& rng_state) {
  if (temperature <= 0.0f) return backend::argmax(logits);
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<float, int32_t>> p(logits.size());
  double z = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = {std::exp((logits[i] - m) / temperature), static_cast<int32_t>(i)};
    z += p[i].first;
  }
  std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = 0;
  double mass = 0.0;
  while (keep < p.size() && (keep == 0 || mass < top_p * z)) mass += p[keep++].first;
  // SplitMix64 draw in [0, mass)
  rng_state += 0x9e3779b97f4a7c15ull;
  uint64_t x = rng_state;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53 * mass;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i].first;
    if (u < acc) return p[i].second;
  }
  return p[keep - 1].second;
}

void validate(const GenerateOptions& opt) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("generate: " + what); };
  if (!std::isfinite(opt.temperature) || opt.temperature < 0.0f || opt.temperature > 100.0f)
    bad("temperature must be a finite number in [0, 100], got " + std::to_string(opt.temperature));
  if (!std::isfinite(opt.top_p) || opt.top_p <= 0.0f || opt.top_p > 1.0f)
    bad("top_p must be a finite number in (0, 1], got " + std::to_string(opt.top_p));
  if (opt.max_new_tokens < 0) bad("max_new_tokens must be non-negative, got " + std::to_string(opt.max_new_tokens));
  if (opt.tokens_per_page < 1) bad("tokens_per_page must be positive, got " + std::to_string(opt.tokens_per_page));
  if (opt.prefill_chunk < 1) bad("prefill_chunk must be positive, got " + std::to_string(opt.prefill_chunk));
  if (opt.checkpoint_interval < 0)
    bad("checkpoint_interval must be non-negative, got " + std::to_string(opt.checkpoint_interval));
  const float beta = opt.controller.ewma_beta, floor = opt.controller.min_anchor_score;
  if (!std::isfinite(beta) || beta < 0.0f || beta >= 1.0f) bad("ewma_beta must be in [0, 1), got " + std::to_string(beta));
  if (!std::isfinite(floor)) bad("min_anchor_score must be finite");
  for (int l : opt.protected_layers)
    if (l < 0) bad("protected layer " + std::to_string(l) + " is negative");
}

namespace {

// Prefill (from the sequence's current length) and decode on an existing sequence.
GenerateResult run_sequence(const Model& model, cache::KvStore& store, policy::TierController& ctl, cache::SeqId seq,
                            std::span<const int32_t> rest, const GenerateOptions& opt,
                            const std::function<void(int32_t)>& on_token) {
  const std::vector<cache::SeqId> seqs{seq};
  auto checkpoint = [&] {
    if (cache::retiers(opt.mode)) ctl.checkpoint(store, seqs);
  };
  std::vector<int32_t> stops = opt.stop_ids;
  if (stops.empty())
    for (int64_t e : model.config().eos_token_ids) stops.push_back(static_cast<int32_t>(e));
  GenerateResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits, scores;
  const bool scoring = cache::retiers(opt.mode) && opt.controller.scoring;
  auto step = [&](std::span<const int32_t> ids) {
    logits = model.forward(store, seq, ids, false, scoring ? &scores : nullptr);
    if (scoring) ctl.observe(seq, scores);
  };
  const size_t chunk = static_cast<size_t>(std::max(1, opt.prefill_chunk));
  for (size_t p = 0; p < rest.size(); p += chunk) {
    step(rest.subspan(p, std::min(chunk, rest.size() - p)));
    checkpoint();
    if (opt.on_prefill_progress) opt.on_prefill_progress(std::min(rest.size(), p + chunk), rest.size());
  }
  if (opt.keep_prompt_logits) r.prompt_logits = logits;
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t rng_state = opt.seed;
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const int32_t next = sample_token(logits, opt.temperature, opt.top_p, rng_state);
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == opt.max_new_tokens) break;
    const auto s0 = std::chrono::steady_clock::now();
    step(std::span<const int32_t>(&r.tokens.back(), 1));
    if (opt.checkpoint_interval > 0 && (i + 1) % opt.checkpoint_interval == 0) checkpoint();
    r.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
  }
  const auto t2 = std::chrono::steady_clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  r.accounting = store.accounting();
  return r;
}

}  // namespace

GenerateResult generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  validate(opt);
  const size_t total = prompt.size() + static_cast<size_t>(std::max(0, opt.max_new_tokens));
  auto sc = model.store_config(opt.mode, opt.tokens_per_page, total);
  sc.protected_layers = opt.protected_layers;
  const auto owned = model.make_store(sc);
  cache::KvStore& store = *owned;
  policy::TierController ctl(opt.controller);
  const cache::SeqId seq = store.create_sequence();
  GenerateResult r = run_sequence(model, store, ctl, seq, prompt, opt, on_token);
  store.finish(seq);
  return r;
}

std::vector<GenerateResult> generate_batch(const Model& model, std::span<const std::vector<int32_t>> prompts,
                                           const GenerateOptions& opt,
                                           const std::function<void(size_t, int32_t)>& on_token) {
  if (prompts.empty()) throw std::invalid_argument("generate_batch: no prompts");
  validate(opt);
  size_t total = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw std::invalid_argument("generate_batch: empty prompt");
    // each sequence may leave its last page partly filled
    total += p.size() + static_cast<size_t>(std::max(0, opt.max_new_tokens)) + static_cast<size_t>(opt.tokens_per_page);
  }
  auto sc = model.store_config(opt.mode, opt.tokens_per_page, total);
  sc.protected_layers = opt.protected_layers;
  const auto owned = model.make_store(sc);
  cache::KvStore& store = *owned;
  policy::TierController ctl(opt.controller);
  std::vector<cache::SeqId> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(store.create_sequence());
  const bool minima = cache::retiers(opt.mode), scoring = minima && opt.controller.scoring;
  auto checkpoint = [&] {
    if (minima) ctl.checkpoint(store, seqs);
  };
  std::vector<int32_t> stops = opt.stop_ids;
  if (stops.empty())
    for (int64_t e : model.config().eos_token_ids) stops.push_back(static_cast<int32_t>(e));
  const size_t V = model.config().vocab_size;
  std::vector<GenerateResult> res(prompts.size());
  std::vector<std::vector<float>> logits(prompts.size());
  std::vector<float> scores;
  const size_t chunk = static_cast<size_t>(std::max(1, opt.prefill_chunk));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const int32_t> p(prompts[i]);
    for (size_t o = 0; o < p.size(); o += chunk) {
      logits[i] = model.forward(store, seqs[i], p.subspan(o, std::min(chunk, p.size() - o)), false,
                                scoring ? &scores : nullptr);
      if (scoring) ctl.observe(seqs[i], scores);
      checkpoint();
    }
    res[i].prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opt.keep_prompt_logits) res[i].prompt_logits = logits[i];
  }
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<uint64_t> rng(prompts.size(), opt.seed);
  for (size_t i = 0; i < rng.size(); ++i) rng[i] = opt.seed + 0x9e3779b97f4a7c15ull * i;  // one stream per prompt
  std::vector<size_t> live(prompts.size());
  for (size_t i = 0; i < live.size(); ++i) live[i] = i;
  std::vector<int32_t> next(prompts.size());
  for (int step = 0; step < opt.max_new_tokens && !live.empty(); ++step) {
    std::vector<size_t> still;
    for (size_t i : live) {
      const int32_t t = sample_token(logits[i], opt.temperature, opt.top_p, rng[i]);
      if (std::find(stops.begin(), stops.end(), t) != stops.end()) continue;
      res[i].tokens.push_back(t);
      if (on_token) on_token(i, t);
      next[i] = t;
      if (step + 1 < opt.max_new_tokens) still.push_back(i);
    }
    live = std::move(still);
    if (live.empty()) break;
    const auto s0 = std::chrono::steady_clock::now();
    std::vector<Model::SeqChunk> batch;
    for (size_t i : live) batch.push_back({seqs[i], std::span<const int32_t>(&next[i], 1)});
    std::vector<std::vector<float>> batch_scores;
    const auto out = model.forward_batch(store, batch, false, scoring ? &batch_scores : nullptr);
    for (size_t j = 0; j < live.size(); ++j) {
      logits[live[j]].assign(out.begin() + static_cast<std::ptrdiff_t>(j * V),
                             out.begin() + static_cast<std::ptrdiff_t>((j + 1) * V));
      if (scoring) ctl.observe(seqs[live[j]], batch_scores[j]);
    }
    if (opt.checkpoint_interval > 0 && (step + 1) % opt.checkpoint_interval == 0) checkpoint();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    for (size_t i : live) res[i].step_seconds.push_back(dt);
  }
  const double decode = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const auto acct = store.accounting();
  for (auto& r : res) {
    r.decode_seconds = decode;
    r.accounting = acct;
  }
  for (auto s : seqs) store.finish(s);
  return res;
}

Session::Session(const Model& model, GenerateOptions opt, size_t capacity_tokens)
    : model_(model),
      opt_((validate(opt), std::move(opt))),
      store_(model.make_store([&] {
        auto sc = model.store_config(opt_.mode, opt_.tokens_per_page, capacity_tokens);
        sc.protected_layers = opt_.protected_layers;
        return sc;
      }())),
      ctl_(opt_.controller) {}

Session::Result Session::run(std::span<const int32_t> prompt, const std::function<void(int32_t)>& on_token,
                             int max_new_tokens) {
  if (prompt.empty()) throw std::invalid_argument("Session::run: empty prompt");
  Result res;
  auto [seq, covered] = store_->create_sequence_with_prefix(prompt.first(prompt.size() - 1));
  res.reused_tokens = covered;
  try {
    GenerateOptions opt = opt_;
    if (max_new_tokens >= 0) opt.max_new_tokens = max_new_tokens;
    res.gen = run_sequence(model_, *store_, ctl_, seq, prompt.subspan(covered), opt, on_token);
  } catch (...) {
    store_->finish(seq);
    ctl_.forget(seq);
    throw;
  }
  store_->finish(seq);
  ctl_.forget(seq);
  return res;
}

}  // namespace minimakv::engine
