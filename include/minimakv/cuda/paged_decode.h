// Mixed-format paged decode attention on the GPU: split-K over pages, one softmax over every format.
//
// Owns: the decode plan's fixed-capacity device buffers (the plan itself, host code: decode_plan.h),
// and the three launches of one decode step for one layer: (1) rotate each query once per TQ3 rotation
// (steps that read TQ3), (2) per format, one CTA per (split, KV head) reads its pages in that stored
// format (BF16, FP8 or TQ3; all query heads of the GQA group reuse each loaded K/V tile) and writes a
// normalised partial (m, l, O) per query head, TQ3 partials in the rotated domain; every format on
// tensor cores (BF16 rows in bf16, FP8 and TQ3 codes in fp16, all exact; the query and the
// probabilities as several terms, so the logits keep about fp32 accuracy); the
// exact formats run on a side stream beside (1) and TQ3, (3) a merge per (sequence, query head)
// combines every partial under one softmax and applies one inverse rotation to the TQ3 share. The
// rotation and the merge are the kernels prefill runs too, over the one partials layout and the merge
// ranges of decode_plan.h (src/cuda/attention_kernels.cuh).
// Softmax partials use the NATURAL logarithm, like the CPU kernels (paged_attention.h). Running sums in
// fp32.
// Graph contract: stage() writes the plan into pinned host memory only; launch() copies it to the device
// and runs the kernels with no host synchronisation or allocation, so launch() can be captured in a CUDA
// graph once and replayed after later stage() calls (same DecodeWorkspace, same pointers).
// Supported: head_dim 64/128/256, GQA ratios 1..8, pages of 16..4096 tokens, a partial last page,
// batches of sequences with different lengths and format mixes.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "minimakv/codec/page_layout.h"
#include "minimakv/cuda/attention_buffers.h"
#include "minimakv/cuda/decode_plan.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/fork_join.h"

namespace minimakv::cuda {

// What one decode call read (the paper's contribution 4). route: "mixed" when TQ3 and FP8/BF16 pages are
// read in the same call, else "tq3-only", "fp8-only" or "dense". Bytes count K and V codes plus metadata
// of the valid tokens of every KV head. No path of this kernel builds a dense copy, so dense_shadow_bytes
// and fallbacks stay 0; they are counted so that any future fallback shows up.
struct DecodeStats {
  std::string route;
  std::array<uint64_t, codec::kNumPageFormats> bytes_read{};
  uint64_t dense_shadow_bytes = 0;
  uint64_t fallbacks = 0;
  int splits = 0, entries = 0;
  uint64_t total_bytes() const { return std::accumulate(bytes_read.begin(), bytes_read.end(), uint64_t{0}); }
};

class DecodeWorkspace {
 public:
  DecodeWorkspace(const DecodeShape& shape, int max_batch, int max_splits, int max_entries);

  // Host only: validates the plan against the capacity and the shape, writes it into pinned staging
  // memory and computes the stats. Throws std::invalid_argument and keeps the previous plan on error.
  void stage(const DecodePlan& plan, const PoolViews& pools);
  // Copies the staged plan to the device and runs the step on `stream`. kCapacity copies the whole plan
  // buffer and sizes every grid by the capacities (no launch for a format without a pool in `pools`),
  // so a captured graph stays valid for any later stage() with the same pools; kStaged copies and
  // launches only what the staged plan uses (eager launches: a workspace sized for long prefill chunks
  // stays cheap for single-token decode steps).
  // plan_copy_from, when given, is an event recorded on `stream` earlier, after which nothing queued
  // reads or writes this workspace's device plan: the plan copy then runs on a side stream from that
  // point, beside the work queued since, and only the kernels wait for it. (A captured decode step's
  // layer records it where the layer's graph begins, so the copy is a root of the graph instead of a
  // node between the K/V append and the attention.)
  enum class LaunchSize { kCapacity, kStaged };
  void launch(const PoolViews& pools, const AttentionBuffers& io, cudaStream_t stream,
              LaunchSize size = LaunchSize::kCapacity, cudaEvent_t plan_copy_from = nullptr) const;

  const DecodeStats& stats() const { return stats_; }
  const DecodeShape& shape() const { return shape_; }
  int max_batch() const { return max_batch_; }
  int max_splits() const { return max_splits_; }
  int max_entries() const { return max_entries_; }

 private:
  DecodeShape shape_;
  int max_batch_, max_splits_, max_entries_;
  size_t off_seq_ = 0, off_split_ = 0, off_entry_ = 0, off_merge_ = 0, blob_bytes_ = 0;
  PinnedArray<uint8_t> staging_;
  DeviceArray<uint8_t> plan_;
  DeviceArray<float> q_rot_, part_o_, part_m_, part_l_;
  ForkJoin side_;  // the exact formats' launches beside the TQ3 one
  DecodeStats stats_;
  bool page_granular_ = false;  // every entry is read by exactly one split, from its first token
  int staged_batch_ = 0, staged_entries_ = 0;
  std::array<int, codec::kNumPageFormats> staged_splits_{};  // per format
};

}  // namespace minimakv::cuda
