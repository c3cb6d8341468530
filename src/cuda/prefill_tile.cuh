// The shared part of the prefill attention CTA (paged_prefill.cu launches it): one query tile of one
// sequence against one key split (pages of one format) for one KV head.
//
// Owns: the tiling of a CTA per (format, head_dim, query terms, MMA kind), its shared-memory layout,
// and the pieces both consumers share (the query tile, one tile's online-softmax step, per-page
// partials, the partial outputs). The producer warps that stage and decode K/V tiles:
// prefill_produce.cuh. The consumers: prefill_consume_mma.cuh (mma.sync, any sm_80+ GPU) and
// prefill_consume_wgmma.cuh (Hopper wgmma).
// Roles (warp-specialised): the last four warps produce. Producer thread i owns row i of every tile's
// 2 x kKeys K and V rows (half a row at head_dim 256): it copies that row's codes with cp.async two tiles
// ahead and decodes them to fp16 (BF16 values in place, FP8 codes and TQ3 levels from a staging ring;
// FP8 codes and TQ3 levels are exact in fp16, V rows carry their scale, K scales go to the consumers'
// logits). A thread reads only bytes it copied itself, so the staging ring needs no barrier. The other
// warps consume: S = Q K^T, the base-2 online softmax and O += P V on tensor cores (fp16 in, fp32 out).
// Hand-off through named barriers: FULL[b] (producers arrive once buffer b holds a decoded tile,
// consumers wait) and EMPTY[b] (consumers arrive when done with b, producers wait before refilling it);
// an EMPTY arrival happens only for a buffer that will be refilled, so no barrier is left half-arrived
// when the CTA ends.
// Shared layouts: the mma.sync consumer reads rows padded to an odd number of 16-byte units (ldmatrix
// without bank conflicts); the wgmma consumer reads 8 x 8 core matrices (8 rows of 16 contiguous bytes,
// the canonical no-swizzle layout of its descriptors). PrefillTile's q_chunk/k_chunk/v_chunk are the one
// place that maps (row, 16-byte chunk) to bytes.
// Invariants: a split's keys come in increasing position order and the plan's key_tiles stop at the
// tile holding the last key the query tile can see; keys past a row's position and padding slots are
// masked to -inf before the softmax, and padding rows of K and V are zero in shared memory.
// Precision: the query as one fp16 term, or as hi + lo terms when page scores are wanted (logits close
// to fp32, so page scores do not inherit fp16 rounding); probabilities and V values as fp16.
#pragma once

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "attention_device.cuh"
#include "minimakv/codec/tq4.h"
#include "minimakv/cuda/prefill_plan.h"

// Kernel-lab knob (scripts/bench/prefill-lab.sh): raw code stages of the FP8/TQ3 staging ring (copies run
// stages - 1 tiles ahead).
#ifndef MINIMAKV_PREFILL_STAGES
#define MINIMAKV_PREFILL_STAGES 3
#endif

