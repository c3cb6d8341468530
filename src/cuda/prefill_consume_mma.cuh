// The prefill CTA's consumer warps on mma.sync (any sm_80+ GPU, and the kernel lab's challenger on
// Hopper): four warps of 16 x kMI query rows each.
//
// Owns: one consumer warp's loop over the key tiles. Per tile: S = Q K^T as m16n8k16 fp16 MMAs with
// fragments read by ldmatrix (Q rows and K rows as the B operand's columns; one or two query terms), the
// shared softmax step, O += P V with the S accumulators of two n8 tiles as the A fragment of one k16
// step and V read transposed by ldmatrix. K fragments are reused across the warp's kMI row tiles.
#pragma once

#include "prefill_tile.cuh"

namespace minimakv::cuda::detail {

template <codec::PageFormat F, int D, int QT>
__device__ void prefill_consume_mma(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  using T = PrefillTile<F, D, QT, false>;
  constexpr int MI = T::kMI, NT = T::kNT, DT = D / 8;
  const int lane = threadIdx.x & 31, cw = threadIdx.x >> 5;
  stage_query<T, F, D, QT>(p, c, smem);
  const ConsumerRows<MI> rows(p, c, cw * 16 * MI, lane);
  const int q_min = c.sq.first + c.wk.tile_token + c.row0 / p.group;  // the CTA's first query position
  // Per-lane ldmatrix addresses: Q (A operand), K (B, keys as columns), V (B, transposed).
  const uint32_t q_lane = smem_u32(smem + T::kQ) + T::q_chunk(cw * 16 * MI + (lane & 15), lane >> 4);
  const uint32_t k_lane = T::k_chunk((lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1);
  const uint32_t v_lane = T::v_chunk(((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4);

  float m[MI][2], lsum[MI][2], o[MI][DT][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    m[mi][0] = m[mi][1] = -INFINITY;
    lsum[mi][0] = lsum[mi][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[mi][dt][0] = o[mi][dt][1] = o[mi][dt][2] = o[mi][dt][3] = 0.0f;
  }
  PagePartials<MI, NT> pages;  // used with two query terms (both serve the page scores)

  const int n = c.wk.key_tiles;
  for (int t = 0; t < n; ++t) {
    const int b = t % T::kBuffers;
    named_sync(T::kFullBar + b, T::kFullCount);
    const uint8_t* buf = smem + T::kBuf + static_cast<size_t>(b) * T::kBufferBytes;
    const uint32_t kb = smem_u32(buf), vb = kb + static_cast<uint32_t>(T::kHalfTile);
    const int* kpos = reinterpret_cast<const int*>(buf + 2 * T::kHalfTile);
    const bool masked = max(kpos[3 * T::kKeys], kpos[3 * T::kKeys + 1]) > q_min;

    // S = Q K^T (base-2 logits before the key scales).
    float s[MI][NT][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[QT][MI][4];
#pragma unroll
      for (int qt = 0; qt < QT; ++qt)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
          ldsm_x4(qa[qt][mi], q_lane + (qt * T::kRows + mi * 16) * T::kRowBytes + kk * 32);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t kf[4];
        ldsm_x4(kf, kb + k_lane + np * 16 * T::kRowBytes + kk * 32);
#pragma unroll
        for (int qt = 0; qt < QT; ++qt)
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            mma16816(s[mi][2 * np], qa[qt][mi], kf[0], kf[1]);
            mma16816(s[mi][2 * np + 1], qa[qt][mi], kf[2], kf[3]);
          }
      }
    }
    float mref[MI][2];
    softmax_step<F>(s, o, m, lsum, mref, rows, kpos, reinterpret_cast<const float*>(kpos + T::kKeys), masked);
    if constexpr (QT == 2) pages.add(p, c, rows, s, mref, kpos + 2 * T::kKeys, T::kKeys);
      // O += P V: the S accumulators of two n8 tiles are the A fragment of one k16 step.
#pragma unroll
    for (int kk = 0; kk < T::kKeys / 16; ++kk) {
      uint32_t pa[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        pa[mi][0] = pack_half2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][1] = pack_half2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][2] = pack_half2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][3] = pack_half2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vf[4];
        ldsm_x4_trans(vf, vb + v_lane + kk * 16 * T::kRowBytes + dp * 32);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma16816(o[mi][2 * dp], pa[mi], vf[0], vf[1]);
          mma16816(o[mi][2 * dp + 1], pa[mi], vf[2], vf[3]);
        }
      }
    }
    if (t + T::kBuffers < n) named_arrive(T::kEmptyBar + b, T::kThreads);
  }
  if constexpr (QT == 2) pages.finish(p, c, rows);
  write_partials(p, c, rows, o, m, lsum);
}

}  // namespace minimakv::cuda::detail
