#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/codec/tq4.h"
#include "minimakv/cuda/page_writes.h"
#include "minimakv/cuda/chained_launch.cuh"
#include "tq3_convert.cuh"

namespace minimakv::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;

// codec::canonical_sum over buf[0..d) by one warp: lane j sums i = j (mod 32) in ascending order, then
// p[j] += p[j + off] for off = 16..1. Every lane returns the result.
__device__ float warp_canonical_sum(const float* buf, int d) {
  const int lane = threadIdx.x & 31;
  float p = 0.0f;
  for (int i = lane; i < d; i += 32) p = codec::detail::add_rn(p, buf[i]);
  for (int off = 16; off >= 1; off >>= 1) p = codec::detail::add_rn(p, __shfl_down_sync(kFull, p, off));
  return __shfl_sync(kFull, p, 0);
}

// codec::fwht_inplace by one warp (each stage is element-wise, so the result is the canonical one).
__device__ void warp_fwht(float* x, int d) {
  const int lane = threadIdx.x & 31;
  for (int h = 1; h < d; h <<= 1) {
    __syncwarp();
    for (int p = lane; p < d / 2; p += 32) {
      const int j = (p / h) * 2 * h + (p % h);
      const float a = x[j], b = x[j + h];
      x[j] = codec::detail::add_rn(a, b);
      x[j + h] = codec::detail::add_rn(a, -b);
    }
  }
  __syncwarp();
}

// codec::fp8_encode_vector of x[0..d) (shared memory) into codes; returns the scale.
__device__ float warp_fp8_encode(const float* x, int d, uint8_t* codes) {
  const int lane = threadIdx.x & 31;
  float amax = 0.0f;
  for (int i = lane; i < d; i += 32)
    if (codec::detail::is_finite_bits(x[i])) amax = fmaxf(amax, fabsf(x[i]));
  for (int off = 16; off >= 1; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, off));
  const float s = codec::detail::div_rn(amax, codec::kFp8E4M3Max);
  for (int i = lane; i < d; i += 32) {
    const float v = x[i];
    uint8_t c;
    if (!codec::detail::is_finite_bits(v))
      c = s > 0.0f ? codec::fp8_e4m3_from_float(v) : (codec::detail::is_nan_bits(v) ? codec::kFp8NaN : 0);
    else
      c = s > 0.0f ? codec::fp8_e4m3_from_float(codec::detail::div_rn(v, s)) : 0;
    codes[i] = c;
  }
  return s;
}

