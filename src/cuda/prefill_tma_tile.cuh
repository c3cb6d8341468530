// The prefill CTA for BF16, FP8 and TQ3 pages on Hopper (PrefillKernel::kTma; paged_prefill.cu launches
// it; TQ3 at head_dim 128 and 256): one query tile of one sequence against one key split of one format's
// pages for one KV head. TQ3: prefill_tma_tq3.cuh's producer decodes packed codes from a raw ring of
// its own (kRaw) into the same fp16 tiles, and the query tile is the rotated one. The bulk
// tensor copy engine (TMA) copies each K and V tile from the pages into shared memory, and the consumers
// run QK^T and PV as wgmma on it: BF16 pages as bf16 operands with no decode pass (what FlashAttention
// and PyTorch's SDPA compute for a BF16 model), FP8 codes widened in place to fp16 operands by the
// producer warpgroup (prefill_tma_fp8.cuh), so a tile costs the producer a few instructions, or one
// conversion pass through shared memory, instead of a copy and a decode per row.
//
// Owns: the tiling and shared-memory layout of this CTA (TmaTile), its launch parameters (the pools'
// tensor maps) and the BF16 producer warpgroup. The FP8 producer: prefill_tma_fp8.cuh; the TQ3
// producer: prefill_tma_tq3.cuh; the consumers: prefill_tma_consume.cuh.
// Layout: every operand is stored as blocks of 64 columns (128 bytes a row), rows consecutive, a row's
// 16-byte chunks permuted by XOR with the row index mod 8 (the copy engine's SWIZZLE_128B, which the
// wgmma descriptors name); Q as kRows rows (one block after the other, one or two query terms), K and V
// of a stage as kKeys rows each. K and V have stages of their own (kKStages, kVStages: K may take one
// more, see MINIMAKV_PREFILL_TMA_KV_SPLIT). Per K stage: K, the keys' positions, plan entries and K
// scales, the TQ3 raw ring's K codes (kRawHalf bytes, TQ3 only) and three mbarriers (full, empty, and
// the widening producers' raw arrivals); per V stage: V, the raw ring's V codes and three mbarriers.
// Hand-off: the producer announces each tile's K with its positions on FULL_K and its V on FULL_V (one
// arrival each by the BF16 producer's first thread; one per thread by the widening producers, see
// publish_widened); consumer warps arrive on EMPTY_K once the softmax that reads the
// positions is done and on EMPTY_V after PV. (Positions ride with K so that a softmax never waits for
// its tile's V to arrive.) A tile the copy engine cannot fill exactly (rows of a partly written page,
// padding pages at a split's end, or a page layout the tensor map does not cover) is copied by every
// producer thread with zero-filling cp.async instead, into the same layout, and published after a fence
// and the producers' barrier.
// Invariants: as prefill_tile.cuh's (keys in increasing position order, key tiles trimmed to the last
// visible key, masked keys at -inf, padding rows zero), and every tile base is 1024-byte aligned.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "prefill_produce.cuh"
#include "prefill_tile.cuh"
#include "tma.cuh"

