// CPU operators: the GEMM (through the run-time loaded OpenBLAS) against an fp64 reference on fresh
// random shapes, and the kernel set OpenBLAS was given.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "minimakv/backend/backend.h"
#include "minimakv/backend/cpu_ops.h"
#include "minimakv/codec/half.h"
#include "test_util.h"

namespace minimakv::backend {
namespace {

TEST(CpuOps, MatmulMatchesFp64Reference) {
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  std::uniform_int_distribution<int> dim(1, 300);
  for (int trial = 0; trial < 12; ++trial) {
    const int n = trial < 3 ? 1 : dim(rng), in = dim(rng), out = dim(rng);  // GEMV shapes too
    std::vector<float> x(static_cast<size_t>(n) * in), w(static_cast<size_t>(out) * in),
        y(static_cast<size_t>(n) * out);
    for (auto& v : x) v = g(rng);
    for (auto& v : w) v = g(rng);
    testing::poison(y);
    matmul(x, n, in, w, out, y);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < out; ++c) {
        double ref = 0, mag = 0;
        for (int k = 0; k < in; ++k) {
          ref += static_cast<double>(x[static_cast<size_t>(r) * in + k]) * w[static_cast<size_t>(c) * in + k];
          mag += std::abs(static_cast<double>(x[static_cast<size_t>(r) * in + k]) * w[static_cast<size_t>(c) * in + k]);
        }
        // fp32 accumulation in any order: error bounded by ~in * eps * sum |x_k w_k|.
        ASSERT_NEAR(y[static_cast<size_t>(r) * out + c], ref, 1e-6 * in * mag + 1e-30)
            << "n=" << n << " in=" << in << " out=" << out << " at " << r << "," << c;
      }
  }
}

// BF16 weights widened block by block: against fp64 on the widened weights, with `out` spanning several
// blocks (a block holds 256 KiB of widened rows, at least 16 rows) and remainders.
TEST(CpuOps, Bf16MatmulMatchesFp64ReferenceAcrossBlocks) {
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  std::uniform_int_distribution<int> dim(1, 300);
  for (int trial = 0; trial < 10; ++trial) {
    const int n = trial < 3 ? 1 : dim(rng), in = trial % 2 ? 4096 + dim(rng) : dim(rng), out = 17 + 3 * dim(rng);
    std::vector<float> x(static_cast<size_t>(n) * in), y(static_cast<size_t>(n) * out);
    std::vector<uint16_t> w(static_cast<size_t>(out) * in);
    for (auto& v : x) v = g(rng);
    for (auto& v : w) {
      const float f = g(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = static_cast<uint16_t>(bits >> 16);  // truncation: any BF16 value will do
    }
    testing::poison(y);
    matmul_bf16(x, n, in, w, out, y);
    auto widen = [](uint16_t b) {
      const uint32_t bits = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return static_cast<double>(f);
    };
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < out; ++c) {
        double ref = 0, mag = 0;
        for (int k = 0; k < in; ++k) {
          const double p = x[static_cast<size_t>(r) * in + k] * widen(w[static_cast<size_t>(c) * in + k]);
          ref += p;
          mag += std::abs(p);
        }
        ASSERT_NEAR(y[static_cast<size_t>(r) * out + c], ref, 1e-6 * in * mag + 1e-30)
            << "n=" << n << " in=" << in << " out=" << out << " at " << r << "," << c;
      }
  }
  std::vector<float> x(6), y(4);
  std::vector<uint16_t> w(6);
  EXPECT_THROW(matmul_bf16(x, 2, 3, w, 2, std::span<float>(y).first(3)), std::invalid_argument);
}

// The CPU backend's BF16 matmul for a decode step's few rows (the threaded GEMV) and for more rows (the
// widening SGEMM), through Backend::matmul, against fp64 on the widened weights.
TEST(CpuOps, BackendBf16MatmulMatchesFp64ForFewAndManyRows) {
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  model::ModelConfig cfg;
  cfg.head_dim = 64;
  cfg.num_attention_heads = 1;
  const auto be = make_cpu_backend(cfg);
  for (int n : {1, 2, 5, 8, 9, 33}) {
    const int in = 200 + static_cast<int>(rng() % 900), out = 1 + static_cast<int>(rng() % 700);
    std::vector<float> x(static_cast<size_t>(n) * in), y(static_cast<size_t>(n) * out);
    std::vector<uint16_t> w(static_cast<size_t>(out) * in);
    for (auto& v : x) v = g(rng);
    for (auto& v : w) v = codec::float_to_bf16(g(rng));
    const Tensor tx = be->upload(x), tw = be->upload_bf16(w, DType::kBF16);
    ASSERT_EQ(tw.dtype(), DType::kBF16);
    testing::poison(y);
    Tensor ty = be->upload(y);
    be->matmul(tx, n, in, tw, out, ty);
    be->to_host(ty, y);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < out; ++c) {
        double ref = 0, mag = 0;
        for (int k = 0; k < in; ++k) {
          const double p = static_cast<double>(x[static_cast<size_t>(r) * in + k]) *
                           codec::bf16_to_float(w[static_cast<size_t>(c) * in + k]);
          ref += p;
          mag += std::abs(p);
        }
        ASSERT_NEAR(y[static_cast<size_t>(r) * out + c], ref, 1e-6 * in * mag + 1e-30)
            << "n=" << n << " in=" << in << " out=" << out << " at " << r << "," << c;
      }
  }
}

