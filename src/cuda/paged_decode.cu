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
#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/paged_decode.h"

namespace minimakv::cuda {

namespace {

using namespace detail;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

struct StepParams : AttendParams {
  const uint8_t* plan;
  uint32_t off_seq, off_split, off_entry;
};

// The plan blob's header: {splits of every format, batch, entries, 0}.
__device__ inline int plan_batch(const uint8_t* plan) {
  return reinterpret_cast<const int32_t*>(plan)[1];
}

constexpr int kTile = 32;  // tokens per warp tile: one per lane for QK

template <int GM, int N>
__device__ inline void dot_chunk(const float* qs, int D, int c, const float (&x)[N], float (&s)[GM]) {
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    const float4* q4 = reinterpret_cast<const float4*>(qs + g * D + c);
#pragma unroll
    for (int e = 0; e < N; e += 4) {
      const float4 qv = q4[e / 4];
      s[g] += qv.x * x[e] + qv.y * x[e + 1] + qv.z * x[e + 2] + qv.w * x[e + 3];
    }
  }
}

// Shared-memory row strides of the staged K and V tiles. On the FMA path a lane reads its own token's K
// row in 16-byte (TQ3 at head_dim 64: 8-byte) pieces, so the K stride is an odd number of pieces (no
// bank conflicts among the lanes of a phase); lanes read disjoint slices of one V row, so V rows are
// packed. On the tensor-core path lanes (g, t) read 4 bytes at 16 ks + 4 t of K rows g and g + 8 (FP8),
// which the same K stride keeps on 32 banks, and word 8 k + g of V rows t + 4 j, for which FP8 V rows
// are padded by kVPad = 32 bytes (a stride of 8 mod 32 words).
template <codec::PageFormat F, int D, int kVPad = 0>
struct TileGeom {
  static constexpr int kRow = static_cast<int>(codec::format_row_bytes(F, D));
  static constexpr int kPiece = kRow % 16 == 0 ? 16 : 8;
  static constexpr int kKStride = (kRow / kPiece) % 2 == 1 ? kRow : kRow + kPiece;
  static constexpr int kVStride = kRow + kVPad;
  static constexpr int kWarpBytes = kTile * (kKStride + kVStride);
};

// s[g] = <q_g, K row> for one staged BF16 row; one lane per token.
template <int D, int GM>
__device__ inline void qk_row_bf16(const uint8_t* row, const float* qs, float (&s)[GM]) {
#pragma unroll
  for (int g = 0; g < GM; ++g) s[g] = 0.0f;
#pragma unroll 4
  for (int b = 0; b < 2 * D; b += 16) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + b);
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float x[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(ws[i] << 16);
      x[2 * i + 1] = __uint_as_float(ws[i] & 0xffff0000u);
    }
    dot_chunk<GM>(qs, D, b / 2, x, s);
  }
}

// Starts the asynchronous copy of rows [0, n) of a K tile and a V tile into this warp's stage.
template <class TG>
__device__ inline void stage_tile(const uint8_t* k_rows, const uint8_t* v_rows, int n, uint8_t* stage) {
  constexpr int kPieces = TG::kRow / TG::kPiece;
  const int lane = threadIdx.x & 31;
  uint8_t* ks = stage;
  uint8_t* vs = stage + kTile * TG::kKStride;
  for (int pc = lane; pc < n * kPieces; pc += 32) {
    const int r = pc / kPieces, q = pc % kPieces;
    __pipeline_memcpy_async(ks + r * TG::kKStride + q * TG::kPiece, k_rows + r * TG::kRow + q * TG::kPiece, TG::kPiece);
    __pipeline_memcpy_async(vs + r * TG::kVStride + q * TG::kPiece, v_rows + r * TG::kRow + q * TG::kPiece, TG::kPiece);
  }
  __pipeline_commit();
}

// The E = D / 32 elements [E lane, E lane + E) of one staged BF16 V row.
template <int D>
__device__ inline void load_v_slice_bf16(const uint8_t* row, int lane, float (&x)[D / 32]) {
  constexpr int E = D / 32;
  uint32_t ws[E / 2];
  if constexpr (E == 8) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + 16 * lane);
    ws[0] = w.x;
    ws[1] = w.y;
    ws[2] = w.z;
    ws[3] = w.w;
  } else if constexpr (E == 4) {
    const uint2 w = *reinterpret_cast<const uint2*>(row + 8 * lane);
    ws[0] = w.x;
    ws[1] = w.y;
  } else {
    ws[0] = *reinterpret_cast<const uint32_t*>(row + 4 * lane);
  }
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    x[2 * i] = __uint_as_float(ws[i] << 16);
    x[2 * i + 1] = __uint_as_float(ws[i] & 0xffff0000u);
  }
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// End of one entry's pages scores: every warp has put its (m, l) per query head in red_m / red_l; the
// first G threads merge them and write the page's (m_p, l_p) in natural log. Block-wide (all threads).
template <int GM>
__device__ inline void write_page_stats(const StepParams& p, int ei, const float (*red_m)[GM],
                                        const float (*red_l)[GM]) {
  __syncthreads();
  const int G = p.group;
  if (static_cast<int>(threadIdx.x) < G) {
    const int g = threadIdx.x;
    float mm = -INFINITY, ll = 0.0f, c1, c2;
    for (int w = 0; w < kWarps; ++w) merge_ml(mm, ll, red_m[w][g], red_l[w][g], c1, c2);
    const size_t o = static_cast<size_t>(ei) * p.q_heads + static_cast<size_t>(blockIdx.y) * G + g;
    p.page_m[o] = ll > 0.0f ? mm * kLn2 : -INFINITY;
    p.page_l[o] = ll;
  }
  __syncthreads();
}

