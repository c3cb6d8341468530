#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "attention_device.cuh"
#include "attention_kernels.cuh"
#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/paged_prefill.h"
#include "prefill_consume_mma.cuh"
#include "prefill_consume_wgmma.cuh"
#include "prefill_produce.cuh"
#include "prefill_tile.cuh"
#include "prefill_tma_consume.cuh"
#include "prefill_tma_fp8.cuh"
#include "prefill_tma_tile.cuh"
#include "prefill_tma_tq3.cuh"
#include "require.h"

namespace minimakv::cuda {

namespace {

using namespace detail;

// The sequence a row belongs to (rows are consecutive, sequences in order).
__device__ inline int seq_of_row(const PrefillSeqRec* seqs, int n_seqs, int row) {
  int s = 0;
  while (s + 1 < n_seqs && seqs[s + 1].row_begin <= row) ++s;
  return s;
}

// One CTA's work: the last four warps produce, the others consume on mma.sync or wgmma.
template <codec::PageFormat F, int D, int QT, bool Wg>
__device__ void prefill_tile(const PrefillParams& p, int w, int h, int part, uint8_t* smem) {
  using T = PrefillTile<F, D, QT, Wg>;
  const PrefillWork c = load_work(p, w, h, T::kKeys, part * T::kRows);
  if (static_cast<int>(threadIdx.x) >= T::kConsumers) {
    prefill_produce<F, D, QT, Wg>(p, c, smem);
  } else if constexpr (Wg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    prefill_consume_wgmma<F, D, QT>(p, c, smem);
#endif
  } else {
    prefill_consume_mma<F, D, QT>(p, c, smem);
  }
}

// The (launch index, KV head, part) of this CTA: tile_parts CTAs of rows per (work, KV head), side by
// side in the grid (they read the same keys), the works in launch order.
struct CtaWork {
  int i, h, part;
};
__device__ inline CtaWork cta_work(const PrefillParams& p, int tile_parts) {
  const int per_work = p.kv_heads * tile_parts, rem = static_cast<int>(blockIdx.x) % per_work;
  return {static_cast<int>(blockIdx.x) / per_work, rem / tile_parts, rem % tile_parts};
}

// One CTA per (work, KV head, part of the plan tile's rows), the works in the plan's launch order (most
// key tiles first, so the causal triangle's long works do not trail at the end of the grid). The wgmma
// kernel exists only in the sm_90a code (elsewhere it traps; run() never launches it there).
template <int D, int QT, bool Wg>
__global__ void __launch_bounds__(PrefillTile<codec::PageFormat::kFp8, D, QT, Wg>::kThreads, 1)
    prefill_tile_kernel(PrefillParams p) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (Wg) __trap();
#endif
  extern __shared__ __align__(128) uint8_t smem[];
  const auto [i, h, part] = cta_work(p, p.tile_rows / PrefillTile<codec::PageFormat::kFp8, D, QT, Wg>::kRows);
  if (i >= p.n_works) return;
  const int w = reinterpret_cast<const int32_t*>(p.plan + p.off_order)[i];
  const auto* splits = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split);
  const auto* works = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work);
  const int format = splits[works[w].split].format;
  if (!((p.formats >> format) & 1u)) return;  // another kernel attends this work
  switch (format) {
    case codec::format_index(codec::PageFormat::kBf16):
      prefill_tile<codec::PageFormat::kBf16, D, QT, Wg>(p, w, h, part, smem);
      break;
    case codec::format_index(codec::PageFormat::kFp8):
      prefill_tile<codec::PageFormat::kFp8, D, QT, Wg>(p, w, h, part, smem);
      break;
    case codec::format_index(codec::PageFormat::kTq4):
      prefill_tile<codec::PageFormat::kTq4, D, QT, Wg>(p, w, h, part, smem);
      break;
    default:
      prefill_tile<codec::PageFormat::kTq3, D, QT, Wg>(p, w, h, part, smem);
      break;
  }
}

