#include "minimakv/engine/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "minimakv/backend/cpu_ops.h"

namespace minimakv::engine {

namespace {
[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("generate: " + what);
}
}  // namespace

void validate(const KvOptions& opt) {
  if (opt.tokens_per_page < 1) bad("tokens_per_page must be positive, got " + std::to_string(opt.tokens_per_page));
  if (opt.prefill_chunk < 1) bad("prefill_chunk must be positive, got " + std::to_string(opt.prefill_chunk));
  if (opt.checkpoint_interval < 0)
    bad("checkpoint_interval must be non-negative, got " + std::to_string(opt.checkpoint_interval));
  const float beta = opt.controller.ewma_beta, floor = opt.controller.min_anchor_score;
  if (!std::isfinite(beta) || beta < 0.0f || beta >= 1.0f)
    bad("ewma_beta must be in [0, 1), got " + std::to_string(beta));
  if (!std::isfinite(floor)) bad("min_anchor_score must be finite");
  for (int l : opt.protected_layers)
    if (l < 0) bad("protected layer " + std::to_string(l) + " is negative");
  for (int l : opt.tq4_layers.value_or(std::vector<int>{})) {
    if (l < 0) bad("TQ4 layer " + std::to_string(l) + " is negative");
    if (std::find(opt.protected_layers.begin(), opt.protected_layers.end(), l) != opt.protected_layers.end())
      bad("layer " + std::to_string(l) + " is both protected and a TQ4 layer");
  }
}

std::vector<int> tq4_layers_for(const model::ModelConfig& cfg, const KvOptions& kv) {
  if (kv.tq4_layers) return *kv.tq4_layers;
  std::vector<int> out;
  for (int l : cfg.profile_tq4_layers)
    if (std::find(kv.protected_layers.begin(), kv.protected_layers.end(), l) == kv.protected_layers.end())
      out.push_back(l);
  return out;
}

std::vector<int> parse_tq4_layers(const std::vector<std::string>& pieces) {
  if (pieces.size() == 1 && pieces[0] == "none") return {};
  std::vector<int> out;
  for (const std::string& p : pieces) {
    int l = -1;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), l);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || l < 0)
      throw std::invalid_argument("--tq4-layers: TQ4 layers are layer numbers or 'none', got '" + p + "'");
    out.push_back(l);
  }
  return out;
}

void validate(const SamplingParams& opt) {
  if (!std::isfinite(opt.temperature) || opt.temperature < 0.0f || opt.temperature > 100.0f)
    bad("temperature must be a finite number in [0, 100], got " + std::to_string(opt.temperature));
  if (!std::isfinite(opt.top_p) || opt.top_p <= 0.0f || opt.top_p > 1.0f)
    bad("top_p must be a finite number in (0, 1], got " + std::to_string(opt.top_p));
  if (opt.max_new_tokens < 0) bad("max_new_tokens must be non-negative, got " + std::to_string(opt.max_new_tokens));
  if (opt.top_k < 0) bad("top_k must be non-negative (0: off), got " + std::to_string(opt.top_k));
  for (const float p : {opt.presence_penalty, opt.frequency_penalty})
    if (!std::isfinite(p) || p < -2.0f || p > 2.0f)
      bad("presence and frequency penalties must be finite numbers in [-2, 2]");
  if (opt.logprobs < -1 || opt.logprobs > 20) bad("logprobs must be in [0, 20], got " + std::to_string(opt.logprobs));
}

int32_t sample_token(std::span<const float> logits, float temperature, float top_p, uint64_t& rng_state, int top_k) {
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
  if (top_k > 0 && static_cast<size_t>(top_k) < p.size()) {  // the nucleus is taken among the top k
    p.resize(static_cast<size_t>(top_k));
    z = 0.0;
    for (const auto& x : p) z += x.first;
  }
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

void apply_penalties(std::span<float> logits, std::span<const int32_t> generated, float presence, float frequency) {
  if (presence == 0.0f && frequency == 0.0f) return;
  std::vector<int32_t> ids(generated.begin(), generated.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    const auto t = static_cast<size_t>(ids[i]);
    if (t < logits.size()) logits[t] -= presence + frequency * static_cast<float>(j - i);
    i = j;
  }
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x - m));
  const double lse = static_cast<double>(m) + std::log(z);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
  if (top_n > 0) {
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    const auto n = std::min(idx.size(), static_cast<size_t>(top_n));
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(), [&](int32_t a, int32_t b) {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (size_t i = 0; i < n; ++i)
      out.top.emplace_back(idx[i], static_cast<float>(static_cast<double>(logits[static_cast<size_t>(idx[i])]) - lse));
  }
  return out;
}

int gpu_prefill_chunk(size_t free_bytes, size_t bytes_per_token) {
  int chunk = 4096;
  const size_t per = std::max<size_t>(bytes_per_token, 1);
  while (chunk > 2048 && static_cast<size_t>(chunk) * per > free_bytes / 4) chunk /= 2;
  if (static_cast<size_t>(chunk) * per > free_bytes / 4) chunk = 512;
  return chunk;
}

}  // namespace minimakv::engine
