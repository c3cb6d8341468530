#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "attention_device.cuh"
#include "attention_kernels.cuh"
#include "decode_split.cuh"
#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/paged_decode.h"
#include "require.h"

namespace minimakv::cuda {

namespace {

using namespace detail;
using namespace decode_detail;

// Decode's merge: 512 threads per (item, query head), the partials spread over all 16 warps.
constexpr int kMergeThreads = 512;

// One block per batch item: r_p = mean over query heads of each page's share / the head's total.
__global__ void decode_page_score_kernel(StepParams p) {
  chain_begin();
  const int b = blockIdx.x;
  if (b >= plan_batch(p.plan)) return;
  extern __shared__ double totals[];  // [q_heads]
  __shared__ double scratch[32];
  const int n_entries = reinterpret_cast<const int32_t*>(p.plan)[2];
  const auto* entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  double before = 0.0;  // pages of the items before b: where b's scores start
  for (int e = threadIdx.x; e < n_entries; e += blockDim.x) before += entries[e].seq < static_cast<uint32_t>(b);
  const int offset = static_cast<int>(block_sum(before, scratch));
  // Each head's total over the item's pages, the pages spread over the block (an item has hundreds).
  for (int h = 0; h < p.q_heads; ++h) {
    const size_t mi = static_cast<size_t>(b) * p.q_heads + h;
    double t = 0.0;
    for (int e = threadIdx.x; e < n_entries; e += blockDim.x)
      if (entries[e].seq == static_cast<uint32_t>(b))
        t += page_share(p.page_m[static_cast<size_t>(e) * p.q_heads + h],
                        p.page_l[static_cast<size_t>(e) * p.q_heads + h], p.m[mi], p.l[mi]);
    t = block_sum(t, scratch);
    if (threadIdx.x == 0) totals[h] = t;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_entries; e += blockDim.x) {
    const PlanEntry en = entries[e];
    if (en.seq != static_cast<uint32_t>(b)) continue;
    double r = 0.0;
    for (int h = 0; h < p.q_heads; ++h) {
      const size_t mi = static_cast<size_t>(b) * p.q_heads + h, at = static_cast<size_t>(e) * p.q_heads + h;
      if (totals[h] > 0.0) r += page_share(p.page_m[at], p.page_l[at], p.m[mi], p.l[mi]) / totals[h];
    }
    p.score_acc[offset + en.logical] += p.score_weight * static_cast<float>(r / p.q_heads);
  }
}

// CTAs per SM the register budget is sized for. TQ3 is bound by instruction latency with few warps per
// scheduler, so it takes 4 (128 registers, no spills) up to head_dim 128 and 3 at 256 (measured faster
// with a few spilled registers than 2 without); BF16 and FP8 take 3, and 2 at head_dim 256, whose rings
// allow only 2 per SM anyway. A lab variant build may set it for every kernel (MINIMAKV_DECODE_MIN_BLOCKS)
// or for format index f at head_dim <= 128 (MINIMAKV_DECODE_MIN_BLOCKS_f).
#ifndef MINIMAKV_DECODE_MIN_BLOCKS_0
#define MINIMAKV_DECODE_MIN_BLOCKS_0 0
#endif
#ifndef MINIMAKV_DECODE_MIN_BLOCKS_1
#define MINIMAKV_DECODE_MIN_BLOCKS_1 0
#endif
#ifndef MINIMAKV_DECODE_MIN_BLOCKS_2
#define MINIMAKV_DECODE_MIN_BLOCKS_2 0
#endif
#ifndef MINIMAKV_DECODE_MIN_BLOCKS_3
#define MINIMAKV_DECODE_MIN_BLOCKS_3 0
#endif
template <codec::PageFormat F, int D>
constexpr int min_blocks() {
#if defined(MINIMAKV_DECODE_LAB) && defined(MINIMAKV_DECODE_MIN_BLOCKS)
  return MINIMAKV_DECODE_MIN_BLOCKS;
#else
  constexpr int lab[4] = {MINIMAKV_DECODE_MIN_BLOCKS_0, MINIMAKV_DECODE_MIN_BLOCKS_1, MINIMAKV_DECODE_MIN_BLOCKS_2,
                          MINIMAKV_DECODE_MIN_BLOCKS_3};
  if (D <= 128 && lab[codec::format_index(F)] > 0) return lab[codec::format_index(F)];
  return decode_ctas_per_sm(F, D);
#endif
}
template <codec::PageFormat F, int D>
constexpr int kMinBlocks = min_blocks<F, D>();

// One CTA per (split of format F, KV head). One launch per format: a kernel that branched on the
// format per CTA measured slower on an H200 (it takes the register budget of the heaviest path, the
// TQ3 one, for every CTA) and saved no time per layer.
template <codec::PageFormat F, int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<F, D>) decode_split_kernel(StepParams p) {
  chain_begin();
  const auto* offs = reinterpret_cast<const int32_t*>(p.plan + p.off_seq);
  const int batch = plan_batch(p.plan);
  constexpr int fi = codec::format_index(F);
  const int first = offs[fi * (batch + 1)], count = offs[fi * (batch + 1) + batch] - first;
  if (static_cast<int>(blockIdx.x) >= count) return;
  extern __shared__ __align__(16) uint8_t smem[];
  attend_split<F, D>(p, first + static_cast<int>(blockIdx.x), smem);
}

template <codec::PageFormat F, int D>
void launch_format(const StepParams& p, int max_splits, cudaStream_t st) {
  if (max_splits == 0) return;
  constexpr size_t bytes = SplitSmem<F, D>::kBytes;
  static const bool configured = [] {
    check(cudaFuncSetAttribute(decode_split_kernel<F, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "decode: shared memory attribute");
    return true;
  }();
  (void)configured;
  launch_chained(decode_split_kernel<F, D>, dim3(max_splits, p.kv_heads), kThreads, bytes, st, "decode split", p);
}

template <int D>
void launch_split(const StepParams& p, const std::array<int, codec::kNumPageFormats>& splits, cudaStream_t exact_st,
                  cudaStream_t tq3_st) {
  using codec::PageFormat;
  launch_format<PageFormat::kBf16, D>(p, splits[codec::format_index(PageFormat::kBf16)], exact_st);
  launch_format<PageFormat::kFp8, D>(p, splits[codec::format_index(PageFormat::kFp8)], exact_st);
  launch_format<PageFormat::kTq3, D>(p, splits[codec::format_index(PageFormat::kTq3)], tq3_st);
  launch_format<PageFormat::kTq4, D>(p, splits[codec::format_index(PageFormat::kTq4)], tq3_st);
}

// Grids: `batch` rows for the rotation (steps that read TQ3) and the merge, splits[f] CTAs (per KV head)
// for format f. CTAs past the staged plan's counts exit at once, so capacity-sized grids (graph replay)
// are correct too. When a step reads TQ3 and an exact format, the exact formats' launches run on a side
// stream beside the rotation and the TQ3 launch: a minima step has a handful of FP8 splits (sink,
// Recent, Anchors), which in stream order would add a whole kernel's latency to every layer.
template <int D>
void launch_all(const StepParams& p, int batch, const std::array<int, codec::kNumPageFormats>& splits, cudaStream_t st,
                const ForkJoin& side) {
  // Rotated splits (TQ3) read the rotated queries; the others (exact BF16, FP8) the plain ones.
  bool tq3 = false, exact = false;
  for (int f = 0; f < codec::kNumPageFormats; ++f) ((codec::kRotatedFormats >> f) & 1u ? tq3 : exact) |= splits[f] > 0;
  const cudaStream_t exact_st = tq3 && exact ? side.fork(st) : st;
  if (tq3)  // the staged plan's batch bounds the rows of a launch at capacity
    launch_chained(rotate_rows_kernel<D>, dim3(batch, p.q_heads), D, 0, st, "decode rotation", p,
                   plan_batch_word(p.plan));
  launch_split<D>(p, splits, exact_st, st);
  if (tq3 && exact) side.join(st);
  const MergeParams mp{reinterpret_cast<const MergeRange*>(p.plan + p.off_merge), nullptr, plan_batch_word(p.plan), 1};
  launch_chained(merge_partials_kernel<D, kMergeThreads, kMergeThreads / 32, D >= 256 ? 4 : 8, D >= 256 ? 1 : 2, false>,
                 dim3(batch, p.q_heads), kMergeThreads, 0, st, "decode merge", p, mp);
  if (p.score_acc)
    launch_chained(decode_page_score_kernel, batch, 256, sizeof(double) * p.q_heads, st, "decode page scores", p);
}

}  // namespace

DecodeWorkspace::DecodeWorkspace(const DecodeShape& shape, int max_batch, int max_splits, int max_entries)
    : shape_(shape), max_batch_(max_batch), max_splits_(max_splits), max_entries_(max_entries) {
  validate_decode_shape(shape);
  require(max_batch > 0 && max_splits > 0 && max_entries > 0, "DecodeWorkspace: capacities must be positive");
  off_seq_ = 16;
  off_split_ = codec::align_up(off_seq_ + sizeof(int32_t) * codec::kNumPageFormats * (max_batch + 1), 16);
  off_entry_ = codec::align_up(off_split_ + sizeof(PlanSplit) * max_splits, 16);
  off_merge_ = codec::align_up(off_entry_ + sizeof(PlanEntry) * max_entries, 16);
  blob_bytes_ = codec::align_up(off_merge_ + sizeof(MergeRange) * codec::kNumPageFormats * max_batch, 16);
  staging_ = PinnedArray<uint8_t>(blob_bytes_);
  std::memset(staging_.get(), 0, blob_bytes_);
  plan_ = DeviceArray<uint8_t>(blob_bytes_);
  check(cudaMemset(plan_.get(), 0, blob_bytes_), "DecodeWorkspace: cudaMemset");
  const size_t qh = static_cast<size_t>(shape.q_heads);
  q_rot_ = DeviceArray<float>(static_cast<size_t>(max_batch) * qh * shape.head_dim);
  part_o_ = DeviceArray<float>(static_cast<size_t>(max_splits) * qh * shape.head_dim);
  part_m_ = DeviceArray<float>(static_cast<size_t>(max_splits) * qh);
  part_l_ = DeviceArray<float>(static_cast<size_t>(max_splits) * qh);
}

void DecodeWorkspace::stage(const DecodePlan& plan, const PoolViews& pools) {
  require(plan.batch >= 1 && plan.batch <= max_batch_, "DecodeWorkspace::stage: batch " + std::to_string(plan.batch) +
                                                           " outside [1, " + std::to_string(max_batch_) + "]");
  require(static_cast<int>(plan.splits.size()) <= max_splits_,
          "DecodeWorkspace::stage: " + std::to_string(plan.splits.size()) + " splits exceed the capacity " +
              std::to_string(max_splits_));
  require(static_cast<int>(plan.entries.size()) <= max_entries_,
          "DecodeWorkspace::stage: " + std::to_string(plan.entries.size()) + " entries exceed the capacity " +
              std::to_string(max_entries_));
  require(plan.seq_split_begin.size() == static_cast<size_t>(codec::kNumPageFormats) * (plan.batch + 1),
          "DecodeWorkspace::stage: seq_split_begin must hold 3 * (batch + 1) offsets");
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    for (int b = 0; b <= plan.batch; ++b) {
      const int32_t o = plan.seq_split_begin[f * (plan.batch + 1) + b];
      require(o >= 0 && o <= static_cast<int32_t>(plan.splits.size()) &&
                  (b == 0 || o >= plan.seq_split_begin[f * (plan.batch + 1) + b - 1]),
              "DecodeWorkspace::stage: split offsets must be non-decreasing and in range");
      if (b < plan.batch)
        for (int32_t sidx = o; sidx < plan.seq_split_begin[f * (plan.batch + 1) + b + 1]; ++sidx)
          require(plan.splits[sidx].format == f && plan.splits[sidx].seq == b,
                  "DecodeWorkspace::stage: split outside its (format, sequence) range");
    }
  DecodeStats st;
  std::array<bool, codec::kNumPageFormats> seen{};
  for (const auto& sp : plan.splits) {
    require(sp.format >= 0 && sp.format < codec::kNumPageFormats, "DecodeWorkspace::stage: bad split format");
    require(
        sp.entry_begin >= 0 && sp.entry_begin < sp.entry_end && sp.entry_end <= static_cast<int>(plan.entries.size()),
        "DecodeWorkspace::stage: split entries out of range");
    require(sp.tok_begin >= 0 && sp.tok_begin < sp.tok_end && sp.tok_end <= shape_.tokens_per_page,
            "DecodeWorkspace::stage: split token range out of range");
    require(pools.base[sp.format] != nullptr, "DecodeWorkspace::stage: no pool for a format the plan reads");
    const DeviceLayout& L = pools.layout[sp.format];
    seen[sp.format] = true;
    for (int e = sp.entry_begin; e < sp.entry_end; ++e) {
      const int n = std::max(0, std::min<int>(sp.tok_end, plan.entries[e].tokens) - sp.tok_begin);
      st.bytes_read[sp.format] += static_cast<uint64_t>(n) * shape_.kv_heads * 2ull * (L.row + L.meta);
    }
  }
  bool granular = true;
  for (const auto& sp : plan.splits)
    if (sp.tok_begin != 0 ||
        (sp.entry_end - sp.entry_begin == 1 && sp.tok_end < static_cast<int>(plan.entries[sp.entry_begin].tokens)))
      granular = false;
  bool tq3 = false;  // any rotated format (TQ3, TQ4)
  for (int f = 0; f < codec::kNumPageFormats; ++f) tq3 |= seen[f] && ((codec::kRotatedFormats >> f) & 1u);
  const bool exact = seen[0] || seen[1];
  st.route = tq3 && exact ? "mixed" : tq3 ? "tq3-only" : seen[1] && !seen[0] ? "fp8-only" : "dense";
  st.splits = static_cast<int>(plan.splits.size());
  st.entries = static_cast<int>(plan.entries.size());
  uint8_t* blob = staging_.get();
  const int32_t header[4] = {st.splits, plan.batch, st.entries, 0};
  std::memcpy(blob, header, sizeof header);
  std::memcpy(blob + off_seq_, plan.seq_split_begin.data(), plan.seq_split_begin.size() * sizeof(int32_t));
  if (!plan.splits.empty()) std::memcpy(blob + off_split_, plan.splits.data(), plan.splits.size() * sizeof(PlanSplit));
  if (!plan.entries.empty())
    std::memcpy(blob + off_entry_, plan.entries.data(), plan.entries.size() * sizeof(PlanEntry));
  const std::vector<MergeRange> ranges = decode_merge_ranges(plan);
  std::memcpy(blob + off_merge_, ranges.data(), ranges.size() * sizeof(MergeRange));
  stats_ = st;
  page_granular_ = granular;
  staged_batch_ = plan.batch;
  staged_entries_ = st.entries;
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    staged_splits_[f] =
        plan.seq_split_begin[f * (plan.batch + 1) + plan.batch] - plan.seq_split_begin[f * (plan.batch + 1)];
}

void DecodeWorkspace::launch(const PoolViews& pools, const AttentionBuffers& io, cudaStream_t stream,
                             LaunchSize size, cudaEvent_t plan_copy_from) const {
  require(io.q && io.signs && io.out, "DecodeWorkspace::launch: q, signs and out are required");
  require((io.page_m == nullptr) == (io.page_l == nullptr), "DecodeWorkspace::launch: page_m and page_l go together");
  require(!io.score_acc || (io.page_m && io.m && io.l),
          "DecodeWorkspace::launch: page scores need m, l, page_m, page_l");
  require(io.page_m == nullptr || page_granular_,
          "DecodeWorkspace::launch: per-page (m, l) needs a page-granular plan (make_decode_plan(..., page_granular = "
          "true))");
  const bool exact = size == LaunchSize::kStaged;
  const cudaStream_t copy_st = plan_copy_from ? side_.fork_after(plan_copy_from) : stream;
  if (exact) {  // only the parts of the blob the staged plan fills
    const size_t parts[4][2] = {
        {0, off_seq_ + sizeof(int32_t) * codec::kNumPageFormats * (staged_batch_ + 1)},
        {off_split_,
         sizeof(PlanSplit) * static_cast<size_t>(std::accumulate(staged_splits_.begin(), staged_splits_.end(), 0))},
        {off_entry_, sizeof(PlanEntry) * static_cast<size_t>(staged_entries_)},
        {off_merge_, sizeof(MergeRange) * codec::kNumPageFormats * static_cast<size_t>(staged_batch_)}};
    for (const auto& [off, n] : parts)
      if (n)
        check(cudaMemcpyAsync(plan_.get() + off, staging_.get() + off, n, cudaMemcpyHostToDevice, copy_st),
              "DecodeWorkspace::launch: plan copy");
  } else {
    check(cudaMemcpyAsync(plan_.get(), staging_.get(), blob_bytes_, cudaMemcpyHostToDevice, copy_st),
          "DecodeWorkspace::launch: plan copy");
  }
  if (plan_copy_from) side_.join(stream);
  const int batch = exact ? staged_batch_ : max_batch_;
  // At capacity, a format without a pool cannot be in any plan (stage() refuses it): no launch for it.
  std::array<int, codec::kNumPageFormats> splits = staged_splits_;
  if (!exact)
    for (int f = 0; f < codec::kNumPageFormats; ++f) splits[f] = pools.base[f] ? max_splits_ : 0;
  StepParams p{};
  p.plan = plan_.get();
  p.off_seq = static_cast<uint32_t>(off_seq_);
  p.off_split = static_cast<uint32_t>(off_split_);
  p.off_entry = static_cast<uint32_t>(off_entry_);
  p.off_merge = static_cast<uint32_t>(off_merge_);
  set_attend_params(p, pools, shape_, io, q_rot_.get(), part_o_.get(), part_m_.get(), part_l_.get());
  switch (shape_.head_dim) {
    case 64:
      launch_all<64>(p, batch, splits, stream, side_);
      break;
    case 128:
      launch_all<128>(p, batch, splits, stream, side_);
      break;
    default:
      launch_all<256>(p, batch, splits, stream, side_);
      break;
  }
  check(cudaGetLastError(), "DecodeWorkspace::launch");
}

}  // namespace minimakv::cuda
