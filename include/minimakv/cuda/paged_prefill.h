// Tiled (flash-style) causal prefill attention over paged K/V in mixed formats, on tensor cores.
//
// Owns: the device buffers and the launches that attend a prefill chunk of several sequences for one
// layer (the plan, query tiles x key splits of each sequence, is host code: prefill_plan.h). A CTA
// takes one query tile (128 rows at head_dim <= 128, 64 at 256: tokens x the query heads of one GQA
// group) and one key split (pages of ONE stored format, BF16, FP8 or TQ3) of one KV head. Its producer
// warps copy each key tile's K/V codes with cp.async two tiles ahead and decode them to fp16 in shared
// memory; its consumer warps run QK^T and PV as fp16 mma.sync with fp32 accumulation and a base-2 online
// softmax, masking only tiles that reach past the tile's first query (src/cuda/prefill_tile.cuh). TQ3
// keys are never un-rotated: the query is rotated once (q' = R q), values are accumulated in the
// rotated domain, and the merge applies one inverse rotation to the TQ3 share. Every partial (m, l, O)
// of a row is merged under one softmax, so no dense copy of the cache exists at any point.
// Precision: K codes enter the tensor cores exactly (FP8 codes, BF16 values in fp16's normal range;
// TQ3 levels round to 11 bits) and V values with their scale as fp16. The query is one fp16 term, or
// two (hi + lo) when per-page partials are asked for, so page scores see logits close to fp32; the
// softmax weights are fp16. The output matches an fp64 reference over the same dequantized pages to
// about 1e-3 relative L2, far below the FP8 codec's own error. Under kTma, BF16 pages meet the query and
// the softmax weights as bf16 instead (what FlashAttention and PyTorch's SDPA compute for a BF16 model):
// 0.8-1.7e-3 measured on an H200, 3.5e-3 at worst over small random cases (the query's rounding
// dominates; two query terms, with page scores, shrink it). The decode kernels
// (paged_decode.h) stay close to fp32 throughout.
// Softmax partials are in the NATURAL logarithm at every output. Supported: head_dim 64/128/256, GQA
// ratios 1..8, any page size the store allows, partial last pages, any format mix and page order.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/paged_decode.h"
#include "minimakv/cuda/prefill_plan.h"

namespace minimakv::cuda {

// The tensor-core instructions the CTA's consumers use: wgmma (Hopper, sm_90a) or mma.sync (any GPU the
// build targets). kTma is wgmma with BF16 and FP8 pages read by the bulk tensor copy engine (128-key
// tiles; BF16 straight into bf16 operands, FP8 codes widened in place to fp16; src/cuda/prefill_tma_tile.cuh),
// TQ3 and TQ4 as kWgmma.
// kAuto picks kTma where it is available.
enum class PrefillKernel { kAuto, kMma, kWgmma, kTma };
const char* to_string(PrefillKernel k);
// "auto", "mma", "wgmma" or "tma" (to_string's names); anything else throws std::invalid_argument.
PrefillKernel prefill_kernel_from_string(std::string_view name);
// Whether this build has the wgmma kernels (kWgmma, kTma) and the current device loads them (compute
// capability 9.0).
bool prefill_wgmma_available();

// Device buffers of prefill calls, grown on demand (never inside a captured graph). One call at a time
// per workspace: run() waits until the previous call's plan copy has left the pinned staging buffer.
class PrefillWorkspace {
 public:
  // Throws std::invalid_argument for an unsupported shape, or kWgmma where it is not available.
  explicit PrefillWorkspace(const DecodeShape& shape, PrefillKernel kernel = PrefillKernel::kAuto);
  ~PrefillWorkspace();
  PrefillWorkspace(const PrefillWorkspace&) = delete;
  PrefillWorkspace& operator=(const PrefillWorkspace&) = delete;

  // Queues the rotation, split and merge kernels on `stream` and returns what they read (route, bytes
  // per format). Throws std::invalid_argument when the plan does not fit the shape or reads a format
  // the pools lack (nothing is launched then).
  DecodeStats run(const PrefillPlan& plan, const PoolViews& pools, const AttentionBuffers& io, cudaStream_t stream);
  PrefillKernel kernel() const { return kernel_; }  // never kAuto
  // The tiling plans for this workspace are made with (make_prefill_plan).
  PrefillTiling tiling() const { return prefill_tiling(shape_.head_dim, kernel_ == PrefillKernel::kTma); }

 private:
  DecodeShape shape_;
  PrefillKernel kernel_ = PrefillKernel::kMma;
  size_t blob_cap_ = 0, rows_cap_ = 0, works_cap_ = 0;
  PinnedArray<uint8_t> staging_;
  DeviceArray<uint8_t> plan_;
  DeviceArray<float> q_rot_, part_o_, part_m_, part_l_;
  DeviceArray<double> row_total_;  // [rows][q_heads]: page-addressable mass of each row (page scores)
  cudaEvent_t staged_copied_ = nullptr;
};

}  // namespace minimakv::cuda
