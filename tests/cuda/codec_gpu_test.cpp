// Bytes written by the GPU encoders equal the CPU codec's bytes, on fresh random data with outliers,
// zeros and non-finite values, for every supported head_dim.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/cuda/codec_kernels.h"
#include "test_util.h"

namespace minimakv {
namespace {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    if (cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) throw cuda::CudaError("cudaMalloc");
    cudaMemset(ptr, 0xa5, n * sizeof(T));  // poison
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

std::vector<float> random_vectors(std::mt19937_64& rng, int n, int d) {
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (auto& v : x) v = t(rng);
  for (int i = 0; i < n; i += 17) x[static_cast<size_t>(i) * d + (i % d)] *= 20.0f;  // outliers
  for (int i = 0; i < d; ++i) x[static_cast<size_t>(3) * d + i] = 0.0f;              // a zero vector
  x[static_cast<size_t>(5) * d + 1] = std::numeric_limits<float>::quiet_NaN();
  x[static_cast<size_t>(6) * d + 2] = std::numeric_limits<float>::infinity();
  return x;
}

TEST(GpuCodec, Fp8BytesEqualCpu) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int d : {64, 128, 256}) {
    const int n = 4096;
    auto x = random_vectors(rng, n, d);
    DeviceBuffer<float> dx(x.size()), ds(n);
    DeviceBuffer<uint8_t> dc(x.size());
    cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cuda::fp8_encode_vectors(dx.ptr, n, d, dc.ptr, ds.ptr);
    std::vector<uint8_t> codes(x.size());
    std::vector<float> scales(n);
    ASSERT_EQ(cudaMemcpy(codes.data(), dc.ptr, codes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(scales.data(), ds.ptr, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<uint8_t> ref(d);
    for (int v = 0; v < n; ++v) {
      const float s = codec::fp8_encode_vector({x.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)}, ref);
      ASSERT_EQ(std::memcmp(&s, &scales[v], 4), 0) << "vector " << v;
      ASSERT_EQ(std::memcmp(ref.data(), codes.data() + static_cast<size_t>(v) * d, d), 0) << "vector " << v;
    }
  }
}

TEST(GpuCodec, Tq3BytesEqualCpu) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const int heads = 4;
  for (int d : {64, 128, 256}) {
    for (auto corr : {codec::NormCorrection::kUnbiased, codec::NormCorrection::kMinMse}) {
      const int n = 2048;
      auto x = random_vectors(rng, n, d);
      const size_t pb = codec::tq3_packed_bytes(d);
      DeviceBuffer<float> dx(x.size());
      DeviceBuffer<uint8_t> dp(n * pb);
      DeviceBuffer<uint16_t> da(n);
      cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      cuda::tq3_encode_vectors(dx.ptr, n, d, heads, codec::kDefaultRotationSeed, corr, dp.ptr, da.ptr);
      std::vector<uint8_t> packed(n * pb);
      std::vector<uint16_t> alpha(n);
      ASSERT_EQ(cudaMemcpy(packed.data(), dp.ptr, packed.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(alpha.data(), da.ptr, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<float> scratch(d);
      std::vector<uint8_t> ref(pb);
      for (int v = 0; v < n; ++v) {
        const auto rot = codec::Rotation::for_head(d, 0, static_cast<uint32_t>(v % heads));
        const uint16_t a = codec::tq3_encode({x.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)}, rot,
                                             scratch, ref, corr);
        ASSERT_EQ(a, alpha[v]) << "vector " << v << " d=" << d;
        ASSERT_EQ(std::memcmp(ref.data(), packed.data() + v * pb, pb), 0) << "vector " << v << " d=" << d;
      }
    }
  }
}

}  // namespace
}  // namespace minimakv