// codec::rotated_encode_ref<Book> of y[0..d) (shared memory; tmp and codes are per-warp scratch).
template <class Book>
__device__ uint16_t warp_rotated_encode(float* y, float* tmp, uint8_t* codes, int d, codec::NormCorrection corr,
                                        uint8_t* packed) {
  const int lane = threadIdx.x & 31;
  bool bad_lane = false;
  for (int i = lane; i < d; i += 32) {
    bad_lane |= !codec::detail::is_finite_bits(y[i]);
    tmp[i] = codec::detail::mul_rn(y[i], y[i]);
  }
  const bool bad = __any_sync(kFull, bad_lane);
  __syncwarp();
  float ss = warp_canonical_sum(tmp, d);
  float post = 1.0f;
  if (!bad && !codec::detail::is_finite_bits(ss)) {
    for (int i = lane; i < d; i += 32) {
      y[i] = codec::detail::mul_rn(y[i], 5.42101086242752217e-20f);
      tmp[i] = codec::detail::mul_rn(y[i], y[i]);
    }
    __syncwarp();
    post = 1.8446744073709552e19f;
    ss = warp_canonical_sum(tmp, d);
  }
  const auto pack = [&] {  // 8 codes (3 or 4 whole bytes) a lane
    __syncwarp();
    constexpr int kGroupBytes = static_cast<int>(Book::packed_bytes(8));
    for (int g = lane; g < d / 8; g += 32) Book::pack(codes + 8 * g, 8, packed + kGroupBytes * g);
  };
  if (bad || ss == 0.0f) {
    for (int i = lane; i < d; i += 32) codes[i] = bad ? 0 : Book::kZeroCode;
    pack();
    return bad ? codec::kHalfNaN : 0;
  }
  const float norm = codec::detail::sqrt_rn(ss);
  const float sqrt_d = d == 64 ? 8.0f : (d == 128 ? 11.3137084989847604f : 16.0f);
  const float to_unit = codec::detail::div_rn(sqrt_d, norm);
  for (int i = lane; i < d; i += 32) {
    const int c = Book::code(codec::detail::mul_rn(y[i], to_unit));
    codes[i] = static_cast<uint8_t>(c);
  }
  __syncwarp();
  float alpha;
  if (corr == codec::NormCorrection::kUnbiased || corr == codec::NormCorrection::kMinMse) {
    for (int i = lane; i < d; i += 32) tmp[i] = codec::detail::mul_rn(y[i], Book::level(codes[i]));
    __syncwarp();
    const float yc = warp_canonical_sum(tmp, d);
    __syncwarp();
    if (corr == codec::NormCorrection::kUnbiased) {
      alpha = codec::detail::div_rn(ss, yc);
    } else {
      for (int i = lane; i < d; i += 32) tmp[i] = codec::detail::mul_rn(Book::level(codes[i]), Book::level(codes[i]));
      __syncwarp();
      alpha = codec::detail::div_rn(yc, warp_canonical_sum(tmp, d));
    }
  } else if (corr == codec::NormCorrection::kPreserveNorm) {
    for (int i = lane; i < d; i += 32) tmp[i] = codec::detail::mul_rn(Book::level(codes[i]), Book::level(codes[i]));
    __syncwarp();
    alpha = codec::detail::div_rn(norm, codec::detail::sqrt_rn(warp_canonical_sum(tmp, d)));
  } else {
    alpha = codec::detail::div_rn(norm, sqrt_d);
  }
  alpha = codec::detail::mul_rn(alpha, post);
  pack();
  return codec::float_to_half(alpha < codec::kHalfMax ? alpha : codec::kHalfMax);
}

struct Scratch {
  float x[codec::kMaxHeadDim];
  float tmp[codec::kMaxHeadDim];
  uint8_t codes[codec::kMaxHeadDim];
};

__global__ void append_kernel(PoolViews pools, int format, int H, int d, const float* k, const float* v,
                              const AppendSlot* slots, int n) {
  chain_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int vec = blockIdx.x * kWarpsPerBlock + warp;  // (token, head, K|V)
  if (vec >= n * H * 2) return;
  const int kv = vec & 1, h = (vec >> 1) % H, t = (vec >> 1) / H;
  __shared__ float buf[kWarpsPerBlock][codec::kMaxHeadDim];
  const float* src = (kv ? v : k) + (static_cast<size_t>(t) * H + h) * d;
  const DeviceLayout L = pools.layout[format];
  const AppendSlot slot = slots[t];
  uint8_t* page = pools.base[format] + static_cast<size_t>(slot.page_id) * L.page_bytes;
  uint8_t* row =
      page + (kv ? L.v_codes : 0) + static_cast<size_t>(h) * L.code_stride + static_cast<size_t>(slot.token) * L.row;
  if (format == static_cast<int>(codec::PageFormat::kBf16)) {
    auto* out = reinterpret_cast<uint16_t*>(row);
    for (int i = lane; i < d; i += 32) out[i] = codec::float_to_bf16(src[i]);
    return;
  }
  for (int i = lane; i < d; i += 32) buf[warp][i] = src[i];
  __syncwarp();
  const float s = warp_fp8_encode(buf[warp], d, row);
  if (lane == 0)
    *reinterpret_cast<float*>(page + (kv ? L.v_meta : L.k_meta) + static_cast<size_t>(h) * L.meta_stride +
                              static_cast<size_t>(slot.token) * L.meta) = s;
}

