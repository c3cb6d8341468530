// The consumers of the copy-engine prefill CTA (prefill_tma_tile.cuh has its layout, producers and
// hand-off): one warpgroup per 64 query rows, two at head_dim <= 128 and one at 256; with a key split
// (KS = 2, head_dim 256) two warpgroups share the 64 rows, one taking the even key tiles and one the
// odd ones (each its own softmax state, merged at the end), so one's softmax runs under the other's
// products as the two row groups' do at head_dim 128.
//
// Owns: a consumer warpgroup's loop over the key tiles. Per tile: S = Q K^T as m64nKk16 wgmmas (bf16 for
// BF16 pages, fp16 for FP8 and TQ3 pages, whose codes and levels are exact in fp16; TQ3 against the
// rotated query), both operands in shared memory (K-major, 128-byte swizzle), the shared softmax step
// (prefill_tile.cuh) on the accumulators with FP8's K scales or TQ3's K alphas, then O += P V as m64nDk16
// wgmmas with P from registers and V (FP8, TQ3: scaled) read MN-major.
// Loop order: PV(t - 1) and QK^T(t) are issued together and retired together, then the softmax of tile
// t rescales O; with two consumer warpgroups one's softmax runs under the other's products. Kernel lab:
// MINIMAKV_PREFILL_TMA_OVERLAP=1 builds the FlashAttention-3 order instead (the softmax of tile t under
// this warpgroup's own PV(t - 1), O's rescale deferred), which measured 4-9% slower on an H200 with both
// orders through the GPU tests (docs/benchmarks.md).
// Precision: Q (one term, or hi + lo when page scores are wanted), K, V and the probabilities are bf16
// (BF16 pages, as FlashAttention computes a BF16 model) or fp16 (FP8 and TQ3 pages, as the decoding CTA) on the
// tensor cores with fp32 accumulation; logits, the softmax state and O stay fp32.
// Invariant: compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include "prefill_tma_tile.cuh"
#include "wgmma.cuh"

#ifndef MINIMAKV_PREFILL_TMA_OVERLAP
#define MINIMAKV_PREFILL_TMA_OVERLAP 0
#endif

namespace minimakv::cuda::detail {

// Key split (KS = 2): the second warpgroup's softmax state and output added into the first's, each
// rescaled to the larger running max, through the K/V stages (every tile was read: the consumers' barrier
// orders the last products before the writes). Thread i of one warpgroup holds the same rows and columns
// as thread i of the other, so the merge is per thread and value; lsum stays a per-thread partial, as
// write_partials expects.
template <class T, int DT>
__device__ inline void merge_key_halves(uint8_t* smem, int half, float (&o)[1][DT][4], float (&m)[1][2],
                                        float (&lsum)[1][2]) {
  float* x = reinterpret_cast<float*>(smem + T::kKv) + (threadIdx.x & 127);
  named_sync(T::kConsumersBar, T::kConsumers);
  if (half == 1) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[128 * (4 * dt + e)] = o[0][dt][e];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      x[128 * (4 * DT + i)] = m[0][i];
      x[128 * (4 * DT + 2 + i)] = lsum[0][i];
    }
  }
  named_sync(T::kConsumersBar, T::kConsumers);
  if (half != 0) return;
  float a0[2], a1[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m1 = x[128 * (4 * DT + i)], mn = fmaxf(m[0][i], m1), mref = mn == -INFINITY ? 0.0f : mn;
    a0[i] = fast_exp2(m[0][i] - mref);
    a1[i] = fast_exp2(m1 - mref);
    m[0][i] = mn;
    lsum[0][i] = lsum[0][i] * a0[i] + x[128 * (4 * DT + 2 + i)] * a1[i];
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][dt][e] = o[0][dt][e] * a0[e / 2] + x[128 * (4 * dt + e)] * a1[e / 2];
}

template <codec::PageFormat F, int D, int QT, int KS>
__device__ void prefill_consume_tma(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  static_assert(F == codec::PageFormat::kBf16 || F == codec::PageFormat::kFp8 || F == codec::PageFormat::kTq3);
  using T = TmaTile<D, QT, KS>;
  using E = std::conditional_t<F == codec::PageFormat::kBf16, __nv_bfloat16, __half>;
  constexpr int S = T::kStages, K = T::kKeys, NT = K / 8, DT = D / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp / 4;
  const int rg = wg / KS, half = wg % KS;  // row group; the key tiles half, half + KS, ... of the split
  stage_query_tma<T, E, D, QT>(p, c, kRotatedFormat<F> ? p.q_rot : p.q, smem);
  const ConsumerRows<1> rows(p, c, 64 * rg + 16 * (warp % 4), lane);
  const int q_min = c.sq.first + c.wk.tile_token;
  const uint32_t sbase = smem_u32(smem), q_base = sbase + T::kQ + rg * 64 * 128;

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
    const int b = t % S;
    mbarrier_wait(sbase + T::full_k(b), (t / S) & 1);
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
    mbarrier_wait(sbase + T::full_v(t % S), (t / S) & 1);
    const uint32_t vb = sbase + T::v_tile(t % S);
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
    const int* kpos = reinterpret_cast<const int*>(smem + T::meta(t % S));
    const int4 mx = *reinterpret_cast<const int4*>(kpos + T::kMaxPos);
    const bool masked = max(max(mx.x, mx.y), max(mx.z, mx.w)) > q_min;
    float mref[1][2];
    softmax_step<F>(s, o, m, lsum, mref, rows, kpos, reinterpret_cast<const float*>(kpos + T::kScale), masked,
                    deferred);
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

  // This warpgroup's tiles: t = half + KS u for u < n (the loops below step t by KS).
  const int n = c.wk.key_tiles, t0 = half;
  if (t0 < n) {
    wgmma_fence();
    issue_qk(t0);
    wgmma_wait<0>();
    softmax(t0);
    release(T::empty_k(t0 % S));
#if MINIMAKV_PREFILL_TMA_OVERLAP
    for (int t = t0 + KS; t < n; t += KS) {
      pack_p();
      wgmma_fence();  // S was read, pa written
      issue_qk(t);
      rescale_o();    // while QK^T(t) runs
      wgmma_fence();  // O was written
      issue_pv(t - KS);
      wgmma_wait<1>();  // QK^T(t), committed first, has retired; PV(t - KS) may still run
      softmax(t);
      release(T::empty_k(t % S));
      wgmma_wait<0>();
      release(T::empty_v((t - KS) % S));
    }
    pack_p();
    rescale_o();
#else
    pack_p();
    for (int t = t0 + KS; t < n; t += KS) {
      wgmma_fence();  // pa and O were written by the softmax
      issue_pv(t - KS);
      issue_qk(t);
      wgmma_wait<0>();
      release(T::empty_v((t - KS) % S));
      softmax(t);
      release(T::empty_k(t % S));
      pack_p();
    }
#endif
    // The last tile of this warpgroup: the largest t0 + KS u below n.
    const int last = t0 + (n - 1 - t0) / KS * KS;
    wgmma_fence();
    issue_pv(last);
    wgmma_wait<0>();
    release(T::empty_v(last % S));
  }
  if constexpr (QT == 2) pages.finish(p, c, rows);
  if constexpr (KS == 2) {
    merge_key_halves<T, DT>(smem, half, o, m, lsum);
    if (half != 0) return;
  }
  write_partials(p, c, rows, o, m, lsum);
}

}  // namespace minimakv::cuda::detail