// The copy-engine CTA (PrefillKernel::kTma) for the works of format F (BF16, FP8, or TQ3 at head_dim
// 128 and 256): one per (work, KV head, part of the plan tile's rows) in launch order, like
// prefill_tile_kernel; CTAs of other formats' works return at once. One kernel per format, so that each
// gets the registers its own code needs. The producer warpgroup gives registers to the two consumer
// warpgroups (BF16: 40 + 2 x 232; FP8 and TQ3, whose producers widen codes: 104 + 2 x 200, 4-5% faster
// than 72 + 2 x 216 on an H100; FP8 at head_dim 256 120 + 2 x 192, where 104 spills in the producer and
// 120 measured 3-4% faster, docs/benchmarks.md; 3 x 168 is the cap at entry). With one consumer
// warpgroup (two query terms at head_dim 256) no registers move. Kernel lab:
// MINIMAKV_PREFILL_FP8_PRODUCER_REGS and MINIMAKV_PREFILL_TQ3_PRODUCER_REGS (head_dim <= 128; with a
// _D256 suffix at 256) move the widening producers' split (the consumers get (504 - it) / 2; both
// multiples of 8).
#ifndef MINIMAKV_PREFILL_FP8_PRODUCER_REGS
#define MINIMAKV_PREFILL_FP8_PRODUCER_REGS 104
#endif
#ifndef MINIMAKV_PREFILL_TQ3_PRODUCER_REGS
#define MINIMAKV_PREFILL_TQ3_PRODUCER_REGS 104
#endif
#ifndef MINIMAKV_PREFILL_FP8_PRODUCER_REGS_D256
#define MINIMAKV_PREFILL_FP8_PRODUCER_REGS_D256 120
#endif
#ifndef MINIMAKV_PREFILL_TQ3_PRODUCER_REGS_D256
#define MINIMAKV_PREFILL_TQ3_PRODUCER_REGS_D256 104
#endif
template <codec::PageFormat F, int D>
inline constexpr int kTmaProducerRegs =
    F == codec::PageFormat::kBf16 ? 40
    : F == codec::PageFormat::kFp8
        ? (D > 128 ? MINIMAKV_PREFILL_FP8_PRODUCER_REGS_D256 : MINIMAKV_PREFILL_FP8_PRODUCER_REGS)
        : (D > 128 ? MINIMAKV_PREFILL_TQ3_PRODUCER_REGS_D256 : MINIMAKV_PREFILL_TQ3_PRODUCER_REGS);
template <codec::PageFormat F, int D, int QT>
__global__ void __launch_bounds__(TmaTile<D, QT, F>::kThreads, 1)
    prefill_tma_kernel(const __grid_constant__ PrefillTmaParams tp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = TmaTile<D, QT, F>;
  // The producer's registers: BF16's only issues copies, FP8's and TQ3's widen codes.
  constexpr int kProducerRegs = kTmaProducerRegs<F, D>;
  static_assert(kProducerRegs % 8 == 0 && (504 - kProducerRegs) / 2 % 8 == 0);
  const PrefillParams& p = tp.p;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);  // swizzle atoms are 1 KiB
  const auto [i, h, part] = cta_work(p, p.tile_rows / T::kRows);
  if (i >= p.n_works) return;
  const int w = reinterpret_cast<const int32_t*>(p.plan + p.off_order)[i];
  const auto* splits = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split);
  const auto* works = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work);
  if (splits[works[w].split].format != codec::format_index(F)) return;
  init_tma_barriers<T>(smem_u32(smem), full_arrivals<T>(F != codec::PageFormat::kBf16));
  const PrefillWork c = load_work(p, w, h, T::kKeys, part * T::kRows);
  if (static_cast<int>(threadIdx.x) >= T::kConsumers) {
    if constexpr (T::kGroups == 2) setmaxnreg_dec<kProducerRegs>();
    if constexpr (F == codec::PageFormat::kFp8 && T::kFp8Ring)
      prefill_produce_fp8_ring<D, QT>(tp, c, smem);
    else if constexpr (F == codec::PageFormat::kFp8)
      prefill_produce_fp8<D, QT>(tp, c, smem);
    else if constexpr (F == codec::PageFormat::kTq3)
      prefill_produce_tq3<D, QT>(tp, c, smem);
    else
      prefill_produce_bf16<D, QT>(tp, c, smem);
  } else {
    if constexpr (T::kGroups == 2) setmaxnreg_inc<(504 - kProducerRegs) / 2>();
    prefill_consume_tma<F, D, QT>(p, c, smem);
  }