// Zeroes every byte of the destination pages that the conversion does not write: tokens past `tokens`
// and the alignment padding, so converted pages equal the CPU's byte for byte.
__global__ void zero_dst_kernel(PoolViews pools, int dst_format, const ConvertJob* jobs) {
  const DeviceLayout L = pools.layout[dst_format];
  uint8_t* page = pools.base[dst_format] + static_cast<size_t>(jobs[blockIdx.x].dst_page) * L.page_bytes;
  for (size_t i = threadIdx.x; i < L.page_bytes; i += blockDim.x) page[i] = 0;
}

// The per-vector conversions, one warp per (token, head) vector through shared memory after a zeroing
// pass: for TQ3 the former kernels (tq3_convert.cuh replaced both), the baselines the benchmark and the
// tests compare the fused kernels with; for TQ4 the only ones so far. RF: the rotated format.
template <bool kToTq3, codec::PageFormat RF>
__global__ void convert_kernel(PoolViews pools, int H, int d, int B, const float* signs, const ConvertJob* jobs,
                               codec::NormCorrection kcorr, codec::NormCorrection vcorr) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.z * kWarpsPerBlock + warp, h = blockIdx.y;
  const ConvertJob job = jobs[blockIdx.x];
  if (t >= B || t >= static_cast<int>(job.tokens)) return;
  __shared__ Scratch sc[kWarpsPerBlock];
  Scratch& s = sc[warp];
  using Book = std::conditional_t<RF == codec::PageFormat::kTq4, codec::Tq4Book, codec::Tq3Book>;
  constexpr int sf = kToTq3 ? 1 : codec::format_index(RF), df = kToTq3 ? codec::format_index(RF) : 1;
  const DeviceLayout SL = pools.layout[sf], DL = pools.layout[df];
  const uint8_t* src = pools.base[sf] + static_cast<size_t>(job.src_page) * SL.page_bytes;
  uint8_t* dst = pools.base[df] + static_cast<size_t>(job.dst_page) * DL.page_bytes;
  const float* sg = signs + (static_cast<size_t>(job.layer) * H + h) * d;
  const float c = codec::inv_sqrt_dim(d);
  for (int kv = 0; kv < 2; ++kv) {
    const uint8_t* srow =
        src + (kv ? SL.v_codes : 0) + static_cast<size_t>(h) * SL.code_stride + static_cast<size_t>(t) * SL.row;
    const uint8_t* smeta =
        src + (kv ? SL.v_meta : SL.k_meta) + static_cast<size_t>(h) * SL.meta_stride + static_cast<size_t>(t) * SL.meta;
    uint8_t* drow =
        dst + (kv ? DL.v_codes : 0) + static_cast<size_t>(h) * DL.code_stride + static_cast<size_t>(t) * DL.row;
    uint8_t* dmeta =
        dst + (kv ? DL.v_meta : DL.k_meta) + static_cast<size_t>(h) * DL.meta_stride + static_cast<size_t>(t) * DL.meta;
    if constexpr (kToTq3) {
      const float scale = *reinterpret_cast<const float*>(smeta);
      for (int i = lane; i < d; i += 32)
        s.x[i] = codec::detail::mul_rn(codec::detail::mul_rn(codec::fp8_e4m3_to_float(srow[i]), scale), sg[i]);
      warp_fwht(s.x, d);
      for (int i = lane; i < d; i += 32) s.x[i] = codec::detail::mul_rn(s.x[i], c);
      __syncwarp();
      const uint16_t a = warp_rotated_encode<Book>(s.x, s.tmp, s.codes, d, kv ? vcorr : kcorr, drow);
      if (lane == 0) *reinterpret_cast<uint16_t*>(dmeta) = a;
    } else {
      const float a = codec::half_to_float(*reinterpret_cast<const uint16_t*>(smeta));
      constexpr int kGroupBytes = static_cast<int>(Book::packed_bytes(8));
      for (int g = lane; g < d / 8; g += 32) Book::unpack(srow + kGroupBytes * g, 8, s.codes + 8 * g);
      __syncwarp();
      for (int i = lane; i < d; i += 32) s.x[i] = codec::detail::mul_rn(a, Book::level(s.codes[i]));
      warp_fwht(s.x, d);
      for (int i = lane; i < d; i += 32) s.x[i] = codec::detail::mul_rn(codec::detail::mul_rn(s.x[i], c), sg[i]);
      __syncwarp();
      const float scale = warp_fp8_encode(s.x, d, drow);
      if (lane == 0) *reinterpret_cast<float*>(dmeta) = scale;
    }
    __syncwarp();
  }
}