// End of a split: every warp has put its (m, l) per query head and its unnormalised output rows in
// red_m / red_l / red_acc; they are merged in warp order and written as the split's normalised partial.
// Block-wide (all threads).
template <int D, int GM>
__device__ inline void write_partials(const StepParams& p, int split, const float (*red_m)[GM],
                                      const float (*red_l)[GM], const float (*red_acc)[GM][D]) {
  __syncthreads();
  const int G = p.group;
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    float mm = -INFINITY, ll = 0.0f, a = 0.0f, c1, c2;
    for (int w = 0; w < kWarps; ++w) {
      merge_ml(mm, ll, red_m[w][g], red_l[w][g], c1, c2);
      a = a * c1 + red_acc[w][g][d] * c2;
    }
    const size_t qh = static_cast<size_t>(split) * p.q_heads + static_cast<size_t>(blockIdx.y) * G + g;
    p.part_o[qh * D + d] = ll > 0.0f ? a / ll : 0.0f;
    if (d == 0) {
      p.part_m[qh] = ll > 0.0f ? mm * kLn2 : -INFINITY;
      p.part_l[qh] = ll;
    }
  }
}

// One plan entry's rows for KV head h (K and V codes, K and V row scales) and the end of the token
// range the split reads of it.
struct EntryRows {
  const uint8_t *kc, *vc, *km, *vm;
  int t_end;
};

__device__ inline EntryRows entry_rows(const DeviceLayout& L, const uint8_t* base, const PlanEntry& en,
                                       const PlanSplit& sp, int h) {
  const uint8_t* page = base + static_cast<size_t>(en.page_id) * L.page_bytes;
  return {page + static_cast<size_t>(h) * L.code_stride, page + L.v_codes + static_cast<size_t>(h) * L.code_stride,
          page + L.k_meta + static_cast<size_t>(h) * L.meta_stride,
          page + L.v_meta + static_cast<size_t>(h) * L.meta_stride, min(sp.tok_end, static_cast<int>(en.tokens))};
}

// The warps take a split's tiles round-robin across its pages, not afresh on each page: a split of
// short pages (two 64-token pages) then gives every warp one tile instead of two to half the warps.
// Returns this warp's first tile of an entry whose range ends at t_end; tiles_before counts the
// split's tiles in the entries before it and is advanced past this one.
__device__ inline int first_tile(const PlanSplit& sp, int t_end, int warp, int& tiles_before) {
  const int first = (warp - tiles_before % kWarps + kWarps) % kWarps;
  tiles_before += (max(0, t_end - sp.tok_begin) + kTile - 1) / kTile;
  return sp.tok_begin + first * kTile;
}

constexpr codec::PageFormat kBf16 = codec::PageFormat::kBf16;

// Dynamic shared memory of the BF16 split body: [qs | ps | red_m | red_l | stage or red_acc].
template <int D, int GM>
struct SplitSmem {
  static constexpr size_t kQs = 0;
  static constexpr size_t kPs = kQs + sizeof(float) * GM * D;
  static constexpr size_t kRedM = kPs + sizeof(float) * kWarps * kTile * GM;
  static constexpr size_t kRedL = kRedM + sizeof(float) * kWarps * GM;
  static constexpr size_t kStage = (kRedL + sizeof(float) * kWarps * GM + 15) / 16 * 16;
  static constexpr size_t kStageBytes = static_cast<size_t>(kWarps) * TileGeom<kBf16, D>::kWarpBytes;
  static constexpr size_t kRedAccBytes = sizeof(float) * kWarps * GM * D;
  static constexpr size_t kBytes = kStage + (kStageBytes > kRedAccBytes ? kStageBytes : kRedAccBytes);
};