namespace minimakv::cuda::detail {

struct PrefillTmaParams {
  PrefillParams p;
  CUtensorMap k_map, v_map;      // BF16 pool as [page][head][token][dim]; boxes of 64 dims x box_rows tokens
  CUtensorMap k8_map, v8_map;    // FP8 pool's codes as bytes, the same order; boxes of <= 128 codes
  CUtensorMap k3_map, v3_map;    // TQ3 pool's packed codes as bytes, the same order; boxes of 128 codes
  int box_rows;                  // tokens of one box: the key tile, or the page where pages are shorter
  int tma, tma8, tma3;           // 0: the pool's layout does not suit a tensor map, every tile by cp.async
};

// QK^T over FP8 pages as E4M3 wgmma (head_dim 128 and 256): the copy engine's raw K codes are the
// operand itself, so the FP8 producer widens only V; the query goes in as kFp8QTerms E4M3 terms (hi, then
// what each term left) of a per-row power-of-two scaling, undone on the logits. Three terms keep about
// 12 bits of each query element, more than the one fp16 term of the other formats; four with page
// scores. Kernel-lab switch, off by default (K widened, QK^T on fp16): on an H100 it measured 2-3x
// further from the fp64 reference (the FP8 tensor cores do not accumulate in full fp32) and at most
// 3.7% faster with two terms, 4% slower with three (docs/benchmarks.md).
// MINIMAKV_PREFILL_FP8_QK_TERMS sets the term count.
#ifndef MINIMAKV_PREFILL_FP8_QK
#define MINIMAKV_PREFILL_FP8_QK 0
#endif
#ifndef MINIMAKV_PREFILL_FP8_QK_TERMS
#define MINIMAKV_PREFILL_FP8_QK_TERMS 3
#endif
template <codec::PageFormat F, int D>
inline constexpr bool kFp8QkWgmma = MINIMAKV_PREFILL_FP8_QK != 0 && F == codec::PageFormat::kFp8 && D >= 128;

// Key scales applied by the widening producers (kernel-lab switch, default on; 0 measured 1-5% slower
// on FP8 pages and 0-2% on mixed ones, docs/benchmarks.md): FP8 K rows widened
// times their scale, TQ3 K rows times their alpha, both rounded once to fp16 as V rows are, so that the
// consumers' softmax is the BF16 one (no per-key scale loads or multiplies on the path to the row
// maxima). One query term only: with page scores the logits keep the scales in fp32.
#ifndef MINIMAKV_PREFILL_K_SCALED
#define MINIMAKV_PREFILL_K_SCALED 1
#endif
template <codec::PageFormat F, int D, int QT>
inline constexpr bool kKeyScaledByProducer = MINIMAKV_PREFILL_K_SCALED != 0 && QT == 1 && !kFp8QkWgmma<F, D> &&
                                             (F == codec::PageFormat::kFp8 || F == codec::PageFormat::kTq3);

// FP8 codes through a raw ring of their own (head_dim 128 with one query term, where it fits; default
// on): prefill_produce_fp8_ring (prefill_tma_fp8.cuh) instead of the in-place widening, which 0 keeps
// (10-16% slower FP8 prefill on an H100, docs/benchmarks.md).
#ifndef MINIMAKV_PREFILL_FP8_RING
#define MINIMAKV_PREFILL_FP8_RING 1
#endif

// K and V stage counts (kernel-lab switch): 1, K may take one stage more than V where three of each do
// not fit (three K and two V stages at head_dim 128 and 256 for BF16 and FP8 pages with one query term),
// so the copy of the tile the next QK^T needs may run further ahead; 0 (default), equal counts (two of
// each there). On an H100 the extra K stage lost: BF16 8% slower at head_dim 128 and 10% at 256, FP8
// 1-5% (docs/benchmarks.md).
#ifndef MINIMAKV_PREFILL_TMA_KV_SPLIT
#define MINIMAKV_PREFILL_TMA_KV_SPLIT 0
#endif

template <int D, int QT, codec::PageFormat F>
struct TmaTile {
  // 128 rows, two consumer warpgroups (at head_dim 256 too, where each holds a 64 x 256 fp32 output);
  // 64, one warpgroup, where two query terms or E4M3 terms at head_dim 256 would not fit beside two
  // K/V stages: that CTA takes the plan tile in two parts (PrefillParams::tile_rows).
  static constexpr int kRows = D > 128 && (QT == 2 || kFp8QkWgmma<F, D>) ? 64 : prefill_tma_tile_rows(D);
  static constexpr int kKeys = prefill_tma_key_tile(D);
  static constexpr int kGroups = kRows / 64;
  static constexpr int kConsumerWarps = 4 * kGroups;
  static constexpr int kConsumers = 32 * kConsumerWarps;
  static constexpr int kThreads = kConsumers + 128;  // + one producer warpgroup
  static constexpr int kBlocks = D / 64;              // 64-column blocks of a row
  static constexpr uint32_t kQBlock = kRows * 128, kKvBlock = kKeys * 128;  // bytes of one column block
  static constexpr uint32_t kQTerm = kRows * D * 2;                         // one query term
  static constexpr int kFp8QTerms = QT == 2 ? 4 : MINIMAKV_PREFILL_FP8_QK_TERMS;  // E4M3 query terms
  static constexpr uint32_t kQTerm8 = kRows * D;                                  // one E4M3 query term
  // The query region: QT fp16 or bf16 terms, or (head_dim >= 128, when the FP8 CTA multiplies in E4M3)
  // kFp8QTerms E4M3 terms, whichever is larger.
  static constexpr bool kE4m3Query = kFp8QkWgmma<F, D>;
  static constexpr uint32_t kQBytes = kE4m3Query ? std::max(QT * kQTerm, kFp8QTerms * kQTerm8) : QT * kQTerm;
  static constexpr uint32_t kHalfTile = kKeys * D * 2;                      // K or V of one stage
  static constexpr uint32_t kMetaBytes = kKeys * 12 + 16;  // kpos[kKeys], kent[kKeys], kscale[kKeys], maxpos[4]
  // TQ3 codes of one K or V tile (the raw ring, TQ3 pages only: FP8 codes land in their fp16 buffer).
  static constexpr uint32_t kRawHalf = F == codec::PageFormat::kTq3 ? kKeys * 3 * D / 8 : 0;
  static constexpr uint32_t kQScaleBytes = kE4m3Query ? kRows * 4 : 0;  // E4M3 rows' 1 / scale
  // Per K stage: its buffer, meta, raw codes and three barriers; per V stage: its buffer, raw codes and
  // three barriers; + the query rows' scales, the meta's alignment and the base's.
  static constexpr size_t stage_bytes(int k_stages, int v_stages) {
    return kQBytes + k_stages * (kHalfTile + kMetaBytes + kRawHalf + 24) + v_stages * (kHalfTile + kRawHalf + 24) +
           kQScaleBytes + 128 + 1024;
  }
  static constexpr size_t kLimit = 227 * 1024;
  // The TQ3 producer's ring holds K and V codes of a tile together, so its stages stay paired.
  static constexpr bool kSplit = MINIMAKV_PREFILL_TMA_KV_SPLIT != 0 && F != codec::PageFormat::kTq3;
  static constexpr int kKStages = stage_bytes(3, 3) <= kLimit || (kSplit && stage_bytes(3, 2) <= kLimit) ? 3 : 2;
  static constexpr int kVStages = stage_bytes(3, 3) <= kLimit ? 3 : 2;
  static constexpr int kLag = kKStages - kVStages;  // tiles by which the producers' V trails their K
  static constexpr uint32_t kQ = 0, kK = kQBytes;  // K of stage b at kK + b halves; the V stages after them
  static constexpr uint32_t kV = kK + kKStages * kHalfTile;
  static constexpr uint32_t kMeta = kV + kVStages * kHalfTile;
  // The FP8 raw ring (MINIMAKV_PREFILL_FP8_RING): kFp8RingK K and kFp8RingV V stages of a tile's raw
  // codes (kKeys rows of 128 bytes each), 1 KiB-aligned for the copy engine's 128-byte swizzle. One query
  // term only: two (page scores) leave no room for it.
  static constexpr bool kFp8Ring = MINIMAKV_PREFILL_FP8_RING != 0 && F == codec::PageFormat::kFp8 && D == 128 && QT == 1 &&
                                   !kFp8QkWgmma<F, D> && kKStages == 2 && kVStages == 2;
  static constexpr int kFp8RingK = kFp8Ring ? 2 : 0, kFp8RingV = kFp8Ring ? 1 : 0;
  static constexpr uint32_t kMetaEnd = kMeta + kKStages * kMetaBytes;
  static constexpr uint32_t kFp8RingAt = (kMetaEnd + 1023) / 1024 * 1024;
  static constexpr uint32_t kRaw = kFp8Ring ? kFp8RingAt + (kFp8RingK + kFp8RingV) * kKeys * 128
                                            : (kMetaEnd + 127) / 128 * 128;  // TQ3: K stages', then V's
  static constexpr uint32_t kBars = kRaw + (kKStages + kVStages) * kRawHalf;
  static constexpr uint32_t kQScale = kBars + (kKStages + kVStages) * 24;  // per query row: 1 / its E4M3 scaling
  static constexpr size_t kBytes = kQScale + kQScaleBytes + 1024;  // + slack to align the base to 1024
  static_assert(kK % 1024 == 0 && kHalfTile % 1024 == 0 && kBars % 8 == 0 && kBytes <= kLimit);
  static_assert(kLag == 0 || kLag == 1);
  static constexpr int kConsumersBar = 1, kProducersBar = 2;  // named barrier ids (0 is __syncthreads)

