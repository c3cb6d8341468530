// Test fixtures for the GPU attention tests: sequences of random pages in a chosen format mix, written
// with the CPU codec (TQ3 pages by CPU conversion of an FP8 page, as the cache makes them), uploaded
// to a DevicePagePool at shuffled page ids, and described both for the CPU kernels and the GPU plan.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "minimakv/attention/paged_attention.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/page_codec.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/paged_decode.h"

namespace minimakv::testing {

struct GpuPageSet {
  codec::PageGeometry geo;
  std::unique_ptr<cuda::DevicePagePool> pool;
  std::vector<codec::Rotation> rotations;               // one per KV head (layer 0)
  std::vector<std::vector<uint8_t>> host_pages;         // storage behind the CPU views
  std::vector<std::vector<cuda::PageRef>> seqs;         // GPU description
  std::vector<std::vector<attention::PageView>> views;  // CPU description
  std::vector<uint32_t> free_ids;

  attention::LayerInput layer_input(int seq, int q_heads) const {
    attention::LayerInput in;
    in.pages = views[seq];
    for (int f = 0; f < codec::kNumPageFormats; ++f) in.layouts[f] = &pool->layout(static_cast<codec::PageFormat>(f));
    in.rotations = rotations;
    in.q_heads = q_heads;
    in.kv_heads = geo.kv_heads;
    in.head_dim = geo.head_dim;
    return in;
  }
};

using FormatChooser = std::function<codec::PageFormat(int seq, int page, int pages)>;

inline GpuPageSet make_gpu_pages(std::mt19937_64& rng, codec::PageGeometry geo, const std::vector<int>& lens,
                                 const FormatChooser& choose) {
  GpuPageSet s;
  s.geo = geo;
  size_t pages = 0;
  for (int n : lens) pages += static_cast<size_t>((n + geo.tokens_per_page - 1) / geo.tokens_per_page);
  s.pool = std::make_unique<cuda::DevicePagePool>(geo, pages + 8);
  for (uint32_t i = 1; i < pages + 8; ++i) s.free_ids.push_back(i);
  std::shuffle(s.free_ids.begin(), s.free_ids.end(), rng);
  for (int h = 0; h < geo.kv_heads; ++h)
    s.rotations.push_back(codec::Rotation::for_head(geo.head_dim, 0, static_cast<uint32_t>(h)));
  const int d = geo.head_dim, H = geo.kv_heads, B = geo.tokens_per_page;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> mean(static_cast<size_t>(H) * d);
  for (auto& m : mean) m = 0.5f * nd(rng);  // keys of real models share a per-channel offset
  const auto& fp8L = s.pool->layout(codec::PageFormat::kFp8);
  for (size_t si = 0; si < lens.size(); ++si) {
    std::vector<cuda::PageRef> refs;
    std::vector<attention::PageView> views;
    const int np = (lens[si] + B - 1) / B;
    for (int p = 0; p < np; ++p) {
      const int tokens = std::min(B, lens[si] - p * B);
      const codec::PageFormat f = choose(static_cast<int>(si), p, np);
      const auto& L = s.pool->layout(f == codec::PageFormat::kBf16 ? f : codec::PageFormat::kFp8);
      std::vector<uint8_t> page(L.bytes(), 0);
      std::vector<float> k(static_cast<size_t>(H) * d), v(k.size());
      for (int t = 0; t < tokens; ++t) {
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = mean[i] + nd(rng);
          v[i] = nd(rng);
        }
        codec::write_token(page, L, t, k, v);
      }
      if (codec::format_spec(f).rotated) {  // TQ3 or TQ4, made from the FP8 page as the store does
        const auto& TL = s.pool->layout(f);
        std::vector<uint8_t> tq(TL.bytes());
        codec::convert_fp8_to_rotated(page, fp8L, tq, TL, s.rotations, tokens);
        page = std::move(tq);
      }
      const uint32_t id = s.free_ids.back();
      s.free_ids.pop_back();
      s.pool->upload(f, id, page);
      s.host_pages.push_back(std::move(page));
      refs.push_back({f, id, static_cast<uint32_t>(tokens)});
      views.push_back({f, s.host_pages.back().data(), static_cast<uint32_t>(tokens), static_cast<uint32_t>(p * B)});
    }
    s.seqs.push_back(std::move(refs));
    s.views.push_back(std::move(views));
  }
  // host_pages may have reallocated while growing: re-point the views.
  size_t idx = 0;
  for (auto& vs : s.views)
    for (auto& v : vs) v.data = s.host_pages[idx++].data();
  return s;
}

// A random mix of formats: 20% BF16, 30% FP8, 30% TQ3, 20% TQ4 pages.
inline FormatChooser random_format_mix(std::mt19937_64& rng) {
  return [&rng](int, int, int) {
    const int x = static_cast<int>(rng() % 10);
    return x < 2   ? codec::PageFormat::kBf16
           : x < 5 ? codec::PageFormat::kFp8
           : x < 8 ? codec::PageFormat::kTq3
                   : codec::PageFormat::kTq4;
  };
}

// Largest relative error of page scores rp against the fp64 collector's page mass (page_mass:
// [query][page][q_head]) averaged over the queries and heads; masses below 1e-3 count as 1e-3.
inline double page_score_error(const std::vector<float>& rp, const std::vector<double>& page_mass, int queries,
                               int q_heads) {
  const size_t np = rp.size();
  double worst = 0;
  for (size_t p = 0; p < np; ++p) {
    double mass = 0;
    for (int t = 0; t < queries; ++t)
      for (int h = 0; h < q_heads; ++h) mass += page_mass[(static_cast<size_t>(t) * np + p) * q_heads + h];
    mass /= static_cast<double>(queries) * q_heads;
    worst = std::max(worst, std::abs(rp[p] - mass) / std::max(mass, 1e-3));
  }
  return worst;
}

inline double rel_l2(const float* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A device buffer for an attention output's BF16 copy, poisoned (0xffff, a NaN) before the kernels run.
inline cuda::DeviceArray<uint16_t> poisoned_bf16_copy(size_t n) {
  cuda::DeviceArray<uint16_t> a(n);
  cuda::check(cudaMemset(a.get(), 0xff, a.bytes()), "poison");
  return a;
}

// Elements whose device BF16 copy is not `out` rounded to nearest even.
inline size_t bf16_copy_mismatches(const cuda::DeviceArray<uint16_t>& copy, const std::vector<float>& out) {
  std::vector<uint16_t> host(copy.size());
  cuda::check(cudaMemcpy(host.data(), copy.get(), copy.bytes(), cudaMemcpyDeviceToHost), "out bf16");
  size_t mismatches = 0;
  for (size_t i = 0; i < out.size(); ++i) mismatches += host.at(i) != codec::float_to_bf16(out[i]);
  return mismatches;
}

}  // namespace minimakv::testing