// One BF16 split (the dense baseline) for KV head blockIdx.y; all query heads of the GQA group, in fp32
// FMAs. Per warp: tiles of 32 tokens whose K and V rows are copied to shared memory asynchronously in
// one round trip; QK with one lane per token; the tile's max and one rescale per tile (base-2
// exponentials, so the natural-log partials are m * ln 2); PV with each lane owning D / 32 output
// elements.
template <int D, int GM>
__device__ __forceinline__ void attend_split_bf16(const StepParams& p, int split, uint8_t* smem) {
  constexpr codec::PageFormat F = kBf16;
  using SM = SplitSmem<D, GM>;
  using TG = TileGeom<F, D>;
  constexpr int E = D / 32;
  float* qs = reinterpret_cast<float*>(smem + SM::kQs);
  auto* ps = reinterpret_cast<float(*)[kTile][GM]>(smem + SM::kPs);
  auto* red_m = reinterpret_cast<float(*)[GM]>(smem + SM::kRedM);
  auto* red_l = reinterpret_cast<float(*)[GM]>(smem + SM::kRedL);
  const PlanSplit sp = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split)[split];
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint8_t* stage = smem + SM::kStage + static_cast<size_t>(warp) * TG::kWarpBytes;
  const uint8_t* st_k = stage;
  const uint8_t* st_v = stage + kTile * TG::kKStride;
  const int G = p.group;
  const size_t qbase = (static_cast<size_t>(sp.seq) * p.q_heads + static_cast<size_t>(h) * G) * D;
  const float qscale = p.scale * kLog2e;
  for (int i = threadIdx.x; i < GM * D; i += kThreads) qs[i] = i / D < G ? p.q[qbase + i] * qscale : 0.0f;
  __syncthreads();
  const DeviceLayout L = p.pools.layout[codec::format_index(F)];
  const uint8_t* base = p.pools.base[codec::format_index(F)];
  const auto* entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  float m[GM], lsum[GM], acc[GM][E];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY;
    lsum[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  const bool want_pages = p.page_m != nullptr;
  int tiles_before = 0;  // see first_tile
  for (int ei = sp.entry_begin; ei < sp.entry_end; ++ei) {
    const EntryRows er = entry_rows(L, base, entries[ei], sp, h);
    const uint8_t *kc = er.kc, *vc = er.vc, *km = er.km, *vm = er.vm;
    const int t_end = er.t_end;
    float pm[GM], pl[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      pm[g] = -INFINITY;
      pl[g] = 0.0f;
    }
    for (int tile = first_tile(sp, t_end, warp, tiles_before); tile < t_end; tile += kWarps * kTile) {
      const int n = min(kTile, t_end - tile);
      stage_tile<TG>(kc + static_cast<size_t>(tile) * TG::kRow, vc + static_cast<size_t>(tile) * TG::kRow, n, stage);
      const int t = tile + lane;
      const bool valid = lane < n;
      const float ks = valid ? load_meta<F>(km + static_cast<size_t>(t) * L.meta) : 0.0f;
      const float vs = valid ? load_meta<F>(vm + static_cast<size_t>(t) * L.meta) : 0.0f;
      __pipeline_wait_prior(0);
      __syncwarp();
      float s[GM];
      if (valid) {
        qk_row_bf16<D, GM>(st_k + lane * TG::kKStride, qs, s);
#pragma unroll
        for (int g = 0; g < GM; ++g) s[g] *= ks;
      } else {
#pragma unroll
        for (int g = 0; g < GM; ++g) s[g] = -INFINITY;
      }
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        const float mn = fmaxf(m[g], warp_max(s[g]));  // finite: lane 0 of a tile is always valid
        const float c = exp2f(m[g] - mn);
        const float pr = valid ? exp2f(s[g] - mn) : 0.0f;
        lsum[g] = lsum[g] * c + pr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= c;
        m[g] = mn;
        ps[warp][lane][g] = pr * vs;
        if (want_pages) {
          float c1, c2;
          merge_ml(pm[g], pl[g], mn, warp_sum(pr), c1, c2);
        }
      }
      __syncwarp();
#pragma unroll 4
      for (int j = 0; j < n; ++j) {
        float vx[E];
        load_v_slice_bf16<D>(st_v + j * TG::kVStride, lane, vx);
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          const float pj = ps[warp][j][g];
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] += pj * vx[e];
        }
      }
      __syncwarp();
    }
    if (want_pages) {
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          red_m[warp][g] = pm[g];
          red_l[warp][g] = pl[g];
        }
      }
      write_page_stats<GM>(p, ei, red_m, red_l);
    }
  }
  // Combine the warps through shared memory (red_acc overlays the stages, so wait for every warp).
  __syncthreads();
  auto* red_acc = reinterpret_cast<float(*)[GM][D]>(smem + SM::kStage);
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    const float l = warp_sum(lsum[g]);
#pragma unroll
    for (int e = 0; e < E; ++e) red_acc[warp][g][lane * E + e] = acc[g][e];
    if (lane == 0) {
      red_m[warp][g] = m[g];
      red_l[warp][g] = l;
    }
  }
  write_partials<D, GM>(p, split, red_m, red_l, red_acc);
}

// ---- The tensor-core split body, for FP8 and TQ3 pages ----
//
// Per warp and 32-token tile, with the same plan, staging and partials as attend_split_bf16:
//   S = K Q^T on fp16 m16n8k16 tiles: rows are tokens (two blocks of 16), the 8 columns the group's
//   query heads (G <= 8; the rest zero). K codes are exact in fp16 (E4M3 values; TQ3 levels are fp16
//   values by construction, docs/formats.md); the query enters as hi + lo fp16 terms, two MMAs per
//   fragment, so the logits keep about fp32 accuracy.
//   O^T += V^T P^T: rows are head dims (D / 16 blocks), k the tile's tokens, P (times each token's V
//   scale) again as hi + lo terms. Fragments are read straight from the staged rows, no dense copy.
// The fragments' k order is a permutation of dims (QK) or tokens (PV), the same for both operands, and
// the output rows a permutation of dims undone when the warp's rows are written out.

constexpr int kMmaCols = 8;  // query heads per MMA tile: every supported GQA group fits

template <codec::PageFormat F, int D>
using MmaTileGeom = TileGeom<F, D, F == codec::PageFormat::kFp8 ? 32 : 0>;

