// The consumers of the copy-engine prefill CTA (prefill_tma_tile.cuh has its layout, producers and
// hand-off): one warpgroup per 64 query rows, two to a CTA (one where two query terms at head_dim 256
// leave room for only 64 rows).
//
// Owns: a consumer warpgroup's loop over the key tiles. Per tile: S = Q K^T as m64nKk16 wgmmas (bf16 for
// BF16 pages, fp16 for FP8 and TQ3 pages, whose codes and levels are exact in fp16; TQ3 against the
// rotated query), both operands in shared memory (K-major, 128-byte swizzle), the shared softmax step
// (prefill_tile.cuh) on the accumulators (with FP8's K scales or TQ3's K alphas only where the producer
// left them out of K, i.e. with page scores: kKeyScaledByProducer), then O += P V as m64nDk16
// wgmmas with P from registers and V (FP8, TQ3: scaled) read MN-major.
// Loop order: PV(t - 1) and QK^T(t) are issued together and retired together, then the softmax of tile
// t rescales O; with two consumer warpgroups one's softmax runs under the other's products. Kernel lab:
// MINIMAKV_PREFILL_TMA_OVERLAP=1 builds the FlashAttention-3 order instead (the softmax of tile t under
// this warpgroup's own PV(t - 1), O's rescale deferred), which measured 4-9% slower on an H200 with both
// orders through the GPU tests (docs/benchmarks.md).
// Precision: Q (one term, or hi + lo when page scores are wanted), K, V and the probabilities are bf16
// (BF16 pages, as FlashAttention computes a BF16 model) or fp16 (FP8 and TQ3 pages, as the decoding CTA) on the
// tensor cores with fp32 accumulation; logits, the softmax state and O stay fp32. Where kFp8QkWgmma
// holds, QK^T over FP8 pages is E4M3 x E4M3 instead: the page's codes as stored, against kFp8QTerms E4M3
// terms of the row-scaled query (stage_query_fp8), the row's scaling undone with the key scales.
// Invariant: compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include "prefill_tma_tile.cuh"
#include "wgmma.cuh"

#ifndef MINIMAKV_PREFILL_TMA_OVERLAP
#define MINIMAKV_PREFILL_TMA_OVERLAP 0
#endif

