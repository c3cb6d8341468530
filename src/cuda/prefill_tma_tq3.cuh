// The TQ3 producer warpgroup of the copy-engine prefill CTA (prefill_tma_tile.cuh has its layout and
// hand-off; the consumers are prefill_tma_consume.cuh's, on fp16 operands in the rotated domain: the
// query tile is R q, and the merge rotates the TQ3 share of the output back once).
//
// Owns: how TQ3 codes reach the consumers' swizzled fp16 tiles. The copy engine brings a tile's packed
// codes (3 bits a scalar, 48 bytes per 128 codes) into the stage's slot of the raw ring, a ring of its
// own beside the fp16 buffers (a TQ3 tile is 3/16 of its fp16 size, so the ring is cheap and the next
// tiles' codes land while the consumers still read this tile's fp16 rows). Each producer thread turns
// its row (head_dim 256: one half row) into fp16 in registers: the codes are spread to one nibble each
// and a byte permute (prmt) picks every code's level from two byte tables held in registers, so the
// decode touches shared memory only to read its row and write the fp16 chunks (a shared-memory level
// table, as the decoding CTA uses, would cost one load per pair of codes and conflict across lanes).
// V rows are multiplied by their alpha in fp16, as the decoding CTA does, and so are K rows with one
// query term (kKeyScaledByProducer); with page scores K alphas go to the softmax with the tile's positions.
// Raw ring: stage b's K codes at raw_k_tile(b), its V codes at raw_v_tile(b), kRawHalf bytes each; a
// box of 128 codes is 48-byte rows (no swizzle: 16-byte chunks of consecutive 48-byte rows fall on
// distinct banks), head_dim 256 two boxes (codes 0-127, 128-255), the second kKeys x 48 bytes after the first.
// Pipeline (as many K stages as V stages, S): the codes of tiles t .. t + S - 1 are in flight; per tile
// t: widen and publish K(t) once its stage is released, then V(t), then copy tile t + S's codes into the
// ring stage just read (the producers' barrier that decides how tile t + S is copied orders every
// thread's reads before the copy). Every producer thread publishes its own rows (publish_widened), so
// the producers meet once per tile.
// Invariants: a ring stage is refilled only after every producer thread read it; the raw barriers of a
// stage complete once per tile the copy engine filled (one phase bit per stage, K and V alike); every
// tile commits exactly one cp.async group, so waiting for tile t leaves S - 1 groups pending.
#pragma once

#include <cuda_fp16.h>

#include "minimakv/codec/tq3.h"
#include "prefill_tma_tile.cuh"
#include "tq3_registers.cuh"

namespace minimakv::cuda::detail {

// A thread's 128 codes (48 bytes at raw) into chunks c0.. of row j of fp16 buffer X, times a2 when Scaled.
template <class T, bool Scaled>
__device__ inline void widen_tq3_row(const uint8_t* raw, uint8_t* X, int j, int c0, __half2 a2,
                                     const Tq3LevelBytes& tb) {
  uint32_t w[12];
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    const uint4 v = reinterpret_cast<const uint4*>(raw)[q];
    w[4 * q] = v.x;
    w[4 * q + 1] = v.y;
    w[4 * q + 2] = v.z;
    w[4 * q + 3] = v.w;
  }
#pragma unroll
  for (int gi = 0; gi < 16; ++gi) {
    const int bit = 24 * gi, wi = bit / 32, sh = bit % 32;
    uint4 v = tq3x8_to_half(sh <= 8 ? w[wi] >> sh : __funnelshift_r(w[wi], w[wi + 1], sh), tb);
    if constexpr (Scaled) {
      uint32_t* h = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const __half2 y = __hmul2(*reinterpret_cast<const __half2*>(&h[q]), a2);
        h[q] = *reinterpret_cast<const uint32_t*>(&y);
      }
    }
    *reinterpret_cast<uint4*>(X + T::chunk(T::kKeys, j, c0 + gi)) = v;
  }
}