#else
  (void)tp;
  __trap();
#endif
}

// row_total[row][hq] = sum over the pages the row's position reaches of exp(m_p - m) l_p / l.
__global__ void prefill_row_total_kernel(PrefillParams p) {
  const int row = blockIdx.x, hq = threadIdx.x;
  if (hq >= p.q_heads) return;
  const auto* seqs = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq);
  const PrefillSeqRec sq = seqs[seq_of_row(seqs, p.n_seqs, row)];
  const int t = row - sq.row_begin, reach = (sq.first + t) / p.tokens_per_page + 1;
  const size_t mi = static_cast<size_t>(row) * p.q_heads + hq;
  double total = 0.0;
  for (int pg = 0; pg < reach; ++pg) {
    const size_t i = static_cast<size_t>(sq.stats_offset) + (static_cast<size_t>(t) * sq.pages + pg) * p.q_heads + hq;
    total += page_share(p.page_m[i], p.page_l[i], p.m[mi], p.l[mi]);
  }
  p.row_total[mi] = total;
}

// One block per (page, sequence): r_p = mean over rows and heads of share / row total.
__global__ void prefill_page_score_kernel(PrefillParams p) {
  const int pg = blockIdx.x, s = blockIdx.y;
  __shared__ double scratch[32];
  const PrefillSeqRec sq = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq)[s];
  if (pg >= sq.pages) return;
  double sum = 0.0;
  const int items = sq.n * p.q_heads;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int t = i / p.q_heads, hq = i % p.q_heads;
    if (pg > (sq.first + t) / p.tokens_per_page) continue;
    const size_t mi = static_cast<size_t>(sq.row_begin + t) * p.q_heads + hq;
    const size_t at = static_cast<size_t>(sq.stats_offset) + (static_cast<size_t>(t) * sq.pages + pg) * p.q_heads + hq;
    const double total = p.row_total[mi];
    if (total > 0.0) sum += page_share(p.page_m[at], p.page_l[at], p.m[mi], p.l[mi]) / total;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) p.score_acc[sq.score_offset + pg] += p.score_weight * static_cast<float>(sum / items);
}

