// The FP8 producer warpgroup of the copy-engine prefill CTA (prefill_tma_tile.cuh has its layout and
// hand-off; the consumers are prefill_tma_consume.cuh's, on fp16 operands).
//
// Owns: how FP8 codes reach the consumers' swizzled fp16 tiles. The copy engine brings a tile's raw
// codes (one byte a scalar) into the very buffer their fp16 values will fill (Fp8Raw, prefill_tma_tile.cuh);
// the producer threads widen them in place (E4M3 is exact in fp16; V rows, and with one query term K
// rows too, times their scale as fp16x2, the scale rounded to fp16 first; with page scores K scales go to
// the softmax through the stage's meta). No staging ring: the raw half-tile costs no shared memory of its
// own, so the stages are those of the BF16 CTA. At head_dim 128 with one query term the codes land in a
// ring of their own instead (prefill_produce_fp8_ring, at the end of this file), which fits there.
// Raw layout (in a K or V buffer X of kHalfTile bytes, Fp8Raw::box_at): the boxes in the upper half
// (X + kHalfTile / 2), one after the other: head_dim 64 one box of kKeys rows of 64 bytes, 128 one box
// of 128-byte rows, 256 two (codes 0-127, 128-255). Rows of 128 bytes use the copy engine's 128-byte
// swizzle (16-byte chunk q of row j at q ^ (j mod 8)), rows of 64 bytes its 64-byte swizzle
// (q ^ ((j / 2) mod 4)), so that a warp reading one chunk of 32 rows hits every bank once per 8 rows.
// Widening in place: each thread owns one raw row (head_dim 256: one box of one row) and reads only
// bytes it copied or waited for. At head_dim 128 the fp16 row's block 1 is exactly the raw row's bytes
// and block 0 holds no codes, so a thread widens its four lower chunks into block 0, reads its four
// upper chunks, then writes them: no producer waits for another (Fp8Raw::kBlockPerBox; the lab's
// MINIMAKV_PREFILL_FP8_RAW_BLOCKS=1 does the same at 256, box b on block 2b + 1). At 64 and 256 an
// output row covers other threads' raw rows, so every thread reads its whole raw row, the producers
// meet at a barrier, then all write.
// Pipeline per tile t, as many K stages as V stages: widen and publish K(t), copy V(t)'s codes once its
// stage is released, then K(t + 1)'s once its stage is, then widen and publish V(t): both copies are in
// flight together. One K stage more than V (kLag): widen and publish K(t), copy K(t + 1)'s codes, widen
// and publish V(t - 1) (copied during the last tile), then copy V(t)'s codes. Where the
// consumers multiply K's codes as E4M3 (kFp8QkWgmma), K is never widened: its copy lands straight on
// FULL_K, and the producer only widens V.
// Invariant: the raw barriers of a stage complete once per tile the copy engine filled; each thread
// tracks their phases in a bit mask (a tile filled by cp.async does not touch them).
#pragma once

#include "prefill_tma_tile.cuh"