template <int D, int QT>
__device__ void prefill_produce_tq3(const PrefillTmaParams& tp, const PrefillWork& c, uint8_t* smem) {
  using T = TmaTile<D, QT, codec::PageFormat::kTq3>;
  constexpr int S = T::kKStages, K = T::kKeys, kBoxes = D / 128;
  static_assert(T::kVStages == S, "a ring stage holds one tile's K and V codes");
  constexpr bool kScaledK = kKeyScaledByProducer<codec::PageFormat::kTq3, D, QT>;  // K rows times their alpha
  constexpr uint32_t kBoxRow = 48;  // bytes of 128 codes
  static_assert(D % 128 == 0 && kBoxes * K == 128, "one row (head_dim 256: half row) per producer thread");
  const PrefillParams& p = tp.p;
  const int pt = static_cast<int>(threadIdx.x) - T::kConsumers, j = pt % K, box = pt / K;
  const ProducerPool pool(p, codec::PageFormat::kTq3, c.h);
  const uint32_t sbase = smem_u32(smem);
  if (pt == 0) {
    tma_prefetch_map(&tp.k3_map);
    tma_prefetch_map(&tp.v3_map);
  }
  const Tq3LevelBytes tb;
  const uint32_t row_off = box * K * kBoxRow + j * kBoxRow;  // this thread's row in a raw K or V tile
  uint32_t raw_phase = 0;  // bit b: parity of the next phase of stage b's raw barriers

  struct Tile {
    KeySlot k;
    __half k_alpha, v_alpha;  // converted where used, so that their loads' latency hides behind a tile
    bool by_tma;
  };
  // Tile t's key slot, whether the copy engine can fill it (the BF16 producer's rule), its alphas, and
  // its K and V codes on their way into ring stage t mod S.
  KeyCursor cursor(c, j);
  auto start = [&](int t) {
    const int b = t % S;
    Tile x;
    x.k = next_tile_slot<T>(cursor, c, pool, p.tokens_per_page, tp.tma3, x.by_tma);
    x.k_alpha = pool.meta<__half>(x.k, pool.L.k_meta);
    x.v_alpha = pool.meta<__half>(x.k, pool.L.v_meta);
    const uint32_t rk = sbase + T::raw_k_tile(b), rv = sbase + T::raw_v_tile(b);
    if (x.by_tma) {
      if (pt == 0) {
        fence_proxy_async();  // the generic reads of tile t - S's codes before the copy engine rewrites them
        mbarrier_arrive_expect_tx(sbase + T::raw_k(b), T::kRawHalf);
        mbarrier_arrive_expect_tx(sbase + T::raw_v(b), T::kRawHalf);
        for (int s = 0; s < K / tp.box_rows; ++s) {
          const BoxOrigin o = box_origin(c, t * K + s * tp.box_rows);
#pragma unroll
          for (int bx = 0; bx < kBoxes; ++bx) {
            const uint32_t off = (bx * K + s * tp.box_rows) * kBoxRow;
            tma_load_4d(rk + off, &tp.k3_map, bx * kBoxRow, o.tok, c.h, o.page, sbase + T::raw_k(b));
            tma_load_4d(rv + off, &tp.v3_map, bx * kBoxRow, o.tok, c.h, o.page, sbase + T::raw_v(b));
          }
        }
      }
    } else {
      const bool real = x.k.page != nullptr;
      const uint8_t *ksrc = pool.row(x.k, false, box * kBoxRow), *vsrc = pool.row(x.k, true, box * kBoxRow);
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        cp_async16_zfill(rk + row_off + 16 * q, ksrc + 16 * q, real);
        cp_async16_zfill(rv + row_off + 16 * q, vsrc + 16 * q, real);
      }
    }
    cp_async_commit();  // one group per tile, empty where the copy engine fills it
    return x;
  };
  auto publish = [&](uint32_t full) { publish_widened<T>(sbase, full, pt); };

  const int n = c.wk.key_tiles;
  Tile ahead[S];  // the tiles in flight, oldest first (compile-time indices: they stay in registers)
#pragma unroll
  for (int t = 0; t < S; ++t) {
    if (t < n)
      ahead[t] = start(t);
    else
      cp_async_commit();
  }
  for (int t = 0; t < n; ++t) {
    const int b = t % S;
    const Tile x = ahead[0];
    const uint32_t parity = (raw_phase >> b) & 1u, released = ((t / S) & 1) ^ 1;
    if (x.by_tma)
      mbarrier_wait(sbase + T::raw_k(b), parity);
    else
      cp_async_wait<S - 1>();  // tile t's group (K and V)
    if (t >= S) mbarrier_wait(sbase + T::empty_k(b), released);
    write_tma_meta<T>(smem, b, pt, x.k, kScaledK ? 1.0f : __half2float(x.k_alpha));
    widen_tq3_row<T, kScaledK>(smem + T::raw_k_tile(b) + row_off, smem + T::k_tile(b), j, 16 * box,
                               __half2half2(x.k_alpha), tb);
    publish(T::full_k(b));  // also publishes the meta
    if (x.by_tma) {
      mbarrier_wait(sbase + T::raw_v(b), parity);
      raw_phase ^= 1u << b;
    }
    if (t >= S) mbarrier_wait(sbase + T::empty_v(b), released);
    widen_tq3_row<T, true>(smem + T::raw_v_tile(b) + row_off, smem + T::v_tile(b), j, 16 * box,
                           __half2half2(x.v_alpha), tb);
    publish(T::full_v(b));
#pragma unroll
    for (int i = 0; i + 1 < S; ++i) ahead[i] = ahead[i + 1];
    if (t + S < n)
      ahead[S - 1] = start(t + S);
    else
      cp_async_commit();
  }
  cp_async_wait<0>();
}

}  // namespace minimakv::cuda::detail