// Dynamic shared memory: [query fragments | ps | red_m | red_l | TQ3 level pairs | stage or red_acc].
template <codec::PageFormat F, int D>
struct MmaSmem {
  static constexpr size_t kQf = 0;  // uint4 [D / 16][32]: per k-step and lane {hi01, hi23, lo01, lo23}
  static constexpr size_t kPs = kQf + sizeof(uint4) * (D / 16) * 32;
  static constexpr size_t kRedM = kPs + sizeof(float) * kWarps * kTile * kMmaCols;
  static constexpr size_t kRedL = kRedM + sizeof(float) * kWarps * kMmaCols;
  static constexpr size_t kPairs = kRedL + sizeof(float) * kWarps * kMmaCols;
  static constexpr size_t kStage = (kPairs + sizeof(uint32_t) * 64 + 15) / 16 * 16;
  static constexpr size_t kStageBytes = static_cast<size_t>(kWarps) * MmaTileGeom<F, D>::kWarpBytes;
  static constexpr size_t kRedAccBytes = sizeof(float) * kWarps * kMmaCols * D;
  static constexpr size_t kBytes = kStage + (kStageBytes > kRedAccBytes ? kStageBytes : kRedAccBytes);
};

// The first of the four consecutive dims that lane t's fragments hold in QK k-step ks. FP8: 16 ks + 4 t.
// TQ3: 64-code chunks, lane t taking codes [16 t, 16 t + 16) of each (48 contiguous bits), four per step.
template <codec::PageFormat F>
__device__ inline int qk_dim(int ks, int t) {
  if constexpr (F == codec::PageFormat::kFp8)
    return 16 * ks + 4 * t;
  else
    return 64 * (ks / 4) + 16 * t + 4 * (ks % 4);
}

// Codes [16 t, 16 t + 16) of 64-code chunk c of a staged TQ3 row, 3 bits each from bit 0.
__device__ inline uint64_t tq3_codes16(const uint8_t* row, int c, int t) {
  const auto* w = reinterpret_cast<const uint32_t*>(row) + 6 * c + ((3 * t) >> 1);
  const uint64_t v = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  return v >> (16 * (t & 1));
}

// The 12 bits of codes [d, d + 4) of a staged TQ3 row of D codes (d a multiple of 4).
template <int D>
__device__ inline uint32_t tq3_codes4(const uint8_t* row, int d) {
  constexpr int kWords = 3 * D / 32;
  const auto* w = reinterpret_cast<const uint32_t*>(row);
  const int bit = 3 * d, wi = bit >> 5;
  const uint32_t hi = wi + 1 < kWords ? w[wi + 1] : 0u;
  return __funnelshift_r(w[wi], hi, bit & 31) & 0xfffu;
}