namespace minimakv::cuda::detail {

// Kernel-lab switches on how the producer widens codes (H100 results in docs/benchmarks.md):
// MINIMAKV_PREFILL_FP8_V_HALF (default 1; 0 is the former widening, 4% slower at head_dim 128): a row
// times its scale as one fp16x2 multiply (the scale rounded to fp16 first, so a value rounds twice:
// 2^-11 relative at most each time, far below E4M3's own 2^-4), instead of through fp32 with a
// conversion each way. SHIFT (5-10% slower) and V_AHEAD (1-4% slower at head_dim 128) stay off.
// MINIMAKV_PREFILL_FP8_SHIFT: E4M3 widened by integer bit moves to fp16 x 2^-8 (exact, subnormals
// included: the 4-bit exponent and 3-bit mantissa drop into the fp16 fields with a zero bit before
// them), the K and V scales carrying the 2^8; tests whether the conversion pipe bounds the producer. A
// NaN code reads as 480 under it.
// MINIMAKV_PREFILL_FP8_V_AHEAD: V(t + 1)'s copy is issued right after V(t) is widened, not after
// K(t + 1)'s (equal K and V stage counts only).
#ifndef MINIMAKV_PREFILL_FP8_V_HALF
#define MINIMAKV_PREFILL_FP8_V_HALF 1
#endif
#ifndef MINIMAKV_PREFILL_FP8_SHIFT
#define MINIMAKV_PREFILL_FP8_SHIFT 0
#endif
#ifndef MINIMAKV_PREFILL_FP8_V_AHEAD
#define MINIMAKV_PREFILL_FP8_V_AHEAD 0
#endif
inline constexpr float kFp8WidenScale = MINIMAKV_PREFILL_FP8_SHIFT ? 256.0f : 1.0f;  // what widened codes lack

// Two E4M3 codes (the low 16 bits of `pair`) as fp16x2 of their values times 2^-8: each byte moved to
// the top of its half, shifted right by one (its sign lands on bit 14), then the sign carried up to
// bit 15 by adding bit 14 to itself.
__device__ inline uint32_t fp8x2_to_half2_shifted(uint32_t pair) {
  const uint32_t t = __byte_perm(pair, 0u, 0x1404u) >> 1;  // byte 0 -> bits 7..14, byte 1 -> 23..30
  return t + (t & 0x40004000u);
}

// Sixteen E4M3 codes as sixteen fp16 values (two 16-byte chunks) for the copy-engine CTA, times
// `scale` when scaled (times 2^-8 more under MINIMAKV_PREFILL_FP8_SHIFT).
template <bool Scaled>
__device__ inline void widen16_tma(const uint4& x, float scale, uint4& lo, uint4& hi) {
  if constexpr (!MINIMAKV_PREFILL_FP8_V_HALF && !MINIMAKV_PREFILL_FP8_SHIFT) {
    widen16<Scaled>(x, scale, lo, hi);
  } else {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    uint32_t h[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if constexpr (MINIMAKV_PREFILL_FP8_SHIFT) {
        h[2 * q] = fp8x2_to_half2_shifted(w[q]);
        h[2 * q + 1] = fp8x2_to_half2_shifted(w[q] >> 16);
      } else {
        h[2 * q] = fp8x2_to_half2(w[q]);
        h[2 * q + 1] = fp8x2_to_half2(w[q] >> 16);
      }
    }
    if constexpr (Scaled) {
      const __half2 s2 = __float2half2_rn(scale);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        if constexpr (MINIMAKV_PREFILL_FP8_V_HALF) {
          const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&h[q]), s2);
          h[q] = *reinterpret_cast<const uint32_t*>(&v);
        } else {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[q]));
          h[q] = pack_half2(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
        }
      }
    }
    lo = make_uint4(h[0], h[1], h[2], h[3]);
    hi = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// Raw chunk x (16 codes) widened into fp16 chunks c and c + 1 of row j of buffer X in T's layout.
template <class T, bool Scaled>
__device__ inline void widen_chunk(const uint4& x, float scale, uint8_t* X, int j, int c) {
  widen16_tma<Scaled>(x, scale, *reinterpret_cast<uint4*>(X + T::chunk(T::kKeys, j, c)),
                      *reinterpret_cast<uint4*>(X + T::chunk(T::kKeys, j, c + 1)));
}

// Eight raw 16-byte chunks (chunk q at raw + 16 (q ^ swz)) widened to fp16 chunks c0 + 2q and c0 + 2q + 1
// of row j of buffer X in T's layout, times scale when Scaled: two passes of four loads, then their four
// widenings, so the second pass may overwrite the chunks it read (the in-place producer's raw row lies
// in the block its second pass writes; the first pass writes the block before it).
template <class T, bool Scaled>
__device__ inline void widen_raw128(const uint8_t* raw, int swz, uint8_t* X, int j, int c0, float scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint4 x[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) x[q] = *reinterpret_cast<const uint4*>(raw + 16 * ((4 * h + q) ^ swz));
#pragma unroll
    for (int q = 0; q < 4; ++q) widen_chunk<T, Scaled>(x[q], scale, X, j, c0 + 2 * (4 * h + q));
  }
}