namespace minimakv::cuda::detail {

struct PrefillParams : AttendParams {
  const uint8_t* plan;
  uint32_t off_seq, off_split, off_work, off_tiles, off_entry, off_order, off_ranges, off_rows;
  int n_seqs, n_works, rows;
  double* row_total;  // [rows][q_heads], for the page scores
  int tile_tokens, tokens_per_page;
  int tile_rows;     // query rows of a plan tile (PrefillTiling::rows); a CTA of fewer takes a part
  uint32_t formats;  // bit f: this launch attends the works of format f (others return at once)
};

// ---- PTX wrappers
__device__ inline uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
template <int N>
__device__ inline void cp_async(uint32_t dst, const void* src) {
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(N) : "memory");
}
__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ inline void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ inline void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Makes this thread's ordinary shared-memory stores visible to the tensor cores' (async proxy) reads.
__device__ inline void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- tiling and shared memory
template <codec::PageFormat F, int D, int QT, bool Wg>
struct PrefillTile {
  static constexpr bool kWgmma = Wg;
  // Consumers: four warps of 16 x kMI rows (mma.sync), or one or two warpgroups of 64 rows (wgmma).
  static constexpr int kConsumerWarps = Wg && D <= 128 ? 8 : 4;
  static constexpr int kConsumers = 32 * kConsumerWarps;
  static constexpr int kThreads = kConsumers + 128;  // + four producer warps
  static constexpr int kMI = Wg || D > 128 ? 1 : 2;  // m16 row tiles per consumer warp
  static constexpr int kRows = prefill_tile_rows(D);
  static constexpr int kKeys = prefill_key_tile(D);
  static constexpr int kNT = kKeys / 8;  // n8 key tiles of S
  // One fp16 row of D in shared memory: padded to an odd number of 16-byte units for ldmatrix, or
  // exactly 2D bytes spread over core matrices for wgmma.
  static constexpr int kRowBytes = Wg ? 2 * D : 2 * (D + 8);
  static constexpr bool kInPlace = F == codec::PageFormat::kBf16;         // BF16 decodes over its own copy
  static constexpr int kBuffers = kInPlace ? 3 : 2;                       // decoded K/V tiles
  static constexpr int kStages = kInPlace ? 0 : MINIMAKV_PREFILL_STAGES;  // raw code stages (FP8, TQ3)
  static constexpr int kParts = 128 / (2 * kKeys);                        // producer threads per K or V row
  static constexpr int kPieceElems = D / kParts;
  static constexpr int kPieceBytes = static_cast<int>(codec::format_row_bytes(F, D)) / kParts;
  static constexpr int kCopy = kPieceBytes % 16 == 0 ? 16 : 8;  // bytes per cp.async
  // A thread's raw piece in a stage: padded to an odd number of 16-byte units (no bank conflicts).
  static constexpr int kRawStride =
      ((kPieceBytes + 15) / 16) % 2 ? (kPieceBytes + 15) / 16 * 16 : ((kPieceBytes + 15) / 16 + 1) * 16;
  static_assert(kConsumerWarps * 16 * kMI == kRows && 2 * kKeys * kParts == 128 && kPieceElems % 8 == 0);

  // Byte offsets of 16-byte chunk c (elements 8c..8c+7) of row r in the query tile (kRows rows) and in
  // a K or V tile (kKeys rows). mma.sync: padded rows. wgmma: core matrices of 8 rows x 16 bytes, a row
  // block's D / 8 chunks adjacent and blocks D x 16 bytes apart; for Q and K (K-major operands) LBO is
  // 128 and SBO D x 16, for V (the MN-major operand of P V) the reverse. The kernel lab's challenger
  // MINIMAKV_PREFILL_WG_CONTIGUOUS puts the core matrices one Q or K instruction reads next to each
  // other instead (measured 10-11% slower on BF16 pages: docs/benchmarks.md).
  __device__ static constexpr uint32_t kmajor(int rows, int r, int c) {
#if defined(MINIMAKV_PREFILL_WG_CONTIGUOUS)  // kernel lab: the core matrices of one instruction adjacent
    return static_cast<uint32_t>(c * (rows * 16) + (r / 8) * 128 + (r % 8) * 16);
#else
    (void)rows;
    return static_cast<uint32_t>((r / 8) * (D * 16) + c * 128 + (r % 8) * 16);
#endif
  }
  __device__ static constexpr uint32_t q_chunk(int r, int c) {
    if constexpr (Wg) return kmajor(kRows, r, c);
    return static_cast<uint32_t>(r * kRowBytes + c * 16);
  }
  __device__ static constexpr uint32_t k_chunk(int r, int c) {
    if constexpr (Wg) return kmajor(kKeys, r, c);
    return static_cast<uint32_t>(r * kRowBytes + c * 16);
  }
  __device__ static constexpr uint32_t v_chunk(int r, int c) {
    if constexpr (Wg) return static_cast<uint32_t>((r / 8) * (D * 16) + c * 128 + (r % 8) * 16);
    return static_cast<uint32_t>(r * kRowBytes + c * 16);
  }
#if defined(MINIMAKV_PREFILL_WG_CONTIGUOUS)
  static constexpr uint32_t kQLbo = kRows * 16, kQSbo = 128, kKLbo = kKeys * 16, kKSbo = 128;
#else
  static constexpr uint32_t kQLbo = 128, kQSbo = D * 16, kKLbo = 128, kKSbo = D * 16;
#endif
  static constexpr uint32_t kVLbo = D * 16, kVSbo = 128;

