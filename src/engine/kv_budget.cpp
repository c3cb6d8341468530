#include "minimakv/engine/kv_budget.h"

#include <algorithm>
#include <stdexcept>

#include "minimakv/codec/page_layout.h"

namespace minimakv::engine {

namespace {
size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
constexpr size_t idx(codec::PageFormat f) { return static_cast<size_t>(f); }
}  // namespace

KvBudget::KvBudget(const model::ModelConfig& cfg, const KvOptions& kv) : cfg_(cfg), kv_(kv) {
  validate(kv);
  layers_ = static_cast<size_t>(cfg.num_hidden_layers);
  page_ = static_cast<size_t>(kv.tokens_per_page);
  if (cache::retiers(kv.mode)) {
    try {
      for (const codec::PageFormat f : base().stale_formats()) {
        if (f == cache::append_format(kv.mode))
          ++protected_;
        else
          ++stale_layers_[idx(f)];
      }
    } catch (const cache::InvalidArgument& e) {
      throw std::invalid_argument(e.what());
    }
  }
  const codec::PageGeometry geo{kv.tokens_per_page, static_cast<int>(cfg.num_key_value_heads),
                                static_cast<int>(cfg.head_dim)};
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    page_bytes_[static_cast<size_t>(f)] = codec::PageLayout(static_cast<codec::PageFormat>(f), geo).bytes();
}

PageCounts KvBudget::settled(size_t tokens) const {
  PageCounts c{};
  const size_t n = ceil_div(tokens, page_);
  if (!cache::retiers(kv_.mode)) {
    c[idx(cache::append_format(kv_.mode))] = n * layers_;
    return c;
  }
  const auto& ctl = kv_.controller;
  const size_t keep =
      std::min<size_t>(n, size_t{ctl.recent_window} + ctl.sink_pages + (ctl.scoring ? ctl.anchor_budget : 0));
  c[idx(cache::append_format(kv_.mode))] = keep * (layers_ - protected_) + n * protected_;
  for (size_t f = 0; f < c.size(); ++f) c[f] += (n - keep) * stale_layers_[f];
  return c;
}

PageCounts KvBudget::peak(size_t tokens) const {
  if (!cache::retiers(kv_.mode)) return settled(tokens);
  PageCounts c{};
  const size_t n = ceil_div(tokens, page_);
  const auto& ctl = kv_.controller;
  const size_t between = static_cast<size_t>(std::max(kv_.prefill_chunk, kv_.checkpoint_interval));
  // checkpoint_interval 0: no checkpoint while decoding, so every decoded page stays FP8
  const size_t keep = kv_.checkpoint_interval == 0
                          ? n
                          : std::min<size_t>(n, size_t{ctl.recent_window} + ctl.sink_pages + ctl.anchor_budget +
                                                    ceil_div(between, page_) + 1);
  c[idx(cache::append_format(kv_.mode))] = keep * (layers_ - protected_) + n * protected_;
  for (size_t f = 0; f < c.size(); ++f) c[f] += (n > 0 ? n - 1 : 0) * stale_layers_[f];
  return c;
}

size_t KvBudget::step_headroom(size_t step_tokens) const {
  if (!cache::retiers(kv_.mode)) return 0;
  return (ceil_div(step_tokens, page_) + 1) * (layers_ - protected_);
}

size_t KvBudget::bytes(const PageCounts& c) const {
  size_t b = 0;
  for (size_t f = 0; f < c.size(); ++f) b += c[f] * page_bytes_[f];
  return b;
}

cache::StoreConfig KvBudget::base() const {
  cache::StoreConfig s;
  s.layers = static_cast<int>(layers_);
  s.kv_heads = static_cast<int>(cfg_.num_key_value_heads);
  s.head_dim = static_cast<int>(cfg_.head_dim);
  s.tokens_per_page = kv_.tokens_per_page;
  s.mode = kv_.mode;
  s.protected_layers = kv_.protected_layers;
  s.tq4_layers = tq4_layers_for(cfg_, kv_);
  return s;
}

cache::StoreConfig KvBudget::pools_for_requests(std::span<const size_t> tokens) const {
  cache::StoreConfig s = base();
  for (const size_t t : tokens) {
    const PageCounts p = peak(t);
    // Appendable formats get one more page per layer: the page a decode step opens past the peak.
    for (const codec::PageFormatSpec& f : codec::all_page_formats()) {
      const size_t n = p[idx(f.format)];
      s.pages_of(f.format) += n && f.appendable ? n + layers_ : n;
    }
  }
  return s;
}

cache::StoreConfig KvBudget::pools_for_memory(size_t envelope, size_t reference_tokens, size_t step_tokens) const {
  cache::StoreConfig s = base();
  if (reference_tokens == 0) throw std::invalid_argument("kv memory: the reference request length must be positive");
  const PageCounts one = peak(reference_tokens);
  auto too_small = [&] {
    throw std::invalid_argument("kv memory: " + std::to_string(envelope) + " bytes cannot hold one request of " +
                                std::to_string(reference_tokens) + " tokens (" + describe(one) + ")");
  };
  if (!cache::retiers(kv_.mode)) {
    const auto f = cache::append_format(kv_.mode);
    const size_t pages = envelope / page_bytes(f);
    if (pages < one[idx(f)]) too_small();
    s.pages_of(f) = pages;
    return s;
  }
  // The append format (FP8) and the Stale formats (TQ3, and TQ4 where layers take it) share the envelope.
  const codec::PageFormat hi = cache::append_format(kv_.mode);
  const size_t b8 = page_bytes(hi), converted_layers = std::max<size_t>(1, layers_ - protected_);
  const size_t head = step_headroom(step_tokens);
  if (envelope < head * b8) too_small();
  PageCounts req = settled(reference_tokens);
  const auto stale = [&](size_t f) { return f != idx(hi) && stale_layers_[f] > 0; };
  // decode drift: the tokens written between two checkpoints stay FP8 until the next one
  size_t stale_logical = 0;  // Stale logical pages of the settled request
  for (size_t f = 0; f < req.size(); ++f)
    if (stale(f)) stale_logical += req[f];
  stale_logical /= converted_layers;
  const size_t drift = std::min(stale_logical, ceil_div(static_cast<size_t>(kv_.checkpoint_interval), page_));
  double stale_bytes = 0.0;
  for (size_t f = 0; f < req.size(); ++f) {
    if (!stale(f)) continue;
    req[idx(hi)] += drift * stale_layers_[f];
    req[f] -= drift * stale_layers_[f];
    stale_bytes += static_cast<double>(req[f] * page_bytes_[f]);
  }
  const double f8 = static_cast<double>(req[idx(hi)] * b8);
  const double rest = static_cast<double>(envelope - head * b8);
  size_t& fp8_pages = s.pages_of(hi);
  fp8_pages = std::max(one[idx(hi)], head + static_cast<size_t>(rest * f8 / std::max(1.0, f8 + stale_bytes)) / b8);
  if (fp8_pages * b8 > envelope) too_small();
  // The rest goes to the Stale formats in the proportion of their settled bytes (of their layers'
  // share when the reference request settles all-FP8).
  double weight_sum = 0.0;
  PageCounts weight{};
  for (size_t f = 0; f < req.size(); ++f) {
    if (!stale(f)) continue;
    weight[f] = stale_bytes > 0 ? req[f] * page_bytes_[f] : stale_layers_[f] * page_bytes_[f];
    weight_sum += static_cast<double>(weight[f]);
  }
  const double left = static_cast<double>(envelope - fp8_pages * b8);
  bool short_of_peak = false;
  size_t peak_bytes = 0;
  for (size_t f = 0; f < req.size(); ++f) {
    if (!stale(f)) continue;
    s.pages[f] = static_cast<size_t>(left * static_cast<double>(weight[f]) / weight_sum) / page_bytes_[f];
    short_of_peak |= s.pages[f] < one[f];
    peak_bytes += std::max(s.pages[f], one[f]) * page_bytes_[f];
  }
  if (short_of_peak && peak_bytes <= envelope) {  // short requests settle all-FP8; still hold one's peak
    for (size_t f = 0; f < req.size(); ++f)
      if (stale(f)) s.pages[f] = std::max(s.pages[f], one[f]);
    fp8_pages = (envelope - peak_bytes) / b8;
  }
  if (fp8_pages < one[idx(hi)]) too_small();
  for (size_t f = 0; f < req.size(); ++f)
    if (stale(f) && s.pages[f] < one[f]) too_small();
  return s;
}

std::string KvBudget::describe(const PageCounts& c) const {
  std::string out;
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const size_t n = c[static_cast<size_t>(f)];
    if (!n) continue;
    if (!out.empty()) out += ", ";
    out += std::string(codec::to_string(static_cast<codec::PageFormat>(f))) + " " + std::to_string(n) +
           " layer-pages (" + std::to_string(n * page_bytes_[static_cast<size_t>(f)]) + " bytes)";
  }
  return out.empty() ? "no pages" : out;
}

}  // namespace minimakv::engine