template <codec::PageFormat F, int D>
__device__ __forceinline__ void attend_split_mma(const StepParams& p, int split, uint8_t* smem) {
  using SM = MmaSmem<F, D>;
  using TG = MmaTileGeom<F, D>;
  constexpr bool kTq3 = F == codec::PageFormat::kTq3;
  constexpr int MB = D / 16;  // QK k-steps; PV output row blocks
  auto* qf = reinterpret_cast<uint4*>(smem + SM::kQf);
  auto* ps = reinterpret_cast<float(*)[kTile][kMmaCols]>(smem + SM::kPs);
  auto* red_m = reinterpret_cast<float(*)[kMmaCols]>(smem + SM::kRedM);
  auto* red_l = reinterpret_cast<float(*)[kMmaCols]>(smem + SM::kRedL);
  auto* pairs = reinterpret_cast<uint32_t*>(smem + SM::kPairs);
  const PlanSplit sp = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split)[split];
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint8_t* stage = smem + SM::kStage + static_cast<size_t>(warp) * TG::kWarpBytes;
  const uint8_t* st_k = stage;
  const uint8_t* st_v = stage + kTile * TG::kKStride;
  // pairs[a | b << 3] = {level a, level b} as fp16x2: two TQ3 codes to one fragment register.
  if (threadIdx.x < 64)
    pairs[threadIdx.x] = pack_half2(codec::tq3_level(static_cast<int>(threadIdx.x & 7)),
                                    codec::tq3_level(static_cast<int>(threadIdx.x >> 3)));
  const int G = p.group;
  {
    const float* qsrc =
        (kTq3 ? p.q_rot : p.q) + (static_cast<size_t>(sp.seq) * p.q_heads + static_cast<size_t>(h) * G) * D;
    const float qscale = p.scale * kLog2e;
    for (int i = threadIdx.x; i < MB * 32; i += kThreads) {
      const int ks = i / 32, qg = (i % 32) >> 2, d0 = qk_dim<F>(ks, i & 3);
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (qg < G)
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = qsrc[qg * D + d0 + j] * qscale;
      const __half2 h01 = __floats2half2_rn(x[0], x[1]), h23 = __floats2half2_rn(x[2], x[3]);
      qf[i] = make_uint4(*reinterpret_cast<const uint32_t*>(&h01), *reinterpret_cast<const uint32_t*>(&h23),
                         pack_half2(x[0] - __low2float(h01), x[1] - __high2float(h01)),
                         pack_half2(x[2] - __low2float(h23), x[3] - __high2float(h23)));
    }
  }
  __syncthreads();
  const DeviceLayout L = p.pools.layout[codec::format_index(F)];
  const uint8_t* base = p.pools.base[codec::format_index(F)];
  const auto* entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  // Lane (g, t) holds the columns (query heads) 2 t + i of every C tile: its own m, l per i.
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
  float acc[MB][4];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) acc[mb][0] = acc[mb][1] = acc[mb][2] = acc[mb][3] = 0.0f;
  const bool want_pages = p.page_m != nullptr;
  int tiles_before = 0;  // see first_tile
  for (int ei = sp.entry_begin; ei < sp.entry_end; ++ei) {
    const EntryRows er = entry_rows(L, base, entries[ei], sp, h);
    const uint8_t *kc = er.kc, *vc = er.vc, *km = er.km, *vm = er.vm;
    const int t_end = er.t_end;
    float pm[2] = {-INFINITY, -INFINITY}, pl[2] = {0.0f, 0.0f};
    for (int tile = first_tile(sp, t_end, warp, tiles_before); tile < t_end; tile += kWarps * kTile) {
      const int n = min(kTile, t_end - tile);
      stage_tile<TG>(kc + static_cast<size_t>(tile) * TG::kRow, vc + static_cast<size_t>(tile) * TG::kRow, n, stage);
      // Row scales of the tokens of this lane's C rows: 16 mb + g + 8 r at [2 mb + r].
      float ksc[4], vsc[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int tok = 16 * (j >> 1) + g + 8 * (j & 1);
        const size_t mo = static_cast<size_t>(tile + tok) * L.meta;
        ksc[j] = tok < n ? load_meta<F>(km + mo) : 0.0f;
        vsc[j] = tok < n ? load_meta<F>(vm + mo) : 0.0f;
      }
      __pipeline_wait_prior(0);
      __syncwarp();
      float s[2][4];
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
        s[mb][0] = s[mb][1] = s[mb][2] = s[mb][3] = 0.0f;
        if (16 * mb >= n) continue;  // warp-uniform: a block of padding rows only
        const uint8_t* r0 = st_k + (16 * mb + g) * TG::kKStride;
        const uint8_t* r1 = r0 + 8 * TG::kKStride;
        // 64 dims (four k-steps, hi and lo) per tensor-core sum from zero, added up in fp32 (see PV).
#pragma unroll
        for (int c = 0; c < D / 64; ++c) {
          float part[4] = {};
          if constexpr (kTq3) {
            const uint64_t v0 = tq3_codes16(r0, c, t), v1 = tq3_codes16(r1, c, t);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
              const uint32_t a[4] = {pairs[(v0 >> (12 * kk)) & 63u], pairs[(v1 >> (12 * kk)) & 63u],
                                     pairs[(v0 >> (12 * kk + 6)) & 63u], pairs[(v1 >> (12 * kk + 6)) & 63u]};
              const uint4 qv = qf[(4 * c + kk) * 32 + lane];
              mma16816(part, a, qv.x, qv.y);
              mma16816(part, a, qv.z, qv.w);
            }
          } else {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
              const int ks = 4 * c + kk;
              const uint32_t w0 = *reinterpret_cast<const uint32_t*>(r0 + 16 * ks + 4 * t);
              const uint32_t w1 = *reinterpret_cast<const uint32_t*>(r1 + 16 * ks + 4 * t);
              const uint32_t a[4] = {fp8x2_to_half2(w0), fp8x2_to_half2(w1), fp8x2_to_half2(w0 >> 16),
                                     fp8x2_to_half2(w1 >> 16)};
              const uint4 qv = qf[ks * 32 + lane];
              mma16816(part, a, qv.x, qv.y);
              mma16816(part, a, qv.z, qv.w);
            }
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mb][e] += part[e];
        }
      }
      // Softmax over the tile for columns 2 t + i; C element [mb][2 r + i] is token 16 mb + g + 8 r.
      float corrs[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int tok = 16 * (j >> 1) + g + 8 * (j & 1);
          float& x = s[j >> 1][2 * (j & 1) + i];
          x = tok < n ? x * ksc[j] : -INFINITY;
          mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float mn = fmaxf(m[i], mx);  // finite: token 0 of a tile is always valid
        const float corr = exp2f(m[i] - mn);
        m[i] = mn;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int tok = 16 * (j >> 1) + g + 8 * (j & 1);
          const float pr = exp2f(s[j >> 1][2 * (j & 1) + i] - mn);  // 0 for padding rows
          sum += pr;
          ps[warp][tok][2 * t + i] = pr * vsc[j];
        }
        lsum[i] = lsum[i] * corr + sum;
        corrs[i] = corr;
        if (want_pages) {
          sum += __shfl_xor_sync(0xffffffffu, sum, 4);
          sum += __shfl_xor_sync(0xffffffffu, sum, 8);
          sum += __shfl_xor_sync(0xffffffffu, sum, 16);
          float c1, c2;
          merge_ml(pm[i], pl[i], mn, sum, c1, c2);
        }
      }
      __syncwarp();
      // O^T += V^T P^T over the tile's two 16-token k-steps; lane (g, t) takes tokens t + 4 j, j = 0..3, of
      // a step and output dims 4 (8 k + g) .. + 3 (row blocks 2 k and 2 k + 1). Each tile's product is
      // summed on the tensor cores from zero and added to the running output in fp32 with the tile's
      // rescale: tensor-core accumulation is not rounded to nearest, so a long chain of it drifts.
      const int steps = n > 16 ? 2 : 1;  // warp-uniform
      uint32_t b_hi[2][2], b_lo[2][2];
      const uint8_t* vrow = st_v + t * TG::kVStride;  // token t; token t + 4 j + 16 kt at a fixed offset