template <int D, int QT, bool Wg>
void launch_tiles(const PrefillParams& p, cudaStream_t st) {
  constexpr size_t bytes = prefill_tile_smem<D, QT, Wg>();
  constexpr int threads = PrefillTile<codec::PageFormat::kFp8, D, QT, Wg>::kThreads;
  static const bool configured = [] {
    check(cudaFuncSetAttribute(prefill_tile_kernel<D, QT, Wg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "prefill: shared memory attribute");
    return true;
  }();
  (void)configured;
  const int parts = p.tile_rows / PrefillTile<codec::PageFormat::kFp8, D, QT, Wg>::kRows;
  prefill_tile_kernel<D, QT, Wg><<<p.n_works * p.kv_heads * parts, threads, bytes, st>>>(p);
}

template <codec::PageFormat F, int D, int QT>
void launch_tma(const PrefillTmaParams& tp, cudaStream_t st) {
  constexpr size_t bytes = TmaTile<D, QT, F>::kBytes;
  static const bool configured = [] {
    check(cudaFuncSetAttribute(prefill_tma_kernel<F, D, QT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "prefill: shared memory attribute");
    return true;
  }();
  (void)configured;
  const int parts = tp.p.tile_rows / TmaTile<D, QT, F>::kRows;
  prefill_tma_kernel<F, D, QT><<<tp.p.n_works * tp.p.kv_heads * parts, TmaTile<D, QT, F>::kThreads, bytes, st>>>(tp);
}

// The copy-engine kernels of the formats in tp.p.formats.
template <int D, int QT>
void launch_tma_formats(const PrefillTmaParams& tp, cudaStream_t st) {
  if (tp.p.formats >> codec::format_index(codec::PageFormat::kBf16) & 1u) launch_tma<codec::PageFormat::kBf16, D, QT>(tp, st);
  if (tp.p.formats >> codec::format_index(codec::PageFormat::kFp8) & 1u) launch_tma<codec::PageFormat::kFp8, D, QT>(tp, st);
  if constexpr (prefill_tma_reads(D, codec::PageFormat::kTq3))
    if (tp.p.formats >> codec::format_index(codec::PageFormat::kTq3) & 1u) launch_tma<codec::PageFormat::kTq3, D, QT>(tp, st);
}

// tp: the copy-engine launch's parameters where its CTA attends the BF16, FP8 or TQ3 works (tp->p.formats
// names them, p.formats leaves them out), else null; others: whether works of other formats remain for
// prefill_tile_kernel.
template <int D>
void launch_prefill(const PrefillParams& p, const PrefillTmaParams* tp, bool others, int max_pages, bool rotate,
                    PrefillKernel kernel, cudaStream_t st) {
  if (rotate) rotate_rows_kernel<D><<<dim3(p.rows, p.q_heads), D, 0, st>>>(p, nullptr);
  // Two query terms (logits close to fp32) and per-page partials where page scores are wanted.
  const bool two = p.page_m != nullptr;
  if (tp) two ? launch_tma_formats<D, 2>(*tp, st) : launch_tma_formats<D, 1>(*tp, st);
  const bool wg = kernel != PrefillKernel::kMma;
  if (others) {
    if (two)
      wg ? launch_tiles<D, 2, true>(p, st) : launch_tiles<D, 2, false>(p, st);
    else
      wg ? launch_tiles<D, 1, true>(p, st) : launch_tiles<D, 1, false>(p, st);
  }
  // One warp per (row, query head) takes the row's few partials in work order.
  const MergeParams mp{reinterpret_cast<const MergeRange*>(p.plan + p.off_ranges),
                       reinterpret_cast<const MergeRow*>(p.plan + p.off_rows), nullptr, p.tile_tokens};
  merge_partials_kernel<D, D, 1, 1, D >= 256 ? 5 : 2048 / D, true><<<dim3(p.rows, p.q_heads), D, 0, st>>>(p, mp);
  if (p.score_acc) {
    prefill_row_total_kernel<<<p.rows, (p.q_heads + 31) / 32 * 32, 0, st>>>(p);
    prefill_page_score_kernel<<<dim3(max_pages, p.n_seqs), 256, 0, st>>>(p);
  }
}

// A pool's K and V codes as rank-4 tensors for the copy engine, [page][head][token][element] with the
// layout's strides, read in boxes of box_inner elements x box_rows tokens with the given swizzle
// (out-of-range rows arrive as zeros): BF16 pages as bf16 in boxes of 64 (128 bytes), FP8 codes as bytes
// in boxes of up to 128, TQ3's packed codes as bytes in boxes of 48 (128 codes, no swizzle). False where
// the driver has no encoder or the layout breaks the engine's rules (16-byte aligned base and strides);
// the CTA then copies every tile of that format with cp.async.
bool encode_maps(CUtensorMap& k_map, CUtensorMap& v_map, codec::PageFormat f, const PoolViews& pools,
                 const DecodeShape& shape, int box_rows, uint64_t pages) {
  static const auto encode = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const int fi = codec::format_index(f);
  const DeviceLayout& L = pools.layout[fi];
  uint8_t* base = pools.base[fi];
  if (!encode || !base || box_rows == 0 || pages == 0) return false;
  const bool bf16 = f == codec::PageFormat::kBf16, tq3 = f == codec::PageFormat::kTq3;
  const int inner = bf16 ? 64 : tq3 ? 48 : std::min(shape.head_dim, 128);
  const auto swizzle = tq3                     ? CU_TENSOR_MAP_SWIZZLE_NONE
                       : bf16 || inner == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                               : CU_TENSOR_MAP_SWIZZLE_64B;
  const int row_elems = tq3 ? static_cast<int>(codec::tq3_packed_bytes(shape.head_dim)) : shape.head_dim;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(row_elems), static_cast<cuuint64_t>(shape.tokens_per_page),
                              static_cast<cuuint64_t>(shape.kv_heads), pages};
  const cuuint64_t strides[3] = {L.row, L.code_stride, L.page_bytes};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(inner), static_cast<cuuint32_t>(box_rows), 1, 1},
                   unit[4] = {1, 1, 1, 1};
  for (const cuuint64_t x : {strides[0], strides[1], strides[2], static_cast<cuuint64_t>(L.v_codes),
                             static_cast<cuuint64_t>(reinterpret_cast<uintptr_t>(base))})
    if (x % 16 != 0) return false;
  for (auto [map, at] : {std::pair{&k_map, base}, std::pair{&v_map, base + L.v_codes}})
    if (encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, at, dims, strides, box,
               unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  return true;
}

// Query rows of the CTA that attends format f's works at head_dim D (two: two query terms): the plan
// tile's, or fewer where that CTA takes the tile in parts, each reading the tile's keys.
template <int D>
int cta_rows(codec::PageFormat f, PrefillKernel kernel, bool two) {
  using codec::PageFormat;
  if (kernel == PrefillKernel::kTma && prefill_tma_reads(D, f)) {
    if (f == PageFormat::kBf16) return two ? TmaTile<D, 2, PageFormat::kBf16>::kRows : TmaTile<D, 1, PageFormat::kBf16>::kRows;
    if (f == PageFormat::kFp8) return two ? TmaTile<D, 2, PageFormat::kFp8>::kRows : TmaTile<D, 1, PageFormat::kFp8>::kRows;
    return two ? TmaTile<D, 2, PageFormat::kTq3>::kRows : TmaTile<D, 1, PageFormat::kTq3>::kRows;
  }
  const bool wg = kernel != PrefillKernel::kMma;
  return two ? (wg ? PrefillTile<PageFormat::kFp8, D, 2, true>::kRows : PrefillTile<PageFormat::kFp8, D, 2, false>::kRows)
             : (wg ? PrefillTile<PageFormat::kFp8, D, 1, true>::kRows : PrefillTile<PageFormat::kFp8, D, 1, false>::kRows);
}
int cta_rows(int head_dim, codec::PageFormat f, PrefillKernel kernel, bool two) {
  return head_dim == 64 ? cta_rows<64>(f, kernel, two) : head_dim == 128 ? cta_rows<128>(f, kernel, two)
                                                                         : cta_rows<256>(f, kernel, two);
}

size_t align16(size_t n) {
  return (n + 15) / 16 * 16;
}

struct BlobLayout {
  size_t seq, split, work, tiles, order, entry, ranges, rows, bytes;
  explicit BlobLayout(const PrefillPlan& plan) {
    seq = 0;
    split = align16(seq + sizeof(PrefillSeqRec) * plan.seqs.size());
    work = align16(split + sizeof(PlanSplit) * plan.splits.size());
    tiles = align16(work + sizeof(PrefillWorkRec) * plan.works.size());
    order = align16(tiles + sizeof(int32_t) * plan.tile_work_begin.size());
    entry = align16(order + sizeof(int32_t) * plan.launch_order.size());
    ranges = align16(entry + sizeof(PlanEntry) * plan.entries.size());
    rows = align16(ranges + sizeof(MergeRange) * plan.merge_ranges.size());
    bytes = align16(rows + sizeof(MergeRow) * plan.merge_rows.size());
  }
};

}  // namespace

