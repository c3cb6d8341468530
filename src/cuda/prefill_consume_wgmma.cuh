// The prefill CTA's consumers on Hopper warpgroup MMAs (wgmma, sm_90a): one warpgroup per 64 query rows,
// two warpgroups at head_dim <= 128 and one at 256.
//
// Owns: one consumer warpgroup's loop over the key tiles. Per tile: S = Q K^T as m64nKk16 wgmmas with
// both operands read by the tensor cores from shared memory (Q and the K tile in core-matrix layout,
// K-major; one or two query terms), the shared softmax step on the accumulators (whose layout per warp
// is the m16n8 layout, repeated over n), then O += P V as m64nDk16 wgmmas with P from registers (the S
// accumulators of two n8 tiles are the A fragment of one k16 step) and V from shared memory read
// transposed (MN-major). The two warpgroups run independently between the tile barriers, so one's
// softmax overlaps the other's MMAs.
// Invariant: compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); paged_prefill.cu launches it only on
// devices of compute capability 9.0, where that code is the one loaded.
#pragma once

#include "prefill_tile.cuh"
#include "wgmma.cuh"

namespace minimakv::cuda::detail {

template <codec::PageFormat F, int D, int QT>
__device__ void prefill_consume_wgmma(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  using T = PrefillTile<F, D, QT, true>;
  constexpr int NT = T::kNT, DT = D / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp / 4;
  stage_query<T, F, D, QT>(p, c, smem);
  const ConsumerRows<1> rows(p, c, 64 * wg + 16 * (warp % 4), lane);
  const int q_min = c.sq.first + c.wk.tile_token + c.row0 / p.group;  // the CTA's first query position
  const uint32_t q_base = smem_u32(smem + T::kQ) + T::q_chunk(64 * wg, 0);

  float m[1][2] = {{-INFINITY, -INFINITY}}, lsum[1][2] = {{0.0f, 0.0f}}, o[1][DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
  auto& o_acc = reinterpret_cast<float(&)[DT * 4]>(o);
  PagePartials<1, NT> pages;  // used with two query terms (both serve the page scores)

  const int n = c.wk.key_tiles;
  for (int t = 0; t < n; ++t) {
    const int b = t % T::kBuffers;
    named_sync(T::kFullBar + (T::kPingPong ? wg : 0) * T::kBuffers + b, T::kFullCount);
    const uint8_t* buf = smem + T::kBuf + static_cast<size_t>(b) * T::kBufferBytes;
    const uint32_t kb = smem_u32(buf), vb = kb + static_cast<uint32_t>(T::kHalfTile);
    const int* kpos = reinterpret_cast<const int*>(buf + 2 * T::kHalfTile);
    const bool masked = max(kpos[3 * T::kKeys], kpos[3 * T::kKeys + 1]) > q_min;

    // S = Q K^T (base-2 logits before the key scales); a k16 step is two 8-element chunks (LBO apart).
    float s[1][NT][4];
    auto& s_acc = reinterpret_cast<float(&)[NT * 4]>(s);
    if constexpr (T::kPingPong)
      if (wg == 1 || t > 0) named_sync(T::kTurnBar + wg, 256);  // my turn on the tensor cores
    wgmma_fence();
#pragma unroll
    for (int qt = 0; qt < QT; ++qt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<__half, 8 * NT>(s_acc, gmma_desc(q_base + qt * T::kRows * T::kRowBytes + kk * 2 * T::kQLbo, T::kQLbo, T::kQSbo),
                     gmma_desc(kb + kk * 2 * T::kKLbo, T::kKLbo, T::kKSbo), qt | kk);
    wgmma_commit();
    if constexpr (T::kPingPong)
      if (wg == 0 || t + 1 < n) named_arrive(T::kTurnBar + 1 - wg, 256);  // the other's turn
    wgmma_wait<0>();

    float mref[1][2];
    softmax_step<F>(s, o, m, lsum, mref, rows, kpos, reinterpret_cast<const float*>(kpos + T::kKeys), masked);
    if constexpr (QT == 2) pages.add(p, c, rows, s, mref, kpos + 2 * T::kKeys, T::kKeys);

    // O += P V: V's k16 step is two blocks of 8 keys (LBO apart), its n runs over 8-element chunks (SBO).
    uint32_t pa[T::kKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < T::kKeys / 16; ++kk) {
      pa[kk][0] = pack_half2(s[0][2 * kk][0], s[0][2 * kk][1]);
      pa[kk][1] = pack_half2(s[0][2 * kk][2], s[0][2 * kk][3]);
      pa[kk][2] = pack_half2(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pa[kk][3] = pack_half2(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kKeys / 16; ++kk)
      wgmma_rs<__half, D>(o_acc, pa[kk], gmma_desc(vb + kk * 2 * T::kVLbo, T::kVLbo, T::kVSbo));
    wgmma_commit();
    wgmma_wait<0>();
    if (t + T::kBuffers < n) named_arrive(T::kEmptyBar + b, T::kThreads);
  }
  if constexpr (QT == 2) pages.finish(p, c, rows);
  write_partials(p, c, rows, o, m, lsum);
}

}  // namespace minimakv::cuda::detail