#pragma unroll
      for (int kt = 0; kt < 2; ++kt) {
        float pv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) pv[j] = ps[warp][16 * kt + t + 4 * j][g];
        const __half2 h01 = __floats2half2_rn(pv[0], pv[1]), h23 = __floats2half2_rn(pv[2], pv[3]);
        b_hi[kt][0] = *reinterpret_cast<const uint32_t*>(&h01);
        b_hi[kt][1] = *reinterpret_cast<const uint32_t*>(&h23);
        b_lo[kt][0] = pack_half2(pv[0] - __low2float(h01), pv[1] - __high2float(h01));
        b_lo[kt][1] = pack_half2(pv[2] - __low2float(h23), pv[3] - __high2float(h23));
      }
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const int d = 4 * (8 * k + g);
        float tmp[2][4] = {};
#pragma unroll
        for (int kt = 0; kt < 2; ++kt) {
          if (kt >= steps) break;
          uint32_t a0[4], a1[4];  // row blocks 2 k (dims d, d + 1) and 2 k + 1 (dims d + 2, d + 3)
          if constexpr (kTq3) {
            uint32_t c[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) c[j] = tq3_codes4<D>(vrow + (16 * kt + 4 * j) * TG::kVStride, d);
            auto pair = [&](int ja, int jb, int e) {
              return pairs[((c[ja] >> (3 * e)) & 7u) | (((c[jb] >> (3 * e)) & 7u) << 3)];
            };
            a0[0] = pair(0, 1, 0);
            a0[1] = pair(0, 1, 1);
            a0[2] = pair(2, 3, 0);
            a0[3] = pair(2, 3, 1);
            a1[0] = pair(0, 1, 2);
            a1[1] = pair(0, 1, 3);
            a1[2] = pair(2, 3, 2);
            a1[3] = pair(2, 3, 3);
          } else {
            uint32_t w[4];  // padding rows may hold NaN codes: zero them (their P is 0)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              w[j] = 16 * kt + t + 4 * j < n
                         ? *reinterpret_cast<const uint32_t*>(vrow + (16 * kt + 4 * j) * TG::kVStride + d)
                         : 0u;
            const uint32_t x01 = __byte_perm(w[0], w[1], 0x5140), y01 = __byte_perm(w[0], w[1], 0x7362);
            const uint32_t x23 = __byte_perm(w[2], w[3], 0x5140), y23 = __byte_perm(w[2], w[3], 0x7362);
            a0[0] = fp8x2_to_half2(x01);
            a0[1] = fp8x2_to_half2(x01 >> 16);
            a0[2] = fp8x2_to_half2(x23);
            a0[3] = fp8x2_to_half2(x23 >> 16);
            a1[0] = fp8x2_to_half2(y01);
            a1[1] = fp8x2_to_half2(y01 >> 16);
            a1[2] = fp8x2_to_half2(y23);
            a1[3] = fp8x2_to_half2(y23 >> 16);
          }
          mma16816(tmp[0], a0, b_hi[kt][0], b_hi[kt][1]);
          mma16816(tmp[0], a0, b_lo[kt][0], b_lo[kt][1]);
          mma16816(tmp[1], a1, b_hi[kt][0], b_hi[kt][1]);
          mma16816(tmp[1], a1, b_lo[kt][0], b_lo[kt][1]);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[2 * k + e][c] = acc[2 * k + e][c] * corrs[c & 1] + tmp[e][c];
      }
      __syncwarp();
    }
    if (want_pages) {
      if (g == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          red_m[warp][2 * t + i] = pm[i];
          red_l[warp][2 * t + i] = pl[i];
        }
      }
      write_page_stats<kMmaCols>(p, ei, red_m, red_l);
    }
  }
  // Combine the warps through shared memory (red_acc overlays the stages, so wait for every warp).
  __syncthreads();
  auto* red_acc = reinterpret_cast<float(*)[kMmaCols][D]>(smem + SM::kStage);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = lsum[i];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    if (g == 0) {
      red_m[warp][2 * t + i] = m[i];
      red_l[warp][2 * t + i] = l;
    }
  }
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      red_acc[warp][2 * t + (c & 1)][4 * (8 * (mb >> 1) + g) + 2 * (mb & 1) + (c >> 1)] = acc[mb][c];
  write_partials<D, kMmaCols>(p, split, red_m, red_l, red_acc);
}

// q_rot[b][hq] = R_{kv head} q[b][hq]: signs, FWHT, 1/sqrt(D).
template <int D>
__global__ void rotate_queries_kernel(StepParams p) {
  const int b = blockIdx.x, hq = blockIdx.y;
  if (b >= plan_batch(p.plan)) return;
  __shared__ float x[D];
  const size_t o = (static_cast<size_t>(b) * p.q_heads + hq) * D;
  rotate_query<D>(p.q + o, p.signs + hq / p.group * D, x, p.q_rot + o);
}