  static constexpr size_t kHalfTile = static_cast<size_t>(kKeys) * kRowBytes;  // K or V of one buffer
  // Per buffer after K and V: kpos[kKeys] (INT_MAX marks padding), kscale[kKeys], kent[kKeys], maxpos[4].
  static constexpr size_t kMetaBytes = static_cast<size_t>(kKeys) * 12 + 16;
  static constexpr size_t kBufferBytes = (2 * kHalfTile + kMetaBytes + 127) / 128 * 128;  // tiles 128-byte aligned
  static constexpr size_t kStageBytes = 128 * static_cast<size_t>(kRawStride) + 128 * 4;  // codes + meta
  static constexpr size_t kQ = 0;
  static constexpr size_t kBuf = kQ + static_cast<size_t>(QT) * kRows * kRowBytes;
  static constexpr size_t kStage = kBuf + kBuffers * kBufferBytes;
  static constexpr size_t kTable = kStage + kStages * kStageBytes;
  static constexpr size_t kBytes = kTable + (F == codec::PageFormat::kTq3   ? 256
                                             : F == codec::PageFormat::kTq4 ? 1024
                                                                            : 0);
  static_assert(kBufferBytes % 16 == 0 && kStageBytes % 16 == 0 && kBytes <= 227 * 1024);

  // Ping-pong (kernel lab, MINIMAKV_PREFILL_PINGPONG): the two consumer warpgroups wait for tiles on
  // barriers of their own and take turns issuing their QK^T MMAs, so one's softmax overlaps the other's.
  static constexpr int kGroups = Wg ? kConsumerWarps / 4 : 1;
#if defined(MINIMAKV_PREFILL_PINGPONG)
  static constexpr bool kPingPong = kGroups == 2;
#else
  static constexpr bool kPingPong = false;
#endif
  static constexpr int kFullGroups = kPingPong ? 2 : 1;
  static constexpr int kFullCount = kPingPong ? 256 : kThreads;  // producers + who waits on a FULL barrier
  // Named barrier ids (0 is __syncthreads): FULL[group][buffer], EMPTY[buffer], the two turn barriers.
  static constexpr int kProducersBar = 1, kConsumersBar = 2, kFullBar = 3;
  static constexpr int kEmptyBar = kFullBar + kFullGroups * kBuffers, kTurnBar = kEmptyBar + kBuffers;
  static_assert(kTurnBar + 2 <= 16);
};

template <int D, int QT, bool Wg>
constexpr size_t prefill_tile_smem() {
  constexpr size_t a = PrefillTile<codec::PageFormat::kBf16, D, QT, Wg>::kBytes;
  constexpr size_t b = PrefillTile<codec::PageFormat::kFp8, D, QT, Wg>::kBytes;
  constexpr size_t c = PrefillTile<codec::PageFormat::kTq3, D, QT, Wg>::kBytes;
  constexpr size_t e = PrefillTile<codec::PageFormat::kTq4, D, QT, Wg>::kBytes;
  constexpr size_t ab = a > b ? a : b, ce = c > e ? c : e;
  return ab > ce ? ab : ce;
}

// What every thread of the CTA knows about its work.
struct PrefillWork {
  PrefillWorkRec wk;
  PlanSplit sp;
  PrefillSeqRec sq;
  const PlanEntry* entries;
  int w, h;
  int slot, span;  // keys a page takes in the split's key index space, and the page's token span
  int row0;        // the first of the plan tile's rows this CTA attends (its part times its rows)
};

