#include "minimakv/backend/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "blas.h"
#include "minimakv/codec/half.h"

namespace minimakv::backend {

void matmul(std::span<const float> x, int n, int in, std::span<const float> w, int out, std::span<float> y) {
  if (x.size() != static_cast<size_t>(n) * in || w.size() != static_cast<size_t>(out) * in ||
      y.size() != static_cast<size_t>(n) * out)
    throw std::invalid_argument("matmul: shape mismatch");
  detail::sgemm_xwt(x.data(), n, in, w.data(), out, y.data());
}

void matmul_bf16(std::span<const float> x, int n, int in, std::span<const uint16_t> w, int out, std::span<float> y) {
  if (x.size() != static_cast<size_t>(n) * in || w.size() != static_cast<size_t>(out) * in ||
      y.size() != static_cast<size_t>(n) * out)
    throw std::invalid_argument("matmul: shape mismatch");
  // Debian's OpenBLAS has no BF16 GEMM: blocks of W's rows are widened (exactly: BF16 is the top half
  // of an fp32) into a cache-sized fp32 buffer and multiplied there, so memory holds and streams two
  // bytes per weight and the products equal the fp32 path's.
  const size_t rows_per_block = std::max<size_t>(16, (size_t{256} << 10) / (4 * static_cast<size_t>(in)));
  thread_local std::vector<float> block;
  block.resize(rows_per_block * static_cast<size_t>(in));
  for (size_t o0 = 0; o0 < static_cast<size_t>(out); o0 += rows_per_block) {
    const size_t rows = std::min(rows_per_block, static_cast<size_t>(out) - o0);
    const uint16_t* src = w.data() + o0 * static_cast<size_t>(in);
    const size_t count = rows * static_cast<size_t>(in);
    for (size_t i = 0; i < count; ++i) block[i] = codec::bf16_to_float(src[i]);
    detail::sgemm_xwt(x.data(), n, in, block.data(), static_cast<int>(rows), y.data() + o0, out);
  }
}

std::string gemm_kernels() {
  return "OpenBLAS " + detail::blas_core_name();
}

void rmsnorm(std::span<float> x, int dim, std::span<const float> weight, float eps) {
  for (size_t r = 0; r + static_cast<size_t>(dim) <= x.size(); r += static_cast<size_t>(dim)) {
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i) ss += x[r + i] * x[r + i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) x[r + i] = x[r + i] * inv * weight[i];
  }
}

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

int32_t argmax(std::span<const float> x) {
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

Rope::Rope(const model::ModelConfig& cfg) : head_dim_(static_cast<int>(cfg.head_dim)) {
  const int half = head_dim_ / 2;
  const auto base = static_cast<float>(cfg.rope_theta);
  for (int i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim_);
    float f = 1.0f / std::pow(base, expo);
    if (cfg.rope_scaling.llama3) {
      const auto& s = cfg.rope_scaling;
      const double old_len = static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
    inv_freq_.push_back(f);
  }
}

void Rope::apply(std::span<float> x, int n, int heads, uint32_t first_position) const {
  const int d = head_dim_, half = d / 2;
  for (int t = 0; t < n; ++t) {
    const float pos = static_cast<float>(first_position + static_cast<uint32_t>(t));
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];  // fp32 product, as transformers computes it
      const auto c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const auto s = static_cast<float>(std::sin(static_cast<double>(angle)));
      for (int h = 0; h < heads; ++h) {
        float* v = x.data() + (static_cast<size_t>(t) * heads + h) * d;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace minimakv::backend