// One CTA of kMergeThreads per (batch item, query head). An item may have hundreds of partials, and at
// batch 1 there are only q_heads CTAs, so the loop over the partials is spread over 16 warps: pass 1
// takes the maximum with every thread striding over the partials; pass 2 gives each warp every
// kWarps-th group of kUnroll partials, whose (m, l) and output rows it loads together before
// accumulating (independent loads in flight instead of one round trip per partial); the warps' sums
// are added in warp order. The order is fixed, so results are deterministic.
constexpr int kMergeThreads = 512;

template <int D>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(StepParams p) {
  constexpr int kWarps = kMergeThreads / 32, kPer = D / 32, kUnroll = D >= 256 ? 4 : 8;
  const int b = blockIdx.x, hq = blockIdx.y;
  if (b >= plan_batch(p.plan)) return;
  __shared__ float x[D];
  __shared__ float warp_max[kWarps], warp_l[kWarps];
  __shared__ float warp_sum[2][kWarps][D];  // [plain, rotated][warp][dim]
  const int i = threadIdx.x, lane = i & 31, warp = i >> 5, h = hq / p.group;
  const auto* offs = reinterpret_cast<const int32_t*>(p.plan + p.off_seq);
  const int batch = plan_batch(p.plan);
  float mm = -INFINITY;
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    for (int s = offs[f * (batch + 1) + b] + i; s < offs[f * (batch + 1) + b + 1]; s += kMergeThreads) {
      const size_t qh = static_cast<size_t>(s) * p.q_heads + hq;
      if (p.part_l[qh] > 0.0f) mm = fmaxf(mm, p.part_m[qh]);
    }
  for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
  if (lane == 0) warp_max[warp] = mm;
  __syncthreads();
  mm = warp_max[0];
  for (int w = 1; w < kWarps; ++w) mm = fmaxf(mm, warp_max[w]);

  float ll = 0.0f, plain[kPer] = {}, rot[kPer] = {};
#pragma unroll
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    const int s0 = offs[f * (batch + 1) + b], s1 = offs[f * (batch + 1) + b + 1];
    float acc[kPer] = {};
    for (int base = s0 + warp * kUnroll; base < s1; base += kWarps * kUnroll) {
      float w[kUnroll], v[kUnroll][kPer];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int s = base + u;
        const size_t qh = static_cast<size_t>(s < s1 ? s : s0) * p.q_heads + hq;
        const float ls = s < s1 ? p.part_l[qh] : 0.0f;
        w[u] = ls > 0.0f ? ls * expf(p.part_m[qh] - mm) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float* o = p.part_o + (static_cast<size_t>(base + u < s1 ? base + u : s0) * p.q_heads + hq) * D;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          v[u][j] = w[u] > 0.0f ? o[lane + 32 * j] : 0.0f;  // an empty partial's O is unset
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        ll += w[u];
#pragma unroll
        for (int j = 0; j < kPer; ++j) acc[j] += w[u] * v[u][j];
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) ((codec::kRotatedFormats >> f) & 1u ? rot : plain)[j] += acc[j];
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    warp_sum[0][warp][lane + 32 * j] = plain[j];
    warp_sum[1][warp][lane + 32 * j] = rot[j];
  }
  if (lane == 0) warp_l[warp] = ll;
  __syncthreads();
  float sum_plain = 0.0f, sum_rot = 0.0f, sum_l = 0.0f;
  if (i < D)
    for (int w = 0; w < kWarps; ++w) {
      sum_plain += warp_sum[0][w][i];
      sum_rot += warp_sum[1][w][i];
      sum_l += warp_l[w];
    }
  const size_t bh = static_cast<size_t>(b) * p.q_heads + hq;
  write_merged<D>(sum_plain, sum_rot, mm, sum_l, p.signs + h * D, x, p.out + bh * D, p.m ? p.m + bh : nullptr,
                  p.l ? p.l + bh : nullptr);
}