__device__ inline PrefillWork load_work(const PrefillParams& p, int w, int h, int key_tile, int row0) {
  PrefillWork c;
  c.row0 = row0;
  c.wk = reinterpret_cast<const PrefillWorkRec*>(p.plan + p.off_work)[w];
  c.sp = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split)[c.wk.split];
  c.sq = reinterpret_cast<const PrefillSeqRec*>(p.plan + p.off_seq)[c.sp.seq];
  c.entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  c.w = w;
  c.h = h;
  c.span = c.sp.tok_end - c.sp.tok_begin;
  c.slot = prefill_page_slot(c.span, key_tile);
  return c;
}

// ---- what both consumers share
// Four query elements d4..d4+3 of the CTA's row r, tile row c.row0 + r (token (c.row0 + r) / G, head
// (c.row0 + r) % G of the tile's GQA group) from q (or its rotation), times qscale; zeros for a padding
// row past the tile's tokens.
template <int D>
__device__ inline float4 load_query4(const PrefillParams& p, const PrefillWork& c, const float* qsrc, int r, int d4,
                                     int tile_rows, float qscale) {
  r += c.row0;
  const int G = p.group, tok = r / G;
  if (tok >= tile_rows) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const size_t o =
      (static_cast<size_t>(c.sq.row_begin + c.wk.tile_token + tok) * p.q_heads + static_cast<size_t>(c.h) * G + r % G) *
          D +
      d4;
  const float4 x = *reinterpret_cast<const float4*>(qsrc + o);
  return make_float4(__fmul_rn(x.x, qscale), __fmul_rn(x.y, qscale), __fmul_rn(x.z, qscale), __fmul_rn(x.w, qscale));
}

// The query tile, pre-scaled so that logits come out in base 2, as fp16 (hi [+ lo]) rows in T's layout,
// staged by the consumer threads, then handed to them all through the consumers' barrier.
template <class T, codec::PageFormat F, int D, int QT>
__device__ void stage_query(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  const float* qsrc = kRotatedFormat<F> ? p.q_rot : p.q;
  const float qscale = p.scale * kLog2e;
  const int tile_rows = min(p.tile_tokens, c.sq.n - c.wk.tile_token);
  for (int i = threadIdx.x; i < T::kRows * (D / 4); i += T::kConsumers) {
    const int r = i / (D / 4), d4 = 4 * (i % (D / 4));
    const float4 x = load_query4<D>(p, c, qsrc, r, d4, tile_rows, qscale);
    const __half2 h0 = __floats2half2_rn(x.x, x.y), h1 = __floats2half2_rn(x.z, x.w);
    uint8_t* dst = smem + T::kQ + T::q_chunk(r, d4 / 8) + (d4 % 8) * 2;
    *reinterpret_cast<uint2*>(dst) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1));
    if constexpr (QT == 2) {
      const float2 f0 = __half22float2(h0), f1 = __half22float2(h1);
      *reinterpret_cast<uint2*>(dst + static_cast<size_t>(T::kRows) * T::kRowBytes) =
          make_uint2(pack_half2(x.x - f0.x, x.y - f0.y), pack_half2(x.z - f1.x, x.w - f1.y));
    }
  }
  if constexpr (T::kWgmma) fence_proxy_async();
  named_sync(T::kConsumersBar, T::kConsumers);
}

// A consumer thread's rows of the plan tile: c.row0 + row_base + 16 mi + g + 8 i for its MI m16 tiles and
// the two halves of each (row_base: the first of its warp's rows in the CTA).
template <int MI>
struct ConsumerRows {
  int base, g, t4;
  int qpos[MI][2];  // -1 for a padding row, which then masks every key
  __device__ ConsumerRows(const PrefillParams& p, const PrefillWork& c, int row_base, int lane)
      : base(c.row0 + row_base), g(lane >> 2), t4(lane & 3) {
    const int tile_rows = min(p.tile_tokens, c.sq.n - c.wk.tile_token);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int tok = row(mi, i) / p.group;
        qpos[mi][i] = tok < tile_rows ? c.sq.first + c.wk.tile_token + tok : -1;
      }
  }
  __device__ int row(int mi, int i) const {
    return base + 16 * mi + g + 8 * i;
  }
};