// A slice is a view: it shares its parent's elements, owns none of them, and may not reach past the end.
// Fused BF16 weights are slices of one allocation, in order, and a projection group equals one matmul per
// projection bit for bit, fused (one row, outputs back to back) or not (more rows; fp32 weights, which
// the CPU does not fuse).
TEST(CpuOps, SlicesViewTheirParentAndGroupsEqualSeparateMatmuls) {
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  model::ModelConfig cfg;
  cfg.head_dim = 64;
  cfg.num_attention_heads = 1;
  const auto be = make_cpu_backend(cfg);
  std::vector<float> host(10);
  for (auto& v : host) v = g(rng);
  const Tensor t = be->upload(host);
  const Tensor s = t.slice(3, 4);
  EXPECT_EQ(s.data(), t.data() + 3);
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(t.slice(10, 0).size(), 0u);
  EXPECT_THROW((void)t.slice(7, 4), std::out_of_range);
  EXPECT_THROW((void)t.slice(11, 0), std::out_of_range);
  const int in = 72, outs[3] = {40, 8, 8};
  for (int n : {1, 3}) {
    std::vector<float> x(static_cast<size_t>(n) * in);
    for (auto& v : x) v = g(rng);
    const Tensor tx = be->upload(x);
    Tensor ws[3], separate[3], group[3];
    std::vector<float> poison(static_cast<size_t>(n) * 56);
    testing::poison(poison);
    Tensor all = be->upload(poison);
    size_t at = 0;
    for (int i = 0; i < 3; ++i) {
      std::vector<uint16_t> w(static_cast<size_t>(outs[i]) * in);
      for (auto& v : w) v = codec::float_to_bf16(g(rng));
      ws[i] = be->upload_bf16(w, DType::kBF16);
      separate[i] = be->upload(std::vector<float>(static_cast<size_t>(n) * outs[i], 0.0f));
      be->matmul(tx, n, in, ws[i], outs[i], separate[i]);
      group[i] = all.slice(at, static_cast<size_t>(n) * outs[i]);
      at += group[i].size();
    }
    Tensor* fuse[] = {&ws[0], &ws[1], &ws[2]};
    const Tensor storage = be->fuse_weights(fuse);
    ASSERT_EQ(storage.size(), static_cast<size_t>(in) * 56);
    EXPECT_EQ(ws[0].raw(), storage.raw());
    EXPECT_EQ(static_cast<uint16_t*>(ws[2].raw()), static_cast<uint16_t*>(storage.raw()) + in * 48);
    const Projection ps[] = {{&ws[0], outs[0], &group[0]}, {&ws[1], outs[1], &group[1]}, {&ws[2], outs[2], &group[2]}};
    be->matmul_group(tx, n, in, ps);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> a(separate[i].size()), b(group[i].size());
      be->to_host(separate[i], a);
      be->to_host(group[i], b);
      EXPECT_EQ(a, b) << "projection " << i << ", n " << n;
    }
  }
  Tensor wide[2] = {be->upload(std::vector<float>(16, 1.0f)), be->upload(std::vector<float>(16, 2.0f))};
  Tensor* fp32[] = {&wide[0], &wide[1]};
  EXPECT_EQ(be->fuse_weights(fp32).size(), 0u);
  EXPECT_EQ(wide[1].data()[0], 2.0f);  // left as it was
}

TEST(CpuOps, MatmulRefusesMismatchedShapes) {
  std::vector<float> x(6), w(6), y(4);
  EXPECT_THROW(matmul(x, 2, 3, w, 2, std::span<float>(y).first(3)), std::invalid_argument);
  EXPECT_THROW(matmul(std::span<const float>(x).first(5), 2, 3, w, 2, y), std::invalid_argument);
}

// Debian 12's OpenBLAS falls back to its SSE3 kernels ("Prescott") on Intel models newer than its
// table; the backend must have steered it to the kernels the CPU's features allow.
TEST(CpuOps, OpenBlasUsesTheKernelsTheCpuSupports) {
  const std::string k = gemm_kernels();
  EXPECT_EQ(k.rfind("OpenBLAS ", 0), 0u) << k;
  __builtin_cpu_init();
  if (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(k, "OpenBLAS Prescott") << "an AVX2 CPU left on the generic SSE3 kernels";
  }
}

}  // namespace
}  // namespace minimakv::backend
