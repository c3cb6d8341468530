// The producer warps of the prefill attention CTA (prefill_tile.cuh has the CTA's tiling, its
// shared-memory layout and the hand-off protocol; paged_prefill.cu runs them beside a consumer).
//
// Owns: where a split's key slots live (KeyCursor) and prefill_produce, which copies each tile's K and V
// rows with cp.async ahead of the consumers and decodes them to fp16 in the consumers' layout.
// Invariants: producer thread i owns row i (half a row at head_dim 256) of every tile and reads only
// bytes it copied itself, so the staging ring needs no barrier; a buffer is refilled only after the
// consumers arrived on its EMPTY barrier, and a tile is published by one FULL arrival per producer.
#pragma once

#include <climits>
#include <cstdint>

#include "prefill_tile.cuh"

namespace minimakv::cuda::detail {

// Where a key slot of a split lives; page == nullptr for a padding slot.
struct KeySlot {
  const uint8_t* page;
  int tok, pos, entry;
};

// A producer thread's walk over its key slots, j, j + keys, j + 2 keys, ... of a split (key slot i is
// token i % slot of entry i / slot): one division when it starts, then a step of `keys` per tile, and
// the plan entry loaded again only when the slot moves to another page. (Recomputing the slot from its
// index cost two divisions and two global loads per tile: Nsight Compute found the producers stalled
// on them, docs/benchmarks.md.)
struct KeyCursor {
  int rel, in;  // the next slot: entry offset in the split, key offset in the entry's slot
  int cached = -1;
  PlanEntry en{};

  __device__ KeyCursor(const PrefillWork& c, int j) : rel(j / c.slot), in(j - (j / c.slot) * c.slot) {}

  __device__ KeySlot next(const PrefillWork& c, const uint8_t* base, uint64_t page_bytes, int tokens_per_page,
                          int keys) {
    const int e = c.sp.entry_begin + rel;
    KeySlot k{nullptr, 0, INT_MAX, min(e, c.sp.entry_end - 1)};
    if (e < c.sp.entry_end && in < c.span) {
      if (e != cached) {
        en = c.entries[e];
        cached = e;
      }
      const int tok = c.sp.tok_begin + in;
      if (tok < static_cast<int>(en.tokens)) {
        k.page = base + static_cast<size_t>(en.page_id) * page_bytes;
        k.tok = tok;
        k.pos = static_cast<int>(en.logical) * tokens_per_page + tok;
      }
    }
    in += keys;
    while (in >= c.slot) {
      in -= c.slot;
      ++rel;
    }
    return k;
  }
};

// Sixteen E4M3 codes as sixteen fp16 values (two 16-byte chunks), times `scale` when scaled.
template <bool Scaled>
__device__ inline void widen16(const uint4& x, float scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
  uint32_t h[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    h[2 * q] = fp8x2_to_half2(w[q]);
    h[2 * q + 1] = fp8x2_to_half2(w[q] >> 16);
  }
  if constexpr (Scaled) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[q]));
      h[q] = pack_half2(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
    }
  }
  lo = make_uint4(h[0], h[1], h[2], h[3]);
  hi = make_uint4(h[4], h[5], h[6], h[7]);
}