  // Byte offset of 16-byte chunk c (elements 8c..8c+7) of row r in an operand of `rows` rows.
  __device__ static constexpr uint32_t chunk(int rows, int r, int c) {
    return static_cast<uint32_t>((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
  }
  // Tile t's K stage and V stage, and the parity of each stage's phase that tile t uses.
  __device__ static constexpr int k_stage(int t) { return t % kKStages; }
  __device__ static constexpr int v_stage(int t) { return t % kVStages; }
  __device__ static constexpr uint32_t k_parity(int t) { return (t / kKStages) & 1; }
  __device__ static constexpr uint32_t v_parity(int t) { return (t / kVStages) & 1; }
  __device__ static constexpr uint32_t k_tile(int b) { return kK + b * kHalfTile; }
  __device__ static constexpr uint32_t v_tile(int b) { return kV + b * kHalfTile; }
  __device__ static constexpr uint32_t meta(int b) { return kMeta + b * kMetaBytes; }
  __device__ static constexpr uint32_t raw_k_tile(int b) { return kRaw + b * kRawHalf; }
  __device__ static constexpr uint32_t raw_v_tile(int b) { return kRaw + (kKStages + b) * kRawHalf; }
  __device__ static constexpr uint32_t fp8_ring_k(int b) { return kFp8RingAt + b * kKeys * 128; }
  __device__ static constexpr uint32_t fp8_ring_v() { return kFp8RingAt + kFp8RingK * kKeys * 128; }
  // Barriers: three per K stage (full, empty, raw), then three per V stage.
  __device__ static constexpr uint32_t full_k(int b) { return kBars + 24 * b; }
  __device__ static constexpr uint32_t empty_k(int b) { return kBars + 24 * b + 8; }
  __device__ static constexpr uint32_t raw_k(int b) { return kBars + 24 * b + 16; }
  __device__ static constexpr uint32_t full_v(int b) { return kBars + 24 * (kKStages + b); }
  __device__ static constexpr uint32_t empty_v(int b) { return kBars + 24 * (kKStages + b) + 8; }
  __device__ static constexpr uint32_t raw_v(int b) { return kBars + 24 * (kKStages + b) + 16; }
  // Meta of a stage, as ints: kpos at 0, kent at kKeys, kscale (floats) at 2 kKeys, maxpos[4] at 3 kKeys.
  static constexpr int kEnt = kKeys, kScale = 2 * kKeys, kMaxPos = 3 * kKeys;
};

// Where the copy engine puts an FP8 tile's raw codes in its K or V buffer (prefill_tma_fp8.cuh widens
// them in place; the lab's E4M3 QK^T reads K's there): boxes of kRowBytes-byte rows, box b of a tile of
// `keys` rows at box_at(keys, b): the boxes one after the other in the buffer's upper half. At head_dim
// 128 the one box is then column block 1, the block its upper 64 fp16 values fill (kBlockPerBox), so
// a producer widens its row without waiting for another. Kernel lab: MINIMAKV_PREFILL_FP8_RAW_BLOCKS=1
// puts head_dim 256's box b on column block 2b + 1 as well (no producer barrier; lost on an H100:
// FP8 2-4% slower, mixed 1-2%, docs/benchmarks.md).
#ifndef MINIMAKV_PREFILL_FP8_RAW_BLOCKS
#define MINIMAKV_PREFILL_FP8_RAW_BLOCKS 0
#endif
template <int D>
struct Fp8Raw {
  static constexpr int kRowBytes = D < 128 ? D : 128;  // bytes of one box row
  static constexpr int kChunks = kRowBytes / 16;       // raw 16-byte chunks a thread owns
  // Box b's row j is row j of the fp16 tile's column block 2b + 1 (head_dim 128 always).
  static constexpr bool kBlockPerBox = D == 128 || (D > 128 && MINIMAKV_PREFILL_FP8_RAW_BLOCKS != 0);
  __device__ static constexpr int swz(int j) { return kRowBytes == 128 ? (j & 7) : ((j >> 1) & 3); }
  __device__ static constexpr uint32_t box_at(int keys, int b) {
    return kBlockPerBox ? static_cast<uint32_t>((2 * b + 1) * keys * 128)
                        : static_cast<uint32_t>(keys * D + b * keys * kRowBytes);
  }
};

// How the widening producers (FP8, TQ3) publish a tile: 1, every producer thread arrives on the FULL
// barrier after its own proxy fence, so no producer waits for another; 0 (kernel lab), the producers
// meet at their named barrier and the first thread arrives once, as the BF16 producer does.
#ifndef MINIMAKV_PREFILL_PUBLISH_BY_EACH
#define MINIMAKV_PREFILL_PUBLISH_BY_EACH 1
#endif
inline constexpr bool kPublishByEach = MINIMAKV_PREFILL_PUBLISH_BY_EACH != 0;

// Arrivals that complete a FULL barrier's phase: one (the BF16 producer's first thread, with the copy
// engine's bytes), or every producer thread where widening producers publish by each.
template <class T>
__device__ constexpr int full_arrivals(bool widening) {
  return widening && kPublishByEach ? 128 : 1;
}

// A widening producer's hand-off of the rows it wrote (and the meta) on FULL barrier `full`: the tensor
// cores read them through the async proxy.
template <class T>
__device__ inline void publish_widened(uint32_t sbase, uint32_t full, int pt) {
  fence_proxy_async();
  if constexpr (kPublishByEach) {
    mbarrier_arrive(sbase + full);
  } else {
    named_sync(T::kProducersBar, 128);
    if (pt == 0) mbarrier_arrive(sbase + full);
  }
}

// One thread initialises the barriers; the CTA barrier after it publishes them.
template <class T>
__device__ void init_tma_barriers(uint32_t sbase, int full_count) {
  if (threadIdx.x == 0) {
    for (int b = 0; b < T::kKStages; ++b) {
      mbarrier_init(sbase + T::full_k(b), full_count);
      mbarrier_init(sbase + T::empty_k(b), T::kConsumerWarps);
      mbarrier_init(sbase + T::raw_k(b), 1);
    }
    for (int b = 0; b < T::kVStages; ++b) {
      mbarrier_init(sbase + T::full_v(b), full_count);
      mbarrier_init(sbase + T::empty_v(b), T::kConsumerWarps);
      mbarrier_init(sbase + T::raw_v(b), 1);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
}

// Two floats as a pair of 16-bit operands (bf16 or fp16, round to nearest), and back.
template <class E>
__device__ inline uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    return pack_bf162(lo, hi);
  else
    return pack_half2(lo, hi);
}
template <class E>
__device__ inline float2 unpack_pair(uint32_t x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    return make_float2(bf16_lo(x), bf16_hi(x));
  else
    return __half22float2(*reinterpret_cast<const __half2*>(&x));
}

// The query tile (rotated for TQ3 pages), pre-scaled so that logits come out in base 2, as E (bf16 or
// fp16; hi [+ lo]) in the swizzled layout, staged by the consumer threads and handed to them all through
// the consumers' barrier.
template <class T, class E, int D, int QT>
__device__ void stage_query_tma(const PrefillParams& p, const PrefillWork& c, const float* qsrc, uint8_t* smem) {
  const float qscale = p.scale * kLog2e;
  const int tile_rows = min(p.tile_tokens, c.sq.n - c.wk.tile_token);
  for (int i = threadIdx.x; i < T::kRows * (D / 4); i += T::kConsumers) {
    const int r = i / (D / 4), d4 = 4 * (i % (D / 4));
    const float4 x = load_query4<D>(p, c, qsrc, r, d4, tile_rows, qscale);
    const uint32_t h0 = pack_pair<E>(x.x, x.y), h1 = pack_pair<E>(x.z, x.w);
    uint8_t* dst = smem + T::kQ + T::chunk(T::kRows, r, d4 / 8) + (d4 % 8) * 2;
    *reinterpret_cast<uint2*>(dst) = make_uint2(h0, h1);
    if constexpr (QT == 2) {
      const float2 f0 = unpack_pair<E>(h0), f1 = unpack_pair<E>(h1);
      *reinterpret_cast<uint2*>(dst + T::kQTerm) =
          make_uint2(pack_pair<E>(x.x - f0.x, x.y - f0.y), pack_pair<E>(x.z - f1.x, x.w - f1.y));
    }
  }
  fence_proxy_async();
  named_sync(T::kConsumersBar, T::kConsumers);
}

// The query tile for E4M3 QK^T (kFp8QkWgmma): each row, pre-scaled for base-2 logits as above, times a
// power of two s that puts its largest magnitude in [128, 256), as kFp8QTerms E4M3 terms (term i rounds
// what terms 0..i-1 left, so the sum keeps about 4 (i + 1) bits), in the swizzled layout with rows of
// D bytes (blocks of 128 dims); 1 / s per row at kQScale, for the softmax. One warp a row: the lanes'
// magnitudes meet in one reduction. Non-finite elements stay non-finite (no saturation: E4M3 has no
// infinity, so they become NaN, as the logits they would give).
template <class T, int D>
__device__ void stage_query_fp8(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  constexpr int V = D / 128;  // four-element groups of a row per lane
  const float qscale = p.scale * kLog2e;
  const int tile_rows = min(p.tile_tokens, c.sq.n - c.wk.tile_token);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* inv = reinterpret_cast<float*>(smem + T::kQScale);
  for (int r = warp; r < T::kRows; r += T::kConsumerWarps) {
    float4 x[V];
    float amax = 0.0f;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      x[v] = load_query4<D>(p, c, p.q, r, 4 * lane + 128 * v, tile_rows, qscale);
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(x[v].x), fabsf(x[v].y)), fmaxf(fabsf(x[v].z), fabsf(x[v].w))));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    int e = 0;
    if (amax > 0.0f && amax <= 3.4e38f) frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1)
    const int k = min(max(8 - e, -126), 126);
    const float sc = ldexpf(1.0f, k);
    if (lane == 0) inv[r] = ldexpf(1.0f, -k);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int d4 = 4 * lane + 128 * v;
      float y[4] = {x[v].x * sc, x[v].y * sc, x[v].z * sc, x[v].w * sc};  // exact: sc is a power of two
      uint8_t* dst = smem + T::kQ + T::chunk(T::kRows, r, d4 / 16) + d4 % 16;
#pragma unroll
      for (int term = 0; term < T::kFp8QTerms; ++term) {
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_NOSAT, __NV_E4M3);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(y[2], y[3]), __NV_NOSAT, __NV_E4M3);
        const uint32_t w = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
        *reinterpret_cast<uint32_t*>(dst + term * T::kQTerm8) = w;
        const float2 fl = unpack_pair<__half>(fp8x2_to_half2(w)), fh = unpack_pair<__half>(fp8x2_to_half2(w >> 16));
        y[0] -= fl.x;  // exact: the rounding error of a coarser format
        y[1] -= fl.y;
        y[2] -= fh.x;
        y[3] -= fh.y;
      }
    }
  }
  fence_proxy_async();
  named_sync(T::kConsumersBar, T::kConsumers);
}