void validate(const PoolViews& pools, const codec::PageGeometry& g, int src, int dst, const char* where) {
  codec::require_supported_head_dim(g.head_dim, where);
  if (g.kv_heads < 1 || g.tokens_per_page < 1 || g.tokens_per_page > codec::kMaxTokensPerPage)
    throw std::invalid_argument(std::string(where) + ": bad page geometry");
  if ((src >= 0 && !pools.base[src]) || (dst >= 0 && !pools.base[dst]))
    throw std::invalid_argument(std::string(where) + ": missing pool");
}

}  // namespace

void append_tokens(const PoolViews& pools, codec::PageFormat format, const codec::PageGeometry& geo, const float* k,
                   const float* v, const AppendSlot* slots, int n_tokens, cudaStream_t stream) {
  if (!codec::format_spec(format).appendable)
    throw std::invalid_argument(std::string("append_tokens: ") + codec::to_string(format) +
                                " pages are sealed; they are made by conversion");
  validate(pools, geo, -1, static_cast<int>(format), "append_tokens");
  if (n_tokens <= 0) return;
  const int vecs = n_tokens * geo.kv_heads * 2;
  launch_chained(append_kernel, (vecs + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock, 0, stream,
                 "append_tokens", pools, static_cast<int>(format), geo.kv_heads, geo.head_dim, k, v, slots, n_tokens);
}

void convert_fp8_to_tq3(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream) {
  validate(pools, geo, 1, 2, "convert_fp8_to_tq3");
  if (n_jobs <= 0) return;
  // One launch for the K vectors and one for the V vectors, each with its norm correction.
  const auto launch = [&]<int D, codec::NormCorrection C>(int kv) {
    using S = detail::Tq3ConvertShape<D>;
    const int chunks = (geo.tokens_per_page + S::kRowsPerBlock - 1) / S::kRowsPerBlock;
    const long long blocks = static_cast<long long>(n_jobs) * geo.kv_heads * chunks;
    if (blocks > 0x7fffffffLL) throw std::invalid_argument("convert_fp8_to_tq3: too many jobs in one launch");
    detail::fp8_to_tq3_kernel<D, C><<<static_cast<unsigned>(blocks), 32 * S::kWarps, 0, stream>>>(
        pools, geo.kv_heads, geo.tokens_per_page, chunks, kv, signs, jobs);
  };
  const auto by_corr = [&]<int D>(int kv, codec::NormCorrection c) {
    switch (c) {
      case codec::NormCorrection::kUnbiased:
        launch.template operator()<D, codec::NormCorrection::kUnbiased>(kv);
        break;
      case codec::NormCorrection::kMinMse:
        launch.template operator()<D, codec::NormCorrection::kMinMse>(kv);
        break;
      case codec::NormCorrection::kPreserveNorm:
        launch.template operator()<D, codec::NormCorrection::kPreserveNorm>(kv);
        break;
      default:
        launch.template operator()<D, codec::NormCorrection::kNone>(kv);
        break;
    }
  };
  for (int kv = 0; kv < 2; ++kv) {
    const codec::NormCorrection c = kv ? policy.values : policy.keys;
    switch (geo.head_dim) {
      case 64:
        by_corr.template operator()<64>(kv, c);
        break;
      case 128:
        by_corr.template operator()<128>(kv, c);
        break;
      default:
        by_corr.template operator()<256>(kv, c);
        break;
    }
  }
  check(cudaGetLastError(), "convert_fp8_to_tq3");
}

namespace {

// One per-vector conversion: zero the destination pages, then one warp per (token, head) vector.
// kToRotated: FP8 -> RF, else RF -> FP8 (keys and values decoded with their stored alpha).
template <bool kToRotated, codec::PageFormat RF>
void launch_per_vector(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                       const ConvertJob* jobs, int n_jobs, codec::NormCorrection kcorr, codec::NormCorrection vcorr,
                       cudaStream_t stream, const char* what) {
  constexpr int fp8 = codec::format_index(codec::PageFormat::kFp8), rot = codec::format_index(RF);
  validate(pools, geo, kToRotated ? fp8 : rot, kToRotated ? rot : fp8, what);
  if (n_jobs <= 0) return;
  zero_dst_kernel<<<n_jobs, 256, 0, stream>>>(pools, kToRotated ? rot : fp8, jobs);
  const dim3 grid(n_jobs, geo.kv_heads, (geo.tokens_per_page + kWarpsPerBlock - 1) / kWarpsPerBlock);
  convert_kernel<kToRotated, RF><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
      pools, geo.kv_heads, geo.head_dim, geo.tokens_per_page, signs, jobs, kcorr, vcorr);
  check(cudaGetLastError(), what);
}

}  // namespace