// One block per batch item: r_p = mean over query heads of each page's share / the head's total.
__global__ void decode_page_score_kernel(StepParams p) {
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

// FP8 and TQ3 splits run on tensor cores (attend_split_mma, one instance for every group size); BF16
// splits, the dense baseline, on the FMA path: the table's tensor_core_decode (kTensorCoreDecode).

// CTAs per SM the register budget is sized for: 3, except FP8 at head_dim 256, whose staged tiles
// allow only 2 per SM anyway (and which would spill under the budget of 3).
template <codec::PageFormat F, int D>
constexpr int kMinBlocks = F == codec::PageFormat::kFp8 && D == 256 ? 2 : 3;

// One CTA per (split of format F, KV head). One launch per format: a kernel that branched on the
// format per CTA measured slower on an H200 (it takes the register budget of the heaviest path, the
// TQ3 one, for every CTA) and saved no time per layer.
template <codec::PageFormat F, int D, int GM>
__global__ void __launch_bounds__(kThreads, kMinBlocks<F, D>) decode_split_kernel(StepParams p) {
  const auto* offs = reinterpret_cast<const int32_t*>(p.plan + p.off_seq);
  const int batch = plan_batch(p.plan);
  constexpr int fi = codec::format_index(F);
  const int first = offs[fi * (batch + 1)], count = offs[fi * (batch + 1) + batch] - first;
  if (static_cast<int>(blockIdx.x) >= count) return;
  extern __shared__ __align__(16) uint8_t smem[];
  if constexpr (kTensorCoreDecode<F>)
    attend_split_mma<F, D>(p, first + static_cast<int>(blockIdx.x), smem);
  else
    attend_split_bf16<D, GM>(p, first + static_cast<int>(blockIdx.x), smem);
}

template <codec::PageFormat F, int D, int GM>
void launch_format(const StepParams& p, int max_splits, cudaStream_t st) {
  if (max_splits == 0) return;
  constexpr size_t bytes = [] {
    if constexpr (kTensorCoreDecode<F>)
      return MmaSmem<F, D>::kBytes;
    else
      return SplitSmem<D, GM>::kBytes;
  }();
  static const bool configured = [] {
    check(cudaFuncSetAttribute(decode_split_kernel<F, D, GM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "decode: shared memory attribute");
    return true;
  }();
  (void)configured;
  decode_split_kernel<F, D, GM><<<dim3(max_splits, p.kv_heads), kThreads, bytes, st>>>(p);
}

template <int D, int GM>
void launch_split(const StepParams& p, const std::array<int, codec::kNumPageFormats>& splits, cudaStream_t exact_st, cudaStream_t tq3_st) {
  using codec::PageFormat;
  launch_format<PageFormat::kBf16, D, GM>(p, splits[codec::format_index(PageFormat::kBf16)], exact_st);
  launch_format<PageFormat::kFp8, D, kMmaCols>(p, splits[codec::format_index(PageFormat::kFp8)], exact_st);
  launch_format<PageFormat::kTq3, D, kMmaCols>(p, splits[codec::format_index(PageFormat::kTq3)], tq3_st);
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
  if (tq3) rotate_queries_kernel<D><<<dim3(batch, p.q_heads), D, 0, st>>>(p);
  if (p.group == 1)
    launch_split<D, 1>(p, splits, exact_st, st);
  else if (p.group == 2)
    launch_split<D, 2>(p, splits, exact_st, st);
  else if (p.group <= 4)
    launch_split<D, 4>(p, splits, exact_st, st);
  else if (p.group <= 6)
    launch_split<D, 6>(p, splits, exact_st, st);
  else
    launch_split<D, 8>(p, splits, exact_st, st);
  if (tq3 && exact) side.join(st);
  merge_kernel<D><<<dim3(batch, p.q_heads), kMergeThreads, 0, st>>>(p);
  if (p.score_acc) decode_page_score_kernel<<<batch, 256, sizeof(double) * p.q_heads, st>>>(p);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}
// Literal messages are not turned into strings unless they are thrown: checks run per split and page.
void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

DecodeWorkspace::DecodeWorkspace(const DecodeShape& shape, int max_batch, int max_splits, int max_entries)
    : shape_(shape), max_batch_(max_batch), max_splits_(max_splits), max_entries_(max_entries) {
  validate_decode_shape(shape);
  require(max_batch > 0 && max_splits > 0 && max_entries > 0, "DecodeWorkspace: capacities must be positive");
  off_seq_ = 16;
  off_split_ = codec::align_up(off_seq_ + sizeof(int32_t) * codec::kNumPageFormats * (max_batch + 1), 16);
  off_entry_ = codec::align_up(off_split_ + sizeof(PlanSplit) * max_splits, 16);
  blob_bytes_ = codec::align_up(off_entry_ + sizeof(PlanEntry) * max_entries, 16);
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
  const bool tq3 = seen[2], exact = seen[0] || seen[1];
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
  stats_ = st;
  page_granular_ = granular;
  staged_batch_ = plan.batch;
  staged_entries_ = st.entries;
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    staged_splits_[f] =
        plan.seq_split_begin[f * (plan.batch + 1) + plan.batch] - plan.seq_split_begin[f * (plan.batch + 1)];
}

void DecodeWorkspace::launch(const PoolViews& pools, const DecodeBuffers& io, cudaStream_t stream,
                             LaunchSize size) const {
  require(io.q && io.signs && io.out, "DecodeWorkspace::launch: q, signs and out are required");
  require((io.page_m == nullptr) == (io.page_l == nullptr), "DecodeWorkspace::launch: page_m and page_l go together");
  require(!io.score_acc || (io.page_m && io.m && io.l),
          "DecodeWorkspace::launch: page scores need m, l, page_m, page_l");
  require(io.page_m == nullptr || page_granular_,
          "DecodeWorkspace::launch: per-page (m, l) needs a page-granular plan (make_decode_plan(..., page_granular = "
          "true))");
  const bool exact = size == LaunchSize::kStaged;
  if (exact) {  // only the parts of the blob the staged plan fills
    const size_t parts[3][2] = {
        {0, off_seq_ + sizeof(int32_t) * codec::kNumPageFormats * (staged_batch_ + 1)},
        {off_split_,
         sizeof(PlanSplit) * static_cast<size_t>(std::accumulate(staged_splits_.begin(), staged_splits_.end(), 0))},
        {off_entry_, sizeof(PlanEntry) * static_cast<size_t>(staged_entries_)}};
    for (const auto& [off, n] : parts)
      if (n)
        check(cudaMemcpyAsync(plan_.get() + off, staging_.get() + off, n, cudaMemcpyHostToDevice, stream),
              "DecodeWorkspace::launch: plan copy");
  } else {
    check(cudaMemcpyAsync(plan_.get(), staging_.get(), blob_bytes_, cudaMemcpyHostToDevice, stream),
          "DecodeWorkspace::launch: plan copy");
  }
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