bool prefill_wgmma_available() {
#if defined(MINIMAKV_PREFILL_WGMMA)
  // The sm_90a code is loaded on devices of compute capability 9.0 exactly.
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "prefill: compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "prefill: compute capability");
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

const char* to_string(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kMma:
      return "mma";
    case PrefillKernel::kWgmma:
      return "wgmma";
    case PrefillKernel::kTma:
      return "tma";
    default:
      return "auto";
  }
}

PrefillKernel prefill_kernel_from_string(std::string_view name) {
  for (const auto k : {PrefillKernel::kAuto, PrefillKernel::kMma, PrefillKernel::kWgmma, PrefillKernel::kTma})
    if (name == to_string(k)) return k;
  throw std::invalid_argument("prefill kernel '" + std::string(name) + "': expected auto, mma, wgmma or tma");
}

PrefillWorkspace::PrefillWorkspace(const DecodeShape& shape, PrefillKernel kernel) : shape_(shape) {
  codec::require_supported_head_dim(shape.head_dim, "PrefillWorkspace");
  require(shape.kv_heads > 0 && shape.q_heads % shape.kv_heads == 0 && shape.q_heads / shape.kv_heads <= 8,
          "PrefillWorkspace: unsupported head counts");
  const bool wgmma = prefill_wgmma_available();
  require(kernel == PrefillKernel::kAuto || kernel == PrefillKernel::kMma || wgmma,
          std::string("PrefillWorkspace: the ") + to_string(kernel) +
              " kernel needs a compute capability 9.0 GPU and a build with the sm_90a target");
  kernel_ = kernel == PrefillKernel::kAuto ? (wgmma ? PrefillKernel::kTma : PrefillKernel::kMma) : kernel;
  check(cudaEventCreateWithFlags(&staged_copied_, cudaEventDisableTiming), "PrefillWorkspace: event");
}