// One key tile's online-softmax step on S in the m16n8 accumulator layout (this thread: rows g and g + 8
// of each m16 tile, columns 8 nt + 2 t4 + {0, 1}): key scales, the causal mask, the new running maxima
// (mref: the reference each probability was taken against), l and O rescaled, S turned into
// probabilities in place. With a `deferred` array O is left alone and each row's rescale factor is
// written there instead, for a consumer whose PV product of the previous tile is still accumulating O
// while this softmax runs (it rescales O before it issues the next PV). Masked is a template argument so that tiles below the diagonal (nearly all)
// issue no loads of key positions: predicated-off loads still queue on the MIO pipe, and in Nsight
// Compute they were a quarter of the BF16 consumers' stall samples (docs/benchmarks.md).
template <codec::PageFormat F, bool Masked, int MI, int NT, int DT>
__device__ inline void softmax_tile(float (&s)[MI][NT][4], float (&o)[MI][DT][4], float (&m)[MI][2],
                                    float (&lsum)[MI][2], float (&mref)[MI][2], const ConsumerRows<MI>& rows,
                                    const int* kpos, const float* kscale, float (*deferred)[2],
                                    const float (*qinv)[2]) {
  // Scales and mask first: a column pair's scale and position are one 8-byte load each (j is even).
  // qinv (E4M3 queries): each row's power-of-two unscaling, folded exactly into the key scales.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int j = nt * 8 + 2 * rows.t4;
    if constexpr (F != codec::PageFormat::kBf16) {
      const float2 sc = *reinterpret_cast<const float2*>(kscale + j);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float sx = qinv ? __fmul_rn(sc.x, qinv[mi][i]) : sc.x, sy = qinv ? __fmul_rn(sc.y, qinv[mi][i]) : sc.y;
          s[mi][nt][2 * i] = __fmul_rn(s[mi][nt][2 * i], sx);
          s[mi][nt][2 * i + 1] = __fmul_rn(s[mi][nt][2 * i + 1], sy);
        }
    }
    if constexpr (Masked) {
      const int2 kp = *reinterpret_cast<const int2*>(kpos + j);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (kp.x > rows.qpos[mi][i]) s[mi][nt][2 * i] = -INFINITY;
          if (kp.y > rows.qpos[mi][i]) s[mi][nt][2 * i + 1] = -INFINITY;
        }
    }
  }
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * i], s[mi][nt][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[mi][i], mx);
      mref[mi][i] = mn == -INFINITY ? 0.0f : mn;
      const float corr = fast_exp2(m[mi][i] - mref[mi][i]);
      m[mi][i] = mn;
      lsum[mi][i] *= corr;
      if (deferred) {
        deferred[mi][i] = corr;
      } else {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[mi][dt][2 * i] *= corr;
          o[mi][dt][2 * i + 1] *= corr;
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          float& x = s[mi][nt][2 * i + cc];
          x = fast_exp2(x - mref[mi][i]);
          lsum[mi][i] += x;
        }
    }
}

// The step of one tile: masked (a key past some row's position, or a padding slot) or not, as one
// branch that every thread of the CTA takes the same way.
template <codec::PageFormat F, int MI, int NT, int DT>
__device__ inline void softmax_step(float (&s)[MI][NT][4], float (&o)[MI][DT][4], float (&m)[MI][2],
                                    float (&lsum)[MI][2], float (&mref)[MI][2], const ConsumerRows<MI>& rows,
                                    const int* kpos, const float* kscale, bool masked,
                                    float (*deferred)[2] = nullptr, const float (*qinv)[2] = nullptr) {
  if (masked)
    softmax_tile<F, true>(s, o, m, lsum, mref, rows, kpos, kscale, deferred, qinv);
  else
    softmax_tile<F, false>(s, o, m, lsum, mref, rows, kpos, kscale, deferred, qinv);
}