// Widens row j (box `box`) of the raw codes in buffer X (generic pointer) to fp16 in T's layout.
template <class T, int D, bool Scaled>
__device__ inline void widen_row(uint8_t* X, int j, int box, float scale) {
  using R = Fp8Raw<D>;
  constexpr int K = T::kKeys;
  uint8_t* raw = X + R::box_at(K, box) + j * R::kRowBytes;
  const int c0 = box * 2 * R::kChunks;  // first output chunk of this thread's codes
  if constexpr (R::kBlockPerBox) {
    // Output block 2 box holds no codes; row j of block 2 box + 1 is raw row j itself.
    widen_raw128<T, Scaled>(raw, R::swz(j), X, j, c0, scale);
  } else {
    uint4 x[R::kChunks];
#pragma unroll
    for (int q = 0; q < R::kChunks; ++q) x[q] = *reinterpret_cast<const uint4*>(raw + 16 * (q ^ R::swz(j)));
    named_sync(T::kProducersBar, 128);  // every raw row is read before any is overwritten
#pragma unroll
    for (int q = 0; q < R::kChunks; ++q) widen_chunk<T, Scaled>(x[q], scale, X, j, c0 + 2 * q);
  }
}

template <int D, int QT>
__device__ void prefill_produce_fp8(const PrefillTmaParams& tp, const PrefillWork& c, uint8_t* smem) {
  using T = TmaTile<D, QT, codec::PageFormat::kFp8>;
  using R = Fp8Raw<D>;
  constexpr int K = T::kKeys, kBoxes = D / R::kRowBytes;
  constexpr bool kDirectK = kFp8QkWgmma<codec::PageFormat::kFp8, D>;  // K's codes are not widened
  constexpr bool kScaledK = kKeyScaledByProducer<codec::PageFormat::kFp8, D, QT>;  // K widened times its scale
  static_assert(kBoxes * K == 128, "one raw row (or box row) per producer thread");
  static_assert(!kDirectK || kPublishByEach, "FULL_K counts every producer thread's arrival");
  const PrefillParams& p = tp.p;
  const int pt = static_cast<int>(threadIdx.x) - T::kConsumers, j = pt % K, box = pt / K;
  const ProducerPool pool(p, codec::PageFormat::kFp8, c.h);
  const uint32_t sbase = smem_u32(smem);
  if (pt == 0) {
    tma_prefetch_map(&tp.k8_map);
    tma_prefetch_map(&tp.v8_map);
  }
  uint32_t raw_k_phase = 0, raw_v_phase = 0;  // bit b: parity of the next phase of K (V) stage b's raw barrier

  // Tile t's codes of K or V into the raw half of buffer X (shared address xs), by the copy engine
  // (the first thread issues, completing on `bar`) or by each thread's zero-filling cp.async.
  auto copy_raw = [&](int t, bool v, bool by_tma, const KeySlot& k, uint32_t xs, uint32_t bar) {
    if (by_tma) {
      if (pt == 0) {
        const CUtensorMap* map = v ? &tp.v8_map : &tp.k8_map;
        mbarrier_arrive_expect_tx(bar, K * D);
        for (int s = 0; s < K / tp.box_rows; ++s) {
          const BoxOrigin o = box_origin(c, t * K + s * tp.box_rows);
#pragma unroll
          for (int bx = 0; bx < kBoxes; ++bx)
            tma_load_4d(xs + R::box_at(K, bx) + s * tp.box_rows * R::kRowBytes, map, bx * R::kRowBytes, o.tok, c.h,
                        o.page, bar);
        }
      }
    } else {
      const uint8_t* src = pool.row(k, v, box * R::kRowBytes);
      const uint32_t dst = xs + R::box_at(K, box) + j * R::kRowBytes;
#pragma unroll
      for (int q = 0; q < R::kChunks; ++q) cp_async16_zfill(dst + 16 * (q ^ R::swz(j)), src + 16 * q, k.page != nullptr);
      cp_async_commit();
    }
  };
  // Waits for tile t's raw codes (each thread for what it needs: its own row either way).
  auto await_raw = [&](int t, bool v, bool by_tma) {
    const int b = v ? T::v_stage(t) : T::k_stage(t);
    if (by_tma) {
      uint32_t& phase = v ? raw_v_phase : raw_k_phase;
      mbarrier_wait(sbase + (v ? T::raw_v(b) : T::raw_k(b)), (phase >> b) & 1u);
      phase ^= 1u << b;
    } else {
      cp_async_wait<0>();
    }
  };
  auto publish = [&](uint32_t full) { publish_widened<T>(sbase, full, pt); };
  // Tile t's key slot and whether the copy engine can fill it (the BF16 producer's rule: every row
  // holds one of its page's tokens or lies past the page's span), its meta, and its K codes on the way.
  KeyCursor cursor(c, j);
  auto start_tile = [&](int t, KeySlot& k, bool& by_tma, float& kscale, float& vscale) {
    const int b = T::k_stage(t);
    k = next_tile_slot<T>(cursor, c, pool, p.tokens_per_page, tp.tma8, by_tma);
    kscale = pool.meta<float>(k, pool.L.k_meta) * (kDirectK ? 1.0f : kFp8WidenScale);  // exact: 2^n
    vscale = pool.meta<float>(k, pool.L.v_meta) * kFp8WidenScale;
    if (t >= T::kKStages) mbarrier_wait(sbase + T::empty_k(b), T::k_parity(t) ^ 1);
    write_tma_meta<T>(smem, b, pt, k, kScaledK ? 1.0f : kscale);
    if (by_tma && pt == 0) fence_proxy_async();  // earlier generic reads of this buffer before the copy
    if constexpr (kDirectK) {
      // The codes are the consumers' operand: the copy completes FULL_K itself (the first thread's
      // arrival brings its bytes), every other thread arrives once its meta is written; a tile by
      // cp.async is published by each thread after its own row has landed.
      const uint32_t full = sbase + T::full_k(b);
      copy_raw(t, false, by_tma, k, sbase + T::k_tile(b), full);
      if (by_tma) {
        if (pt != 0) mbarrier_arrive(full);
      } else {
        cp_async_wait<0>();
        publish(T::full_k(b));
      }
    } else {
      copy_raw(t, false, by_tma, k, sbase + T::k_tile(b), sbase + T::raw_k(b));
    }
  };

  // V of tile u: its codes on the way once its stage is released (the key slot and vote from the step
  // that started tile u), then, once they landed, widened and published.
  auto copy_v = [&](int u, const KeySlot& ku, bool tma_u) {
    const int b = T::v_stage(u);
    if (u >= T::kVStages) mbarrier_wait(sbase + T::empty_v(b), T::v_parity(u) ^ 1);
    if (tma_u && pt == 0) fence_proxy_async();
    copy_raw(u, true, tma_u, ku, sbase + T::v_tile(b), sbase + T::raw_v(b));
  };
  auto finish_v = [&](int u, bool tma_u, float vscale_u) {
    await_raw(u, true, tma_u);
    widen_row<T, D, true>(smem + T::v_tile(T::v_stage(u)), j, box, vscale_u);
    publish(T::full_v(T::v_stage(u)));
  };

  const int n = c.wk.key_tiles;
  KeySlot k{};
  bool by_tma = false;
  float kscale = 0.0f, vscale = 0.0f;  // of the tile start_tile began last
  start_tile(0, k, by_tma, kscale, vscale);
  bool lag_tma = false;  // kLag: the vote and V scale of the tile whose V codes are in flight
  float lag_vscale = 0.0f;
  for (int t = 0; t < n; ++t) {
    if constexpr (!kDirectK) {
      const int b = T::k_stage(t);
      await_raw(t, false, by_tma);
      widen_row<T, D, kScaledK>(smem + T::k_tile(b), j, box, kscale);  // tile t's: t + 1 starts below
      publish(T::full_k(b));  // also publishes the meta written in start_tile
    }
    const KeySlot cur = k;
    const bool cur_tma = by_tma;
    const float cur_vscale = vscale;
    if constexpr (T::kLag == 0) {
      // V(t)'s stage is released before K(t + 1)'s (the consumers free V after PV and K after the
      // softmax that reads its positions), so V(t)'s copy goes first and K(t + 1)'s flies while it lands.
      if constexpr (MINIMAKV_PREFILL_FP8_V_AHEAD) {
        if (t == 0) copy_v(0, cur, cur_tma);
        if (t + 1 < n) start_tile(t + 1, k, by_tma, kscale, vscale);
        finish_v(t, cur_tma, cur_vscale);
        if (t + 1 < n) copy_v(t + 1, k, by_tma);
      } else {
        copy_v(t, cur, cur_tma);
        if (t + 1 < n) start_tile(t + 1, k, by_tma, kscale, vscale);
        finish_v(t, cur_tma, cur_vscale);
      }
    } else {
      // One K stage more than V: K(t + 1)'s stage was released two tiles ago, so its copy goes first;
      // V(t - 1), which the consumers need with K(t), was copied during the last step; V(t)'s copy
      // waits for the PV of tile t - 2 and flies during the next step.
      if (t + 1 < n) start_tile(t + 1, k, by_tma, kscale, vscale);
      if (t > 0) finish_v(t - 1, lag_tma, lag_vscale);
      copy_v(t, cur, cur_tma);
      lag_tma = cur_tma;
      lag_vscale = cur_vscale;
    }
  }
  if constexpr (T::kLag == 1)
    if (n > 0) finish_v(n - 1, lag_tma, lag_vscale);
}