namespace minimakv::cuda::detail {

template <codec::PageFormat F, int D, int QT>
__device__ void prefill_consume_tma(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  static_assert(F == codec::PageFormat::kBf16 || F == codec::PageFormat::kFp8 || F == codec::PageFormat::kTq3);
  using T = TmaTile<D, QT, F>;
  using E = std::conditional_t<F == codec::PageFormat::kBf16, __nv_bfloat16, __half>;
  constexpr int K = T::kKeys, NT = K / 8, DT = D / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp / 4;
  constexpr bool kE4m3 = kFp8QkWgmma<F, D>;
  if constexpr (kE4m3)
    stage_query_fp8<T, D>(p, c, smem);
  else
    stage_query_tma<T, E, D, QT>(p, c, kRotatedFormat<F> ? p.q_rot : p.q, smem);
  const ConsumerRows<1> rows(p, c, 64 * wg + 16 * (warp % 4), lane);
  float qinv[1][2] = {{1.0f, 1.0f}};  // E4M3 queries: 1 / each row's scaling
  if constexpr (kE4m3) {
    const float* inv = reinterpret_cast<const float*>(smem + T::kQScale);
    qinv[0][0] = inv[rows.row(0, 0) - c.row0];  // indexed by the CTA's own rows
    qinv[0][1] = inv[rows.row(0, 1) - c.row0];
  }
  const int q_min = c.sq.first + c.wk.tile_token + c.row0 / p.group;  // the CTA's first query position
  const uint32_t sbase = smem_u32(smem), q_base = sbase + T::kQ + wg * 64 * 128;

  float m[1][2] = {{-INFINITY, -INFINITY}}, lsum[1][2] = {{0.0f, 0.0f}}, o[1][DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
  auto& o_acc = reinterpret_cast<float(&)[DT * 4]>(o);
  float s[1][NT][4];
  auto& s_acc = reinterpret_cast<float(&)[NT * 4]>(s);
  uint32_t pa[K / 16][4];     // P of the last tile as the A fragments of its PV
  PagePartials<1, NT> pages;  // with two query terms (both serve the page scores)

  // S = Q K^T for tile t (base-2 logits); a k16 step is 32 bytes along a swizzled row.
  auto issue_qk = [&](int t) {
    const int b = T::k_stage(t);
    mbarrier_wait(sbase + T::full_k(b), T::k_parity(t));
    if constexpr (kE4m3) {
      // The raw codes (boxes of 128 codes, K-major, 128-byte swizzle, box b at Fp8Raw::box_at in the K
      // buffer); a k32 step is 32 bytes, four to a 128-byte block of the query's and the codes' rows.
      const uint32_t kb = sbase + T::k_tile(b);
#pragma unroll
      for (int qt = 0; qt < T::kFp8QTerms; ++qt)
#pragma unroll
        for (int kk = 0; kk < D / 32; ++kk)
          wgmma_ss_e4m3<K>(s_acc, gmma_desc_sw128(q_base + qt * T::kQTerm8 + (kk / 4) * T::kQBlock + (kk % 4) * 32, 16, 1024),
                           gmma_desc_sw128(kb + Fp8Raw<D>::box_at(K, kk / 4) + (kk % 4) * 32, 16, 1024), qt | kk);
      wgmma_commit();
      return;
    }
    const uint32_t kb = sbase + T::k_tile(b);
#pragma unroll
    for (int qt = 0; qt < QT; ++qt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<E, K>(s_acc, gmma_desc_sw128(q_base + qt * T::kQTerm + (kk / 4) * T::kQBlock + (kk % 4) * 32, 16, 1024),
                          gmma_desc_sw128(kb + (kk / 4) * T::kKvBlock + (kk % 4) * 32, 16, 1024), qt | kk);
    wgmma_commit();
  };
  // O += P V for tile t: a k16 step is 16 keys (two 8-row groups), N runs over the 64-column blocks.
  auto issue_pv = [&](int t) {
    mbarrier_wait(sbase + T::full_v(T::v_stage(t)), T::v_parity(t));
    const uint32_t vb = sbase + T::v_tile(T::v_stage(t));
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) wgmma_rs<E, D>(o_acc, pa[kk], gmma_desc_sw128(vb + kk * 2048, T::kKvBlock, 1024));
    wgmma_commit();
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbarrier_arrive(sbase + bar);
  };
#if MINIMAKV_PREFILL_TMA_OVERLAP
  float corr[1][2];  // O's rescale for the last softmax, applied before the PV that follows it
  float(*const deferred)[2] = corr;
#else
  float(*const deferred)[2] = nullptr;  // the softmax rescales O itself
#endif
  // The softmax of tile t (its positions and K scales arrived with its K).
  auto softmax = [&](int t) {
    const int* kpos = reinterpret_cast<const int*>(smem + T::meta(T::k_stage(t)));
    const int4 mx = *reinterpret_cast<const int4*>(kpos + T::kMaxPos);
    const bool masked = max(max(mx.x, mx.y), max(mx.z, mx.w)) > q_min;
    float mref[1][2];
    // Where the producer scaled K's rows (kKeyScaledByProducer) the logits need no key scales.
    constexpr codec::PageFormat kSoftmaxF = kKeyScaledByProducer<F, D, QT> ? codec::PageFormat::kBf16 : F;
    softmax_step<kSoftmaxF>(s, o, m, lsum, mref, rows, kpos, reinterpret_cast<const float*>(kpos + T::kScale), masked,
                    deferred, kE4m3 ? qinv : nullptr);
    if constexpr (QT == 2) pages.add(p, c, rows, s, mref, kpos + T::kEnt, K);
  };
  // P of the last softmax as E A fragments (before the next QK^T overwrites S).
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      pa[kk][0] = pack_pair<E>(s[0][2 * kk][0], s[0][2 * kk][1]);
      pa[kk][1] = pack_pair<E>(s[0][2 * kk][2], s[0][2 * kk][3]);
      pa[kk][2] = pack_pair<E>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pa[kk][3] = pack_pair<E>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  };
#if MINIMAKV_PREFILL_TMA_OVERLAP
  // O rescaled for the last softmax (no PV in flight).
  auto rescale_o = [&] {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[0][dt][0] *= corr[0][0];
      o[0][dt][1] *= corr[0][0];
      o[0][dt][2] *= corr[0][1];
      o[0][dt][3] *= corr[0][1];
    }
  };
#endif

  const int n = c.wk.key_tiles;
  wgmma_fence();
  issue_qk(0);
  wgmma_wait<0>();
  softmax(0);
  release(T::empty_k(0));
#if MINIMAKV_PREFILL_TMA_OVERLAP
  for (int t = 1; t < n; ++t) {
    pack_p();
    wgmma_fence();  // S was read, pa written
    issue_qk(t);
    rescale_o();    // while QK^T(t) runs
    wgmma_fence();  // O was written
    issue_pv(t - 1);
    wgmma_wait<1>();  // QK^T(t), committed first, has retired; PV(t - 1) may still run
    softmax(t);
    release(T::empty_k(T::k_stage(t)));
    wgmma_wait<0>();
    release(T::empty_v(T::v_stage(t - 1)));
  }
  pack_p();
  rescale_o();
#else
  pack_p();
  for (int t = 1; t < n; ++t) {
    wgmma_fence();  // pa and O were written by the softmax
    issue_pv(t - 1);
    issue_qk(t);
    wgmma_wait<0>();
    release(T::empty_v(T::v_stage(t - 1)));
    softmax(t);
    release(T::empty_k(T::k_stage(t)));
    pack_p();
  }
#endif
  wgmma_fence();
  issue_pv(n - 1);
  wgmma_wait<0>();
  release(T::empty_v(T::v_stage(n - 1)));
  if constexpr (QT == 2) pages.finish(p, c, rows);
  write_partials(p, c, rows, o, m, lsum);
}

}  // namespace minimakv::cuda::detail