PrefillWorkspace::~PrefillWorkspace() {
  if (staged_copied_) cudaEventDestroy(staged_copied_);
}

DecodeStats PrefillWorkspace::run(const PrefillPlan& plan, const PoolViews& pools, const AttentionBuffers& io,
                                  cudaStream_t stream) {
  require(io.q && io.signs && io.out, "PrefillWorkspace::run: q, signs and out are required");
  require((io.page_m == nullptr) == (io.page_l == nullptr), "PrefillWorkspace::run: page_m and page_l go together");
  require(!io.score_acc || (io.page_m && io.m && io.l), "PrefillWorkspace::run: page scores need m, l, page_m, page_l");
  const int tile_rows = tiling().rows;
  require(plan.tile_tokens == tile_rows / (shape_.q_heads / shape_.kv_heads) && plan.tiling == tiling() &&
              plan.rows > 0 && !plan.works.empty() &&
              plan.launch_order.size() == plan.works.size() &&
              plan.merge_ranges.size() == (plan.tile_work_begin.size() - 1) * codec::kNumPageFormats &&
              plan.merge_rows.size() == static_cast<size_t>(plan.rows),
          "PrefillWorkspace::run: the plan was made for another shape, or is empty");
  DecodeStats st;
  std::array<bool, codec::kNumPageFormats> seen{};
  for (const auto& sp : plan.splits) {
    require(pools.base[sp.format] != nullptr, "PrefillWorkspace::run: no pool for a format the plan reads");
    seen[sp.format] = true;
  }
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    if (seen[f]) {
      // A CTA that takes the plan tile in parts reads its keys once per part.
      const int parts = tile_rows / cta_rows(shape_.head_dim, static_cast<codec::PageFormat>(f), kernel_, io.page_m != nullptr);
      st.bytes_read[f] = plan.key_reads[f] * parts * 2ull * (pools.layout[f].row + pools.layout[f].meta);
    }
  bool tq3 = false;  // any rotated format (TQ3, TQ4)
  for (int f = 0; f < codec::kNumPageFormats; ++f) tq3 |= seen[f] && ((codec::kRotatedFormats >> f) & 1u);
  const bool exact = seen[0] || seen[1];
  st.route = tq3 && exact ? "mixed" : tq3 ? "tq3-only" : seen[1] && !seen[0] ? "fp8-only" : "dense";
  st.splits = static_cast<int>(plan.splits.size());
  st.entries = static_cast<int>(plan.entries.size());

  const BlobLayout bl(plan);
  const size_t qh = static_cast<size_t>(shape_.q_heads), D = static_cast<size_t>(shape_.head_dim);
  // Growing frees buffers the previous call's kernels may still read: wait for the device first.
  const bool grow_blob = bl.bytes > blob_cap_, grow_rows = static_cast<size_t>(plan.rows) > rows_cap_,
             grow_works = plan.works.size() > works_cap_;
  if (grow_blob || grow_rows || grow_works) check(cudaStreamSynchronize(stream), "PrefillWorkspace: grow");
  if (grow_blob) {
    blob_cap_ = std::max(bl.bytes, 2 * blob_cap_);
    staging_ = PinnedArray<uint8_t>(blob_cap_);
    plan_ = DeviceArray<uint8_t>(blob_cap_);
  }
  if (grow_rows) {
    rows_cap_ = std::max<size_t>(plan.rows, 2 * rows_cap_);
    q_rot_ = DeviceArray<float>(rows_cap_ * qh * D);
    row_total_ = DeviceArray<double>(rows_cap_ * qh);
  }
  if (grow_works) {
    works_cap_ = std::max(plan.works.size(), 2 * works_cap_);
    const size_t parts = works_cap_ * static_cast<size_t>(shape_.kv_heads) * tile_rows;
    part_o_ = DeviceArray<float>(parts * D);
    part_m_ = DeviceArray<float>(parts);
    part_l_ = DeviceArray<float>(parts);
  }
  // The pinned staging buffer may still be the source of the previous call's asynchronous copy.
  check(cudaEventSynchronize(staged_copied_), "PrefillWorkspace: staging");
  uint8_t* blob = staging_.get();
  std::memcpy(blob + bl.seq, plan.seqs.data(), sizeof(PrefillSeqRec) * plan.seqs.size());
  std::memcpy(blob + bl.split, plan.splits.data(), sizeof(PlanSplit) * plan.splits.size());
  std::memcpy(blob + bl.work, plan.works.data(), sizeof(PrefillWorkRec) * plan.works.size());
  std::memcpy(blob + bl.tiles, plan.tile_work_begin.data(), sizeof(int32_t) * plan.tile_work_begin.size());
  std::memcpy(blob + bl.order, plan.launch_order.data(), sizeof(int32_t) * plan.launch_order.size());
  if (!plan.entries.empty()) std::memcpy(blob + bl.entry, plan.entries.data(), sizeof(PlanEntry) * plan.entries.size());
  std::memcpy(blob + bl.ranges, plan.merge_ranges.data(), sizeof(MergeRange) * plan.merge_ranges.size());
  std::memcpy(blob + bl.rows, plan.merge_rows.data(), sizeof(MergeRow) * plan.merge_rows.size());
  check(cudaMemcpyAsync(plan_.get(), blob, bl.bytes, cudaMemcpyHostToDevice, stream), "PrefillWorkspace: plan copy");
  check(cudaEventRecord(staged_copied_, stream), "PrefillWorkspace: event");

  PrefillParams p{};
  p.plan = plan_.get();
  p.off_seq = static_cast<uint32_t>(bl.seq);
  p.off_split = static_cast<uint32_t>(bl.split);
  p.off_work = static_cast<uint32_t>(bl.work);
  p.off_tiles = static_cast<uint32_t>(bl.tiles);
  p.off_order = static_cast<uint32_t>(bl.order);
  p.off_entry = static_cast<uint32_t>(bl.entry);
  p.off_ranges = static_cast<uint32_t>(bl.ranges);
  p.off_rows = static_cast<uint32_t>(bl.rows);
  p.n_seqs = static_cast<int>(plan.seqs.size());
  p.n_works = static_cast<int>(plan.works.size());
  p.rows = plan.rows;
  set_attend_params(p, pools, shape_, io, q_rot_.get(), part_o_.get(), part_m_.get(), part_l_.get());
  p.row_total = row_total_.get();
  p.tile_tokens = plan.tile_tokens;
  p.tile_rows = tile_rows;
  p.tokens_per_page = shape_.tokens_per_page;
  int max_pages = 0;
  for (const auto& sq : plan.seqs) max_pages = std::max(max_pages, sq.pages);
  // kTma: the BF16, FP8 and (head_dim >= 128) TQ3 works go to the copy-engine CTA, whose tensor maps
  // cover each pool up to the last page read.
  const int bf16 = codec::format_index(codec::PageFormat::kBf16), fp8 = codec::format_index(codec::PageFormat::kFp8),
            tq3f = codec::format_index(codec::PageFormat::kTq3);
  uint32_t tma_formats = 0;  // of those present
  if (kernel_ == PrefillKernel::kTma)
    for (int f = 0; f < codec::kNumPageFormats; ++f)
      if (seen[f] && prefill_tma_reads(shape_.head_dim, static_cast<codec::PageFormat>(f))) tma_formats |= 1u << f;
  const bool direct = tma_formats != 0;
  p.formats = ~tma_formats;
  bool others = false;
  for (int f = 0; f < codec::kNumPageFormats; ++f) others |= seen[f] && ((p.formats >> f) & 1u);
  PrefillTmaParams tp{};
  if (direct) {
    tp.p = p;
    tp.p.formats = tma_formats;  // each its own launch
    const int K = prefill_tma_key_tile(shape_.head_dim), B = shape_.tokens_per_page;
    tp.box_rows = B >= K ? K : (K % B == 0 && B % 8 == 0 ? B : 0);
    std::array<uint64_t, codec::kNumPageFormats> pages{};
    for (const auto& sp : plan.splits)
      for (int e = sp.entry_begin; e < sp.entry_end; ++e)
        pages[sp.format] = std::max<uint64_t>(pages[sp.format], plan.entries[e].page_id + 1ull);
    tp.tma = encode_maps(tp.k_map, tp.v_map, codec::PageFormat::kBf16, pools, shape_, tp.box_rows, pages[bf16]) ? 1 : 0;
    tp.tma8 = encode_maps(tp.k8_map, tp.v8_map, codec::PageFormat::kFp8, pools, shape_, tp.box_rows, pages[fp8]) ? 1 : 0;
    tp.tma3 = encode_maps(tp.k3_map, tp.v3_map, codec::PageFormat::kTq3, pools, shape_, tp.box_rows, pages[tq3f]) ? 1 : 0;
  }
  switch (shape_.head_dim) {
    case 64:
      launch_prefill<64>(p, direct ? &tp : nullptr, others, max_pages, tq3, kernel_, stream);
      break;
    case 128:
      launch_prefill<128>(p, direct ? &tp : nullptr, others, max_pages, tq3, kernel_, stream);
      break;
    default:
      launch_prefill<256>(p, direct ? &tp : nullptr, others, max_pages, tq3, kernel_, stream);
      break;
  }
  check(cudaGetLastError(), "PrefillWorkspace::run");
  return st;
}

}  // namespace minimakv::cuda