// ---- the producer warpgroup
// The page and first token of the copy-engine box that starts at key slot `key` of the split (a box
// never crosses a page: box_rows divides the page's slot).
struct BoxOrigin {
  int page, tok;
};
__device__ inline BoxOrigin box_origin(const PrefillWork& c, int key) {
  const int rel = key / c.slot;
  return {static_cast<int>(c.entries[c.sp.entry_begin + rel].page_id), c.sp.tok_begin + (key - rel * c.slot)};
}

// A producer warpgroup's view of one format's pool for its KV head: the layout (a reference into the
// launch's parameter bank, so its fields cost no registers), the pool's base, the head's offsets in the
// code and meta sections.
struct ProducerPool {
  const DeviceLayout& L;
  const uint8_t* base;
  size_t head_code, head_meta;

  __device__ ProducerPool(const PrefillParams& p, codec::PageFormat f, int h)
      : L(p.pools.layout[codec::format_index(f)]),
        base(p.pools.base[codec::format_index(f)]),
        head_code(static_cast<size_t>(h) * L.code_stride),
        head_meta(static_cast<size_t>(h) * L.meta_stride) {}

  // Byte `at` of key slot k's K (or V) code row; the pool's base for a padding slot, which a
  // zero-filling copy never reads.
  __device__ const uint8_t* row(const KeySlot& k, bool v, uint32_t at = 0) const {
    return k.page ? k.page + (v ? L.v_codes : 0u) + head_code + static_cast<size_t>(k.tok) * L.row + at : base;
  }
  // Key slot k's metadata M (FP8: the fp32 scale; TQ3: the fp16 alpha) in the section at `section`;
  // zero for a padding slot.
  template <class M>
  __device__ M meta(const KeySlot& k, uint32_t section) const {
    return k.page ? __ldg(reinterpret_cast<const M*>(k.page + section + head_meta + static_cast<size_t>(k.tok) * L.meta))
                  : M(0.0f);
  }
};

