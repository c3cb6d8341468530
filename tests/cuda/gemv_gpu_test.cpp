// The batch-1 GEMV kernels (src/backend/cuda_gemv.h) called directly, every variant the engine or a
// comparison can pick (a warp a row; 2, 4 and 8 rows a block), on fresh random BF16 data with outputs
// poisoned: each within fp32 rounding of an fp64 reference over the same BF16 inputs, the block variants
// equal to each other bit for bit (a row's sum does not depend on which rows share its block), and the
// SwiGLU epilogue of each equal to its own plain product followed by the elementwise SwiGLU kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "minimakv/codec/half.h"
#include "minimakv/cuda/device_memory.h"
#include "src/backend/cuda_gemv.h"
#include "src/backend/cuda_ops.h"
#include "test_util.h"

namespace minimakv::backend::cuda_gemv {
namespace {

// Device buffers (cuda::DeviceArray) filled from the host, or poisoned with 0xff bytes (NaN as float
// and as BF16) so that an element a kernel fails to write is caught.
template <class T>
cuda::DeviceArray<T> poisoned(size_t n) {
  cuda::DeviceArray<T> d(n);
  EXPECT_EQ(cudaMemset(d.get(), 0xff, d.bytes()), cudaSuccess);
  return d;
}
template <class T>
cuda::DeviceArray<T> upload(const std::vector<T>& host) {
  cuda::DeviceArray<T> d(host.size());
  EXPECT_EQ(cudaMemcpy(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
template <class T>
std::vector<T> download(const cuda::DeviceArray<T>& d) {
  std::vector<T> h(d.size());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = codec::float_to_bf16(g(rng));
  return v;
}

constexpr int kVariants[] = {kWarpPerRow, 2, 4, 8};

std::string name(int rows) {
  return rows == kWarpPerRow ? "a warp a row" : std::to_string(rows) + " rows a block";
}

TEST(Gemv, EveryVariantMatchesFp64) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  // in / 8 below, at and above a warp's 32 chunks and a batch of them; rows that leave partial blocks.
  const int shapes[][2] = {{1, 8}, {13, 40}, {333, 520}, {1000, 4104}};
  for (const auto& [out, in] : shapes) {
    const auto x = random_bf16(rng, static_cast<size_t>(in), 1.0f),
               w = random_bf16(rng, static_cast<size_t>(out) * in, 0.05f);
    const auto dx = upload(x), dw = upload(w);
    std::vector<float> block_result;
    for (int rows : kVariants) {
      const auto y = poisoned<float>(static_cast<size_t>(out));
      gemv_bf16(dx.get(), in, dw.get(), out, y.get(), nullptr, rows);
      const auto got = download(y);
      const std::string what = std::to_string(out) + " x " + std::to_string(in) + ", " + name(rows);
      for (int i = 0; i < out; ++i) {
        double ref = 0, mag = 0;
        for (int k = 0; k < in; ++k) {
          const double p = static_cast<double>(codec::bf16_to_float(w[static_cast<size_t>(i) * in + k])) *
                           codec::bf16_to_float(x[static_cast<size_t>(k)]);
          ref += p;
          mag += std::abs(p);
        }
        ASSERT_NEAR(got[static_cast<size_t>(i)], ref, 1e-6 * in * mag + 1e-30) << what << " row " << i;
      }
      if (rows == kWarpPerRow) continue;
      if (block_result.empty()) block_result = got;
      EXPECT_EQ(got, block_result) << what << " against 2 rows a block";
    }
  }
}

TEST(Gemv, SwigluEpilogueEqualsThePlainProductThenSwiglu) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (const auto& [inter, in] : {std::pair{1, 64}, std::pair{333, 520}, std::pair{1536, 2056}}) {
    const auto x = random_bf16(rng, static_cast<size_t>(in), 1.0f),
               w = random_bf16(rng, 2 * static_cast<size_t>(inter) * in, 0.05f);
    const auto dx = upload(x), dw = upload(w);
    for (int rows : kVariants) {
      const std::string what = "inter " + std::to_string(inter) + " in " + std::to_string(in) + ", " + name(rows);
      const size_t n = static_cast<size_t>(inter);
      const auto y = poisoned<float>(n), gu = poisoned<float>(2 * n), a = poisoned<float>(n);
      const auto yb = poisoned<uint16_t>(n), ab = poisoned<uint16_t>(n);
      gemv_swiglu_bf16(dx.get(), in, dw.get(), inter, y.get(), yb.get(), nullptr, rows);
      gemv_bf16(dx.get(), in, dw.get(), 2 * inter, gu.get(), nullptr, rows);
      cuda_ops::swiglu(gu.get(), gu.get() + inter, a.get(), ab.get(), n, nullptr);
      ASSERT_EQ(download(y), download(a)) << what;
      ASSERT_EQ(download(yb), download(ab)) << what;
    }
  }
}

}  // namespace
}  // namespace minimakv::backend::cuda_gemv