void convert_fp8_to_tq3_per_vector(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                                   const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream) {
  launch_per_vector<true, codec::PageFormat::kTq3>(pools, geo, signs, jobs, n_jobs, policy.keys, policy.values, stream,
                                                   "convert_fp8_to_tq3_per_vector");
}

void convert_tq3_to_fp8(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, cudaStream_t stream) {
  validate(pools, geo, 2, 1, "convert_tq3_to_fp8");
  if (n_jobs <= 0) return;
  const auto launch = [&]<int D>() {
    using S = detail::Tq3ConvertShape<D>;
    const int chunks = (geo.tokens_per_page + S::kRowsPerBlock - 1) / S::kRowsPerBlock;
    const long long blocks = static_cast<long long>(n_jobs) * geo.kv_heads * 2 * chunks;
    if (blocks > 0x7fffffffLL) throw std::invalid_argument("convert_tq3_to_fp8: too many jobs in one launch");
    detail::tq3_to_fp8_kernel<D><<<static_cast<unsigned>(blocks), 32 * S::kWarps, 0, stream>>>(
        pools, geo.kv_heads, geo.tokens_per_page, chunks, signs, jobs);
  };
  switch (geo.head_dim) {
    case 64:
      launch.template operator()<64>();
      break;
    case 128:
      launch.template operator()<128>();
      break;
    default:
      launch.template operator()<256>();
      break;
  }
  check(cudaGetLastError(), "convert_tq3_to_fp8");
}

void convert_tq3_to_fp8_per_vector(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                                   const ConvertJob* jobs, int n_jobs, cudaStream_t stream) {
  launch_per_vector<false, codec::PageFormat::kTq3>(pools, geo, signs, jobs, n_jobs, codec::NormCorrection::kUnbiased,
                                                    codec::NormCorrection::kUnbiased, stream,
                                                    "convert_tq3_to_fp8_per_vector");
}

void convert_fp8_to_tq4(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream) {
  launch_per_vector<true, codec::PageFormat::kTq4>(pools, geo, signs, jobs, n_jobs, policy.keys, policy.values, stream,
                                                   "convert_fp8_to_tq4");
}

void convert_tq4_to_fp8(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, cudaStream_t stream) {
  launch_per_vector<false, codec::PageFormat::kTq4>(pools, geo, signs, jobs, n_jobs, codec::NormCorrection::kUnbiased,
                                                    codec::NormCorrection::kUnbiased, stream, "convert_tq4_to_fp8");
}

}  // namespace minimakv::cuda