// This producer thread's key slot of the next tile, and the producers' vote (one barrier) on whether the
// copy engine fills the whole tile right: `mapped` (the pool has a tensor map) and every row holds one of
// its page's tokens or lies past the page's span (zeros); not when a row is a written page's unwritten
// row or a padding page past the split's end.
template <class T>
__device__ KeySlot next_tile_slot(KeyCursor& cursor, const PrefillWork& c, const ProducerPool& pool,
                                  int tokens_per_page, bool mapped, bool& by_tma) {
  const bool real_entry = c.sp.entry_begin + cursor.rel < c.sp.entry_end, past_span = cursor.in >= c.span;
  const KeySlot k = cursor.next(c, pool.base, pool.L.page_bytes, tokens_per_page, T::kKeys);
  by_tma = named_sync_and(T::kProducersBar, 128, mapped && real_entry && (past_span || k.page));
  return k;
}

// A stage's meta for producer thread pt's key j of the tile (pt < kKeys write it; every warp writes the
// largest position it saw, INT_MAX with padding, so the consumers can skip the causal mask).
template <class T>
__device__ void write_tma_meta(uint8_t* smem, int b, int pt, const KeySlot& k, float kscale) {
  int* meta = reinterpret_cast<int*>(smem + T::meta(b));
  const int j = pt % T::kKeys;
  if (pt < T::kKeys) {
    meta[j] = k.pos;
    meta[T::kEnt + j] = k.entry;
    reinterpret_cast<float*>(meta + T::kScale)[j] = kscale;
  }
  const int mx = __reduce_max_sync(0xffffffffu, k.pos);
  if ((pt & 31) == 0) meta[T::kMaxPos + pt / 32] = mx;
}