// Per-page partials (m_p, l_p) of a thread's rows, for the page scores: each tile adds every page's
// share of its probabilities to the running partial of the current page; a page's partial is written
// when the next page starts and after the last tile (finish()).
template <int MI, int NT>
struct PagePartials {
  int cur = -1;
  float pm[MI][2] = {}, pl[MI][2] = {};

  __device__ void add(const PrefillParams& p, const PrefillWork& c, const ConsumerRows<MI>& rows,
                      const float (&s)[MI][NT][4], const float (&mref)[MI][2], const int* kent, int keys) {
    const int e_lo = kent[0], e_hi = kent[keys - 1];
    for (int e = e_lo; e <= e_hi; ++e) {
      float part[MI][2] = {};
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int cc = 0; cc < 2; ++cc)
            if (kent[nt * 8 + 2 * rows.t4 + cc] == e) {
              part[mi][0] += s[mi][nt][cc];
              part[mi][1] += s[mi][nt][2 + cc];
            }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          part[mi][i] += __shfl_xor_sync(0xffffffffu, part[mi][i], 1);
          part[mi][i] += __shfl_xor_sync(0xffffffffu, part[mi][i], 2);
        }
      if (e != cur) {
        finish(p, c, rows);
        cur = e;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) pm[mi][0] = pm[mi][1] = pl[mi][0] = pl[mi][1] = 0.0f;
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float c1, c2;
          merge_ml(pm[mi][i], pl[mi][i], mref[mi][i], part[mi][i], c1, c2);
        }
    }
  }

  // Writes the current page's partial of every real row (one lane of each quad).
  __device__ void finish(const PrefillParams& p, const PrefillWork& c, const ConsumerRows<MI>& rows) const {
    if (cur < 0 || rows.t4 != 0) return;
    const PlanEntry en = c.entries[cur];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (rows.qpos[mi][i] < 0) continue;
        const size_t idx = static_cast<size_t>(c.sq.stats_offset) +
                           (static_cast<size_t>(rows.qpos[mi][i] - c.sq.first) * c.sq.pages + en.logical) * p.q_heads +
                           static_cast<size_t>(c.h) * p.group + rows.row(mi, i) % p.group;
        p.page_m[idx] = pl[mi][i] > 0.0f ? pm[mi][i] * kLn2 : -INFINITY;
        p.page_l[idx] = pl[mi][i];
      }
  }
};

// Normalised partials of this (work, KV head) for the merge: the quad's four lanes share a row's (m, l).
template <int MI, int DT>
__device__ inline void write_partials(const PrefillParams& p, const PrefillWork& c, const ConsumerRows<MI>& rows,
                                      const float (&o)[MI][DT][4], const float (&m)[MI][2],
                                      const float (&lsum)[MI][2]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float l = lsum[mi][i];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      // The one partials layout (cuda/decode_plan.h): unit w * tile_tokens + the row's token in the tile.
      // A tile of a GQA ratio that does not divide its rows has spare rows past tile_tokens * G: they
      // hold no query and have no unit.
      const int r = rows.row(mi, i);
      if (r >= p.tile_tokens * p.group) continue;
      const size_t pr = (static_cast<size_t>(c.w) * p.tile_tokens + static_cast<size_t>(r / p.group)) * p.q_heads +
                        static_cast<size_t>(c.h) * p.group + static_cast<size_t>(r % p.group);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float* dst = p.part_o + pr * (8 * DT) + 2 * rows.t4;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        *reinterpret_cast<float2*>(dst + 8 * dt) = make_float2(o[mi][dt][2 * i] * inv, o[mi][dt][2 * i + 1] * inv);
      if (rows.t4 == 0) {
        p.part_m[pr] = l > 0.0f ? m[mi][i] * kLn2 : -INFINITY;
        p.part_l[pr] = l;
      }
    }
}

}  // namespace minimakv::cuda::detail