// ---- producers
// Each thread copies and decodes the same row (or half row) of every tile, so the staging ring needs no
// barrier. (A challenger that copied in warp-wide blocks of 8 rows x 64 bytes, whole L2 sectors, and
// decoded after a producers' barrier measured 4-16% slower: docs/benchmarks.md.)
template <codec::PageFormat F, int D, int QT, bool Wg>
__device__ void prefill_produce(const PrefillParams& p, const PrefillWork& c, uint8_t* smem) {
  using T = PrefillTile<F, D, QT, Wg>;
  const int pt = static_cast<int>(threadIdx.x) - T::kConsumers;
  const int row = pt / T::kParts, part = pt % T::kParts;
  const bool is_v = row >= T::kKeys;
  const int j = row % T::kKeys;
  const int fi = codec::format_index(F);
  const DeviceLayout L = p.pools.layout[fi];
  const uint8_t* base = p.pools.base[fi];
  const size_t code_off =
      (is_v ? L.v_codes : 0u) + static_cast<size_t>(c.h) * L.code_stride + static_cast<size_t>(part) * T::kPieceBytes;
  const size_t meta_off = (is_v ? L.v_meta : L.k_meta) + static_cast<size_t>(c.h) * L.meta_stride;
  const size_t dst_off = is_v ? T::kHalfTile : 0;
  const int c0 = part * T::kPieceElems / 8;  // first 16-byte chunk of this thread's piece of the row
  auto chunk = [&](int cc) { return is_v ? T::v_chunk(j, cc) : T::k_chunk(j, cc); };
  uint32_t* table = reinterpret_cast<uint32_t*>(smem + T::kTable);
  if constexpr (F == codec::PageFormat::kTq3) {
    // Two 3-bit codes (the low one first) -> their two levels as one fp16x2 word.
    if (pt < 64) table[pt] = pack_half2(codec::tq3_level(pt & 7), codec::tq3_level(pt >> 3));
    named_sync(T::kProducersBar, 128);
  } else if constexpr (F == codec::PageFormat::kTq4) {
    // One byte (two 4-bit codes, the low one first) -> their two levels as one fp16x2 word.
    for (int i = pt; i < 256; i += 128) table[i] = pack_half2(codec::tq4_level(i & 15), codec::tq4_level(i >> 4));
    named_sync(T::kProducersBar, 128);
  }
  auto buffer = [&](int t) { return smem + T::kBuf + static_cast<size_t>(t % T::kBuffers) * T::kBufferBytes; };
  auto stage = [&](int t) {
    return smem + T::kStage + static_cast<size_t>(t % (T::kStages ? T::kStages : 1)) * T::kStageBytes;
  };

  auto issue = [&](int t, const KeySlot& k) {
    if (!k.page) return;
    const uint8_t* src = k.page + code_off + static_cast<size_t>(k.tok) * L.row;
    if constexpr (T::kInPlace) {
      const uint32_t dst = smem_u32(buffer(t) + dst_off);
#pragma unroll
      for (int i = 0; i < T::kPieceBytes / 16; ++i) cp_async<16>(dst + chunk(c0 + i), src + 16 * i);
    } else {
      const uint32_t dst = smem_u32(stage(t) + pt * T::kRawStride);
#pragma unroll
      for (int i = 0; i < T::kPieceBytes / T::kCopy; ++i) cp_async<T::kCopy>(dst + i * T::kCopy, src + i * T::kCopy);
      // FP8: the fp32 scale; TQ3: the aligned word holding the fp16 alpha (head blocks are 16-byte aligned
      // and an odd page size leaves padding after the last alpha, so the word stays inside the block).
      const uint8_t* m = k.page + meta_off + static_cast<size_t>(k.tok) * L.meta;
      if constexpr (kRotatedFormat<F>) m -= (k.tok & 1) * 2;  // TQ3, TQ4: fp16 alpha
      cp_async<4>(smem_u32(stage(t) + 128 * T::kRawStride + pt * 4), m);
    }
  };

  auto convert = [&](int t, const KeySlot& k) {
    uint8_t* buf = buffer(t);
    auto out = [&](int i) -> uint4& { return *reinterpret_cast<uint4*>(buf + dst_off + chunk(c0 + i)); };
    float kscale = 1.0f;
    if (!k.page) {
#pragma unroll
      for (int i = 0; i < T::kPieceElems / 8; ++i) out(i) = make_uint4(0, 0, 0, 0);
    } else if constexpr (F == codec::PageFormat::kBf16) {
#pragma unroll
      for (int i = 0; i < T::kPieceElems / 8; ++i) {
        uint4 x = out(i);
        x.x = pack_half2(bf16_lo(x.x), bf16_hi(x.x));
        x.y = pack_half2(bf16_lo(x.y), bf16_hi(x.y));
        x.z = pack_half2(bf16_lo(x.z), bf16_hi(x.z));
        x.w = pack_half2(bf16_lo(x.w), bf16_hi(x.w));
        out(i) = x;
      }
    } else {
      const uint8_t* raw = stage(t) + pt * T::kRawStride;
      const uint32_t meta = *reinterpret_cast<const uint32_t*>(stage(t) + 128 * T::kRawStride + pt * 4);
      if constexpr (F == codec::PageFormat::kFp8) {
        const float scale = __uint_as_float(meta);
        kscale = scale;
#pragma unroll
        for (int i = 0; i < T::kPieceElems / 16; ++i) {
          const uint4 x = reinterpret_cast<const uint4*>(raw)[i];
          if (is_v)
            widen16<true>(x, scale, out(2 * i), out(2 * i + 1));
          else
            widen16<false>(x, scale, out(2 * i), out(2 * i + 1));
        }
      } else {
        // TQ3, TQ4: each 8 elements' codes map pairwise through the level-pair table (6 or 8 bits a
        // pair, the low code first); V rows are scaled by alpha.
        const __half alpha = __half(__half_raw{static_cast<uint16_t>(meta >> (16 * (k.tok & 1)))});
        kscale = __half2float(alpha);
        const __half2 a2 = __half2half2(alpha);
        auto emit = [&](int gi, uint32_t bits, int pair_bits) {
          uint32_t h[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            h[q] = table[(bits >> (pair_bits * q)) & ((1u << pair_bits) - 1u)];
            if (is_v) {
              const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&h[q]), a2);
              h[q] = *reinterpret_cast<const uint32_t*>(&v);
            }
          }
          out(gi) = make_uint4(h[0], h[1], h[2], h[3]);
        };
        if constexpr (F == codec::PageFormat::kTq4) {
          // A byte is two codes; 8 elements are one 32-bit word.
#pragma unroll
          for (int gi = 0; gi < T::kPieceElems / 8; ++gi) emit(gi, reinterpret_cast<const uint32_t*>(raw)[gi], 8);
        } else {
          // Groups of eight 3-bit codes, 24 bits each, little-endian across the piece's words.
          constexpr int kWords = T::kPieceBytes / 4;
          uint32_t w[kWords + 1];
#pragma unroll
          for (int i = 0; i < kWords; ++i) w[i] = reinterpret_cast<const uint32_t*>(raw)[i];
          w[kWords] = 0;
#pragma unroll
          for (int gi = 0; gi < T::kPieceElems / 8; ++gi) {
            const int bit = 24 * gi, wi = bit / 32, sh = bit % 32;
            emit(gi, (sh <= 8 ? (w[wi] >> sh) : __funnelshift_r(w[wi], w[wi + 1], sh)) & 0xffffffu, 6);
          }
        }
      }
    }
    if (!is_v && part == 0) {
      int* kpos = reinterpret_cast<int*>(buf + 2 * T::kHalfTile);
      reinterpret_cast<float*>(kpos + T::kKeys)[j] = kscale;
      kpos[j] = k.pos;
      kpos[2 * T::kKeys + j] = k.entry;
    }
    if (pt < 64) {  // the K rows' threads: the tile's largest key position (INT_MAX with padding)
      const int mx = __reduce_max_sync(0xffffffffu, k.pos);
      if ((pt & 31) == 0) reinterpret_cast<int*>(buf + 2 * T::kHalfTile)[3 * T::kKeys + pt / 32] = mx;
    }
    if constexpr (Wg) fence_proxy_async();  // the tensor cores read the tile through the async proxy
  };
  auto publish = [&](int t) {
    for (int g = 0; g < T::kFullGroups; ++g)
      named_arrive(T::kFullBar + g * T::kBuffers + t % T::kBuffers, T::kFullCount);
  };

  // The slots of the tiles in flight, oldest first (compile-time indices: they stay in registers).
  constexpr int kAhead = T::kInPlace ? 2 : T::kStages - 1;
  KeyCursor cursor(c, j);
  KeySlot ahead[kAhead];
  auto next_slot = [&] { return cursor.next(c, base, L.page_bytes, p.tokens_per_page, T::kKeys); };
  auto advance = [&](const KeySlot& k) {
#pragma unroll
    for (int i = 0; i + 1 < kAhead; ++i) ahead[i] = ahead[i + 1];
    ahead[kAhead - 1] = k;
  };
  const int n = c.wk.key_tiles;