// ---- the FP8 raw ring (head_dim 128, one query term; MINIMAKV_PREFILL_FP8_RING=0 is the in-place
// producer above, 10-16% slower there on an H100)
// The in-place producer above can copy a tile's codes only once the consumers released the fp16
// stage they land in, so V(t)'s copy is issued right before the producer needs it and its latency sits
// on the path to every tile. Here the codes land in a ring of their own (TmaTile::kFp8RingK K stages,
// kFp8RingV V stages of raw 128-byte rows, 128-byte swizzle, beside the fp16 stages), refilled as soon
// as the producers have read a stage: per tile t, widen K(t) from the ring into its fp16 stage, then
// V(t), then copy K(t + 2) and V(t + 1) into the ring stages just read (the vote's barrier in
// next_tile_slot orders every thread's reads before the copy engine rewrites them). Each thread widens
// its own row (no producers' barrier). cp.async groups: {K(0), V(0)}, {K(1)}, then one per tile
// {K(t + 2), V(t + 1)}, so K(t) is waited for with one group pending and V(t) with none.

template <int D, int QT>
__device__ void prefill_produce_fp8_ring(const PrefillTmaParams& tp, const PrefillWork& c, uint8_t* smem) {
  using T = TmaTile<D, QT, codec::PageFormat::kFp8>;
  constexpr int K = T::kKeys, RK = T::kFp8RingK;
  static_assert(T::kFp8Ring && D == 128 && K == 128 && RK == 2 && T::kFp8RingV == 1 && T::kLag == 0,
                "the ring producer is written for head_dim 128: one raw row per thread, two K and one V ring stage");
  constexpr bool kScaledK = kKeyScaledByProducer<codec::PageFormat::kFp8, D, QT>;
  const PrefillParams& p = tp.p;
  const int pt = static_cast<int>(threadIdx.x) - T::kConsumers, j = pt;
  const ProducerPool pool(p, codec::PageFormat::kFp8, c.h);
  const uint32_t sbase = smem_u32(smem);
  if (pt == 0) {
    tma_prefetch_map(&tp.k8_map);
    tma_prefetch_map(&tp.v8_map);
  }
  struct Tile {
    KeySlot k;
    float kscale, vscale;
    bool by_tma;
  };
  KeyCursor cursor(c, j);
  // The next tile's key slot, the producers' vote (one barrier) and its scales.
  auto next = [&] {
    Tile x;
    x.k = next_tile_slot<T>(cursor, c, pool, p.tokens_per_page, tp.tma8, x.by_tma);
    x.kscale = pool.meta<float>(x.k, pool.L.k_meta) * kFp8WidenScale;  // exact: 2^n
    x.vscale = pool.meta<float>(x.k, pool.L.v_meta) * kFp8WidenScale;
    return x;
  };
  // Tile u's K (or V) codes into the ring stage at offset `at`: the copy engine's boxes (the first
  // thread, completing on barrier `bar`), or each thread its own row by zero-filling cp.async.
  auto copy = [&](int u, bool v, const Tile& x, uint32_t at, uint32_t bar) {
    if (x.by_tma) {
      if (pt == 0) {
        fence_proxy_async();  // the producers' reads of this stage (ordered by a barrier) before the rewrite
        mbarrier_arrive_expect_tx(sbase + bar, K * D);
        for (int s = 0; s < K / tp.box_rows; ++s) {
          const BoxOrigin o = box_origin(c, u * K + s * tp.box_rows);
          tma_load_4d(sbase + at + s * tp.box_rows * 128, v ? &tp.v8_map : &tp.k8_map, 0, o.tok, c.h, o.page,
                      sbase + bar);
        }
      }
    } else {
      const uint8_t* src = pool.row(x.k, v);
#pragma unroll
      for (int q = 0; q < 8; ++q)
        cp_async16_zfill(sbase + at + j * 128 + 16 * (q ^ (j & 7)), src + 16 * q, x.k.page != nullptr);
    }
  };
  uint32_t raw_phase = 0;  // bits 0 and 1: ring K stages' barriers; bit 2: the ring V stage's
  auto await_tma = [&](int bit, uint32_t bar) {
    mbarrier_wait(sbase + bar, (raw_phase >> bit) & 1u);
    raw_phase ^= 1u << bit;
  };
  auto publish = [&](uint32_t full) { publish_widened<T>(sbase, full, pt); };

  const int n = c.wk.key_tiles;
  Tile ahead[RK];  // tiles t and t + 1 (compile-time indices: they stay in registers)
  if (n > 0) {
    ahead[0] = next();
    copy(0, false, ahead[0], T::fp8_ring_k(0), T::raw_k(0));
    copy(0, true, ahead[0], T::fp8_ring_v(), T::raw_v(0));
  }
  cp_async_commit();
  if (n > 1) {
    ahead[1] = next();
    copy(1, false, ahead[1], T::fp8_ring_k(1), T::raw_k(1));
  }
  cp_async_commit();
  for (int t = 0; t < n; ++t) {
    const int b = T::k_stage(t), bv = T::v_stage(t), rk = t % RK;
    const Tile x = ahead[0];
    if (x.by_tma)
      await_tma(rk, T::raw_k(rk));
    else
      cp_async_wait<1>();
    if (t >= T::kKStages) mbarrier_wait(sbase + T::empty_k(b), T::k_parity(t) ^ 1);
    write_tma_meta<T>(smem, b, pt, x.k, kScaledK ? 1.0f : x.kscale);
    widen_raw128<T, kScaledK>(smem + T::fp8_ring_k(rk) + j * 128, j & 7, smem + T::k_tile(b), j, 0, x.kscale);
    publish(T::full_k(b));  // also publishes the meta
    if (x.by_tma)
      await_tma(2, T::raw_v(0));
    else
      cp_async_wait<0>();
    if (t >= T::kVStages) mbarrier_wait(sbase + T::empty_v(bv), T::v_parity(t) ^ 1);
    widen_raw128<T, true>(smem + T::fp8_ring_v() + j * 128, j & 7, smem + T::v_tile(bv), j, 0, x.vscale);
    publish(T::full_v(bv));
    ahead[0] = ahead[1];
    if (t + RK < n) {
      ahead[1] = next();  // its vote's barrier: every thread has read ring K stage rk and the V stage
      copy(t + RK, false, ahead[1], T::fp8_ring_k(rk), T::raw_k(rk));
    } else if (t + 1 < n && ahead[0].by_tma) {
      named_sync(T::kProducersBar, 128);  // every thread has read the V stage
    }
    if (t + 1 < n) copy(t + 1, true, ahead[0], T::fp8_ring_v(), T::raw_v(0));
    cp_async_commit();
  }
  cp_async_wait<0>();
}

}  // namespace minimakv::cuda::detail