// Every thread follows one key of each tile (key pt mod kKeys) to write the tile's positions and, for a
// tile the copy engine cannot fill, to copy that key's K and V rows (at head_dim 256 the first half of
// the threads copy K rows and the second half V rows). The first thread issues the tensor copies. With
// one K stage more than V (kLag), step t fills K(t), then V(t - 1): the consumers free V(t - 1) before
// K(t) (V after the PV, K after the softmax that reads its positions), so V(t)'s stage frees after
// K(t + 1)'s; a V tile by cp.async then has the row's chunks split among the 128 / kKeys threads of
// its key.
template <int D, int QT>
__device__ void prefill_produce_bf16(const PrefillTmaParams& tp, const PrefillWork& c, uint8_t* smem) {
  using T = TmaTile<D, QT, codec::PageFormat::kBf16>;
  constexpr int K = T::kKeys, kLag = T::kLag;
  const PrefillParams& p = tp.p;
  const int pt = static_cast<int>(threadIdx.x) - T::kConsumers, j = pt % K;
  const ProducerPool pool(p, codec::PageFormat::kBf16, c.h);
  const uint32_t sbase = smem_u32(smem);
  if (pt == 0) {
    tma_prefetch_map(&tp.k_map);
    tma_prefetch_map(&tp.v_map);
  }
  // The copy engine's boxes of tile t into K or V of stage b: box_rows tokens of one page each.
  auto issue_boxes = [&](int t, const CUtensorMap* map, uint32_t dst, uint32_t bar) {
    for (int s = 0; s < K / tp.box_rows; ++s) {
      const BoxOrigin o = box_origin(c, t * K + s * tp.box_rows);
#pragma unroll
      for (int blk = 0; blk < T::kBlocks; ++blk)
        tma_load_4d(dst + blk * T::kKvBlock + s * tp.box_rows * 128, map, 64 * blk, o.tok, c.h, o.page, bar);
    }
  };
  // V of tile u once its stage is released: the consumers' release, then the copy engine's boxes.
  auto wait_v = [&](int u) {
    if (u >= T::kVStages) mbarrier_wait(sbase + T::empty_v(T::v_stage(u)), T::v_parity(u) ^ 1);
  };
  auto issue_v = [&](int u) {
    const int b = T::v_stage(u);
    mbarrier_arrive_expect_tx(sbase + T::full_v(b), T::kHalfTile);
    issue_boxes(u, &tp.v_map, sbase + T::v_tile(b), sbase + T::full_v(b));
  };
  // Rows this thread copied by cp.async, published once every producer's have landed.
  auto publish_copied = [&] {
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();  // the tensor cores read these rows through the async proxy
    named_sync(T::kProducersBar, 128);
  };
  // kLag: V of tile u (this thread's V row of it, whether the row is real, and the producers' vote).
  auto fill_v = [&](int u, const uint8_t* src, bool real, bool by_tma) {
    if (by_tma) {
      if (pt == 0) {
        wait_v(u);
        issue_v(u);
      }
    } else {
      constexpr int kPerRow = 128 / K, kChunks = D / 8 / kPerRow;
      const int c0 = (pt / K) * kChunks;
      wait_v(u);
#pragma unroll
      for (int cc = c0; cc < c0 + kChunks; ++cc)
        cp_async16_zfill(sbase + T::v_tile(T::v_stage(u)) + T::chunk(K, j, cc), src + 16 * cc, real);
      publish_copied();
      if (pt == 0) mbarrier_arrive(sbase + T::full_v(T::v_stage(u)));
    }
  };
  KeyCursor cursor(c, j);
  const int n = c.wk.key_tiles;
  const uint8_t* lag_row = pool.base;  // kLag: the V row, realness and vote of the tile whose V is next
  bool lag_real = false, lag_tma = false;
  for (int t = 0; t < n; ++t) {
    const int b = T::k_stage(t), bv = T::v_stage(t);
    bool by_tma;
    const KeySlot k = next_tile_slot<T>(cursor, c, pool, p.tokens_per_page, tp.tma, by_tma);  // this thread's key
    if (t >= T::kKStages) mbarrier_wait(sbase + T::empty_k(b), T::k_parity(t) ^ 1);
    write_tma_meta<T>(smem, b, pt, k, 1.0f);
    if (by_tma) {
      named_sync(T::kProducersBar, 128);  // the meta is written before the first thread's arrival
      if (pt == 0) {
        mbarrier_arrive_expect_tx(sbase + T::full_k(b), T::kHalfTile);
        issue_boxes(t, &tp.k_map, sbase + T::k_tile(b), sbase + T::full_k(b));
        if constexpr (kLag == 0) {
          wait_v(t);
          issue_v(t);
        }
      }
    } else {
      if constexpr (kLag == 0) wait_v(t);
#pragma unroll
      for (int r = 0; r < 2 * K / 128; ++r) {
        const int row = pt + 128 * r;
        const bool is_v = row >= K;
        if (kLag == 1 && is_v) continue;  // V follows in the next step
        const uint8_t* src = pool.row(k, is_v);
        const uint32_t dst = sbase + (is_v ? T::v_tile(bv) : T::k_tile(b));
#pragma unroll
        for (int cc = 0; cc < D / 8; ++cc) cp_async16_zfill(dst + T::chunk(K, j, cc), src + 16 * cc, k.page != nullptr);
      }
      publish_copied();
      if (pt == 0) {
        mbarrier_arrive(sbase + T::full_k(b));
        if constexpr (kLag == 0) mbarrier_arrive(sbase + T::full_v(bv));
      }
    }
    if constexpr (kLag == 1) {
      if (t > 0) fill_v(t - 1, lag_row, lag_real, lag_tma);
      lag_row = pool.row(k, true);
      lag_real = k.page != nullptr;
      lag_tma = by_tma;
    }
  }
  if constexpr (kLag == 1)
    if (n > 0) fill_v(n - 1, lag_row, lag_real, lag_tma);
}

}  // namespace minimakv::cuda::detail