#pragma unroll
  for (int t = 0; t < kAhead; ++t) {
    if (t < n) {
      ahead[t] = next_slot();
      issue(t, ahead[t]);
    }
    cp_async_commit();
  }
  if constexpr (T::kInPlace) {
    // Buffers are the staging: tile t + 2 is copied once the consumers are done with tile t - 1.
    for (int t = 0; t < n; ++t) {
      cp_async_wait<1>();
      convert(t, ahead[0]);
      publish(t);
      KeySlot k{};
      if (t + 2 < n) {
        if (t >= 1) named_sync(T::kEmptyBar + (t + 2) % T::kBuffers, T::kThreads);
        k = next_slot();
        issue(t + 2, k);
      }
      cp_async_commit();
      advance(k);
    }
  } else {
    for (int t = 0; t < n; ++t) {
      KeySlot k{};
      if (t + kAhead < n) {
        k = next_slot();
        issue(t + kAhead, k);  // into the stage this thread decoded last
      }
      cp_async_commit();
      cp_async_wait<T::kStages - 1>();
      if (t >= T::kBuffers) named_sync(T::kEmptyBar + t % T::kBuffers, T::kThreads);
      convert(t, ahead[0]);
      publish(t);
      advance(k);
    }
  }
  cp_async_wait<0>();
}

}  // namespace minimakv::cuda::detail
