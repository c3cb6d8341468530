// GPU kernels that write pages: append (quantize on write) and batched format conversion.
//
// Owns: the device side of every byte that enters a page. Each kernel reproduces the CPU codec
// (codec/page_codec.h) bit for bit: reductions in the canonical order of codec::canonical_sum, the
// FWHT in canonical stage order, fp32 round-to-nearest everywhere (the library is compiled with
// -fmad=false). The conversions run as one fused pass per group of lanes (src/cuda/tq3_convert.cuh);
// append uses one warp per (token, head, K|V) vector. A converted page equals the CPU conversion byte
// for byte, including the zeroed tokens past `tokens` and the alignment padding.
// All launches are asynchronous on the given stream and allocate nothing; job arrays live on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "minimakv/codec/page_codec.h"
#include "minimakv/cuda/device_pool.h"

namespace minimakv::cuda {

// Destination slot of one appended token.
struct AppendSlot {
  uint32_t page_id, token;
};

// k, v: [n_tokens][kv_heads][head_dim] fp32 (device). Writes each token's K/V into `format`'s pool
// (kFp8: per-vector scale; kBf16: round to nearest even). TQ3 pages are sealed and made by conversion.
void append_tokens(const PoolViews& pools, codec::PageFormat format, const codec::PageGeometry& geo, const float* k,
                   const float* v, const AppendSlot* slots, int n_tokens, cudaStream_t stream);

// One page conversion: the first `tokens` tokens of src_page (FP8 pool) into dst_page (TQ3 pool), or the
// reverse for promotion, with the rotation of `layer`.
struct ConvertJob {
  uint32_t src_page, dst_page, tokens, layer;
};

// signs: [layers][kv_heads][head_dim] from upload_rotation_signs. Many pages in one launch.
void convert_fp8_to_tq3(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream);
void convert_tq3_to_fp8(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, cudaStream_t stream);

// The same bytes by the former kernels (one warp per vector through shared memory, after a zeroing
// pass): the baselines the benchmark times the fused kernels against, and second GPU implementations
// the tests compare with on pages too large for the CPU codec to check quickly.
void convert_fp8_to_tq3_per_vector(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                                   const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream);
void convert_tq3_to_fp8_per_vector(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                                   const ConvertJob* jobs, int n_jobs, cudaStream_t stream);

// FP8 -> TQ4 and TQ4 -> FP8 (the TQ4 pool), the same bytes as codec::convert_fp8_to_tq4 / convert_tq4_to_fp8,
// by the per-vector kernels (no fused TQ4 conversion yet).
void convert_fp8_to_tq4(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, codec::Tq3Policy policy, cudaStream_t stream);
void convert_tq4_to_fp8(const PoolViews& pools, const codec::PageGeometry& geo, const float* signs,
                        const ConvertJob* jobs, int n_jobs, cudaStream_t stream);

}  // namespace minimakv::cuda
