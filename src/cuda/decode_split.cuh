// The split body of the paged decode kernels (paged_decode.cu): what one CTA does with one split of one
// page format for one KV head. One tensor-core body for every format (BF16, FP8, TQ3), per-warp rings of
// cp.async half-tile slots, the tiling per format and head_dim, and the block-wide ends of an entry
// (page scores) and of a split (its normalised partial). How each format's codes become MMA fragments
// is decode_fragments.cuh's.
//
// Invariants: pages are read in exactly the layouts of docs/formats.md; the softmax state is kept in
// base 2 and written as natural-log partials (attention_device.cuh); a split's partial is deterministic
// (warps merged in a fixed order). Included by paged_decode.cu (the kernels and launches) and, through
// it, by the kernel lab's variant builds (scripts/bench/decode-lab.sh), which set the MINIMAKV_DECODE_*
// tuning macros.
#pragma once

#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_device.cuh"
#include "decode_fragments.cuh"
#include "minimakv/codec/page_format.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/codec/tq4.h"
#include "minimakv/cuda/decode_plan.h"

namespace minimakv::cuda::decode_detail {

using namespace detail;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

struct StepParams : AttendParams {
  const uint8_t* plan;
  uint32_t off_seq, off_split, off_entry, off_merge;
};

// The plan blob's header: {splits of every format, batch, entries, 0}.
__host__ __device__ inline const int32_t* plan_batch_word(const uint8_t* plan) {
  return reinterpret_cast<const int32_t*>(plan) + 1;
}
__device__ inline int plan_batch(const uint8_t* plan) {
  return *plan_batch_word(plan);
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

// ---- The split body: one tensor-core path for BF16, FP8 and TQ3 pages ----
//
// Per warp and tile of TT tokens (32, or 16 where rows are 256 bytes or more), with the split's tiles
// taken round-robin by the warps across its pages:
//   S = K Q^T on m16n8k16 tiles: rows are tokens (TT / 16 blocks of 16), the 8 columns the group's
//   query heads (G <= 8; the rest zero). K codes are exact in the MMA type (BF16 rows in bf16; E4M3
//   values and TQ3 levels in fp16, docs/formats.md); the query enters as hi + lo terms of that type, two
//   or three MMAs per fragment, so the logits keep about fp32 accuracy.
//   O^T += V^T P^T: rows are head dims (D / 16 blocks), k the tile's tokens, P (times each token's V
//   scale) again as hi + lo terms. Fragments are read straight from the staged rows, no dense copy.
// The fragments' k order is a permutation of dims (QK) or tokens (PV), the same for both operands, and
// the output rows a permutation of dims undone when the warp's rows are written out.
//
// Staging: each warp streams its tiles through a ring of half-tile slots in shared memory, K and V of a
// tile copied asynchronously as separate commit groups, A tiles ahead. Two loop orders (the tiling picks
// one per format; attend_split says how each uses the ring):
//   sequential: per tile QK, softmax, PV, over 2 A + 1 slots;
//   pipelined (no page scores): QK of tile i + 1 beside PV of tile i, over 2 A + 2 slots.

constexpr int kMmaCols = 8;  // query heads per MMA tile: every supported GQA group fits

// Tile tokens, tiles ahead and loop order per format and head_dim, as the kernel lab measured them on
// an H200 (docs/benchmarks.md):
//   - BF16: 16-token tiles one ahead where rows are 256 bytes or more (head_dim >= 128), else 32;
//   - FP8: 32-token tiles one ahead, 16 two ahead at 256-byte rows (head_dim 256);
//   - TQ3: 32-token tiles one ahead;
//   - every format sequential (below).
//   pipelined: without page scores, a warp computes QK of tile i + 1 beside PV of tile i (two
//   independent chains of fragment building and MMAs for the scheduler to interleave) instead of one
//   tile's QK, softmax and PV in sequence; its ring then holds one slot more. With page scores the
//   sequential loop runs either way (a tile's page statistics end an entry block-wide). A lab
//   challenger that lost on an H200: TQ3 1-2% slower than sequential at head_dim 128 and 18% slower at
//   256 (spills); BF16 within 3% either way; FP8 9% slower at batch 32 and 33% on the canary
//   (docs/benchmarks.md).
// A lab variant build (scripts/bench/decode-lab.sh) overrides any of these, per format index f and for
// every head_dim, with MINIMAKV_DECODE_TT_f, MINIMAKV_DECODE_AHEAD_f and MINIMAKV_DECODE_PIPE_f (0 or 1).
struct Tiling {
  int tokens, ahead;
  bool pipelined;
};
#ifndef MINIMAKV_DECODE_TT_0
#define MINIMAKV_DECODE_TT_0 0
#endif
#ifndef MINIMAKV_DECODE_TT_1
#define MINIMAKV_DECODE_TT_1 0
#endif
#ifndef MINIMAKV_DECODE_TT_2
#define MINIMAKV_DECODE_TT_2 0
#endif
#ifndef MINIMAKV_DECODE_TT_3
#define MINIMAKV_DECODE_TT_3 0
#endif
#ifndef MINIMAKV_DECODE_AHEAD_0
#define MINIMAKV_DECODE_AHEAD_0 0
#endif
#ifndef MINIMAKV_DECODE_AHEAD_1
#define MINIMAKV_DECODE_AHEAD_1 0
#endif
#ifndef MINIMAKV_DECODE_AHEAD_2
#define MINIMAKV_DECODE_AHEAD_2 0
#endif
#ifndef MINIMAKV_DECODE_AHEAD_3
#define MINIMAKV_DECODE_AHEAD_3 0
#endif
#ifndef MINIMAKV_DECODE_PIPE_0
#define MINIMAKV_DECODE_PIPE_0 -1
#endif
#ifndef MINIMAKV_DECODE_PIPE_1
#define MINIMAKV_DECODE_PIPE_1 -1
#endif
#ifndef MINIMAKV_DECODE_PIPE_2
#define MINIMAKV_DECODE_PIPE_2 -1
#endif
#ifndef MINIMAKV_DECODE_PIPE_3
#define MINIMAKV_DECODE_PIPE_3 -1
#endif
template <codec::PageFormat F, int D>
constexpr Tiling decode_tiling() {
  constexpr int row = static_cast<int>(codec::format_row_bytes(F, D));
  Tiling t{};
  if constexpr (F == codec::PageFormat::kTq3 || F == codec::PageFormat::kTq4)
    t = {32, 1, false};
  else if constexpr (F == codec::PageFormat::kFp8)
    t = row >= 256 ? Tiling{16, 2, false} : Tiling{32, 1, false};
  else
    t = {row >= 256 ? 16 : 32, 1, false};
  constexpr int fi = codec::format_index(F);
  constexpr int lab_tokens[4] = {MINIMAKV_DECODE_TT_0, MINIMAKV_DECODE_TT_1, MINIMAKV_DECODE_TT_2,
                                 MINIMAKV_DECODE_TT_3};
  constexpr int lab_ahead[4] = {MINIMAKV_DECODE_AHEAD_0, MINIMAKV_DECODE_AHEAD_1, MINIMAKV_DECODE_AHEAD_2,
                                MINIMAKV_DECODE_AHEAD_3};
  constexpr int lab_pipe[4] = {MINIMAKV_DECODE_PIPE_0, MINIMAKV_DECODE_PIPE_1, MINIMAKV_DECODE_PIPE_2,
                               MINIMAKV_DECODE_PIPE_3};
  static_assert(codec::kNumPageFormats == 4, "one kernel-lab tiling override per format");
  if (lab_tokens[fi] > 0) t.tokens = lab_tokens[fi];
  if (lab_ahead[fi] > 0) t.ahead = lab_ahead[fi];
  if (lab_pipe[fi] >= 0) t.pipelined = lab_pipe[fi] != 0;
  return t;
}

template <codec::PageFormat F, int D>
struct TileGeom {
  static constexpr int kRow = static_cast<int>(codec::format_row_bytes(F, D));
  static constexpr int TT = decode_tiling<F, D>().tokens;  // tokens per tile: 16 or 32
  static_assert((TT == 16 || TT == 32) && decode_tiling<F, D>().ahead >= 1 && decode_tiling<F, D>().ahead <= 3,
                "decode tiling out of range");
  static constexpr int kPiece = kRow % 16 == 0 ? 16 : 8;
  // Strides: lanes (g, t) read rows g and g + 8 (QK) and rows t + 4 j (PV) at 4 (FP8, TQ3) or 8 (BF16)
  // bytes a lane. FP8 and TQ3 K rows take an odd number of pieces (FP8: 4 t + 36 g words, 32 banks);
  // BF16 rows, and FP8 V rows, a stride of 8 words mod 32 (each half-warp phase on 32 distinct banks).
  static constexpr int kKStride =
      F == codec::PageFormat::kBf16 ? kRow + 32 : ((kRow / kPiece) % 2 == 1 ? kRow : kRow + kPiece);
  // V rows but TQ3's take 32 bytes more than a row: where rows are whole 128-byte lines (BF16, FP8 at
  // head_dim >= 128) the 16-byte run loads of a quarter warp (rows t = 0..3 of two neighbouring runs,
  // decode_fragments.cuh, PvGroup) then fall on 8 distinct bank groups. TQ3 rows are read as words.
  static constexpr int kVStride = F == codec::PageFormat::kTq3 ? kRow : kRow + 32;
  static constexpr int kSlot = TT * (kKStride > kVStride ? kKStride : kVStride);
  // Tiles in flight: as asked, but no more than 210 KB of rings per CTA hold (the rest of the 227 KB
  // a CTA may have is the query fragments and the softmax scratch).
  static constexpr int kRingBudget = 210 * 1024;
  // The sequential loop keeps 2 A + 1 slots, the pipelined one 2 A + 2 (K of tiles i + 1 .. i + 1 + A
  // and V of tiles i .. i + A).
  static constexpr bool kPipelined = decode_tiling<F, D>().pipelined;
  static constexpr int kExtra = kPipelined ? 2 : 1;
  static constexpr int kAheadFit = (kRingBudget / (kWarps * kSlot) - kExtra) / 2;
  static constexpr int kAhead = decode_tiling<F, D>().ahead < kAheadFit ? decode_tiling<F, D>().ahead : kAheadFit;
  static_assert(kAhead >= 1, "decode tiling: one tile ahead does not fit in shared memory");
  static constexpr int kSlots = 2 * kAhead + kExtra;
  static constexpr int kWarpBytes = kSlots * kSlot;
};

// TQ3 codes become fp16 fragments through the 64-entry pair table in shared memory. (A 4,096-entry
// quad table, four codes to two registers with one lookup, measured 1.4-1.7x slower on an H200: random
// 8-byte lookups into 32 KB conflict on the banks; docs/benchmarks.md.)
// TQ4: a 256-entry table, one byte (two codes) to one register.
// The table is a static shared array (attend_split), not a slice of the dynamic block, placed at an
// address aligned to its size: a lookup's address is then its scaled index or-ed with the base
// (level_pair_at), with no multiply-add.
template <codec::PageFormat F>
inline constexpr int kLevelPairs = F == codec::PageFormat::kTq3 ? (kTq3QkInRegisters && kTq3PvInRegisters ? 1 : 64)
                                   : F == codec::PageFormat::kTq4 ? 256
                                                                  : 1;
// Bytes of one table; attend_split reserves twice as many to align it.
template <codec::PageFormat F>
inline constexpr uint32_t kLevelTableBytes = sizeof(uint32_t) * kLevelPairs<F>;

// Dynamic shared memory: [query fragments | ps | red_m | red_l | rings or red_acc]; the level-pair table
// is static (above).
template <codec::PageFormat F, int D>
struct SplitSmem {
  static constexpr size_t kQf = 0;  // uint2 [D / 16][terms][32]: per k-step, term and lane {b0, b1}
  static constexpr size_t kPs = kQf + sizeof(uint2) * (D / 16) * kQueryTerms<F> * 32;
  static constexpr size_t kRedM = kPs + sizeof(float) * kWarps * TileGeom<F, D>::TT * kMmaCols;
  static constexpr size_t kRedL = kRedM + sizeof(float) * kWarps * kMmaCols;
  static constexpr size_t kRing = (kRedL + sizeof(float) * kWarps * kMmaCols + 15) / 16 * 16;
  static constexpr size_t kRingBytes = static_cast<size_t>(kWarps) * TileGeom<F, D>::kWarpBytes;
  static constexpr size_t kRedAccBytes = sizeof(float) * kWarps * kMmaCols * D;
  static constexpr size_t kBytes = kRing + (kRingBytes > kRedAccBytes ? kRingBytes : kRedAccBytes);
  static_assert(kBytes + 2 * kLevelTableBytes<F> <= 227 * 1024,
                "decode split: more shared memory than an sm_90 CTA may have");
};

// A warp's position in its split: the tile at token `tile` of entry `ei` (ei == entry_end: done), and
// the split's tile count in the entries before ei. The warps take the split's tiles round-robin across
// its pages, not afresh on each page: a split of short pages (two 64-token pages) then gives every warp
// one tile instead of two to half the warps.
struct TileCursor {
  int ei, tile, before;
};

__device__ inline int entry_tok_end(const PlanEntry* entries, const PlanSplit& sp, int ei) {
  return min(sp.tok_end, static_cast<int>(entries[ei].tokens));
}

// This warp's first tile in entry ei or after it, `before` tiles preceding entry ei.
template <int TT>
__device__ inline TileCursor seek_tile(const PlanEntry* entries, const PlanSplit& sp, int ei, int before, int warp) {
  for (; ei < sp.entry_end; ++ei) {
    const int n_tiles = (max(0, entry_tok_end(entries, sp, ei) - sp.tok_begin) + TT - 1) / TT;
    const int first = (warp - before % kWarps + kWarps) % kWarps;
    if (first < n_tiles) return {ei, sp.tok_begin + first * TT, before};
    before += n_tiles;
  }
  return {sp.entry_end, 0, before};
}

template <int TT>
__device__ inline TileCursor next_tile(const PlanEntry* entries, const PlanSplit& sp, const TileCursor& c, int warp) {
  if (c.ei >= sp.entry_end) return c;
  const int t_end = entry_tok_end(entries, sp, c.ei);
  if (c.tile + kWarps * TT < t_end) return {c.ei, c.tile + kWarps * TT, c.before};
  const int n_tiles = (max(0, t_end - sp.tok_begin) + TT - 1) / TT;
  return seek_tile<TT>(entries, sp, c.ei + 1, c.before + n_tiles, warp);
}

// Starts the asynchronous copy of rows [0, n) (n may be 0) into a ring slot, rows kStride bytes apart, as
// one commit group.
template <class TG, int kStride>
__device__ inline void stage_rows(const uint8_t* rows, int n, uint8_t* slot) {
  constexpr int kPieces = TG::kRow / TG::kPiece;
  for (int pc = static_cast<int>(threadIdx.x & 31); pc < n * kPieces; pc += 32) {
    if constexpr (kStride == TG::kRow) {  // unpadded rows (TQ3's): one linear copy, no row arithmetic
      __pipeline_memcpy_async(slot + pc * TG::kPiece, rows + pc * TG::kPiece, TG::kPiece);
    } else {
      const int r = pc / kPieces, q = pc % kPieces;
      __pipeline_memcpy_async(slot + r * kStride + q * TG::kPiece, rows + r * TG::kRow + q * TG::kPiece, TG::kPiece);
    }
  }
  __pipeline_commit();
}

template <codec::PageFormat F, int D>
__device__ __forceinline__ void attend_split(const StepParams& p, int split, uint8_t* smem) {
  using SM = SplitSmem<F, D>;
  using TG = TileGeom<F, D>;
  constexpr int TT = TG::TT, MB = D / 16, KB = TT / 16;  // MB: QK k-steps, PV row blocks; KB: token blocks
  constexpr int A = TG::kAhead;
  constexpr int NQ = kQueryTerms<F>;
  auto* qf = reinterpret_cast<uint2*>(smem + SM::kQf);
  auto* ps = reinterpret_cast<float(*)[TT][kMmaCols]>(smem + SM::kPs);
  auto* red_m = reinterpret_cast<float(*)[kMmaCols]>(smem + SM::kRedM);
  auto* red_l = reinterpret_cast<float(*)[kMmaCols]>(smem + SM::kRedL);
  // The level-pair table, at a shared address aligned to its size (level_pair_at): twice its size is
  // reserved and the aligned half used, whatever the static layout.
  __shared__ uint32_t pair_space[2 * kLevelPairs<F>];
  const uint32_t pairs = (static_cast<uint32_t>(__cvta_generic_to_shared(pair_space)) + kLevelTableBytes<F> - 1) &
                         ~(kLevelTableBytes<F> - 1);
  const Tq3LevelBytes tb;  // TQ3 levels for the fragments built in registers (kTq3QkInRegisters, ...)
  const PlanSplit sp = reinterpret_cast<const PlanSplit*>(p.plan + p.off_split)[split];
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint8_t* ring = smem + SM::kRing + static_cast<size_t>(warp) * TG::kWarpBytes;
  // pairs[a | b << 3] = {level a, level b} as fp16x2: two TQ3 codes to one fragment register.
  if (F == codec::PageFormat::kTq3 && kLevelPairs<F> == 64 && threadIdx.x < 64)
    store_shared_u32(pairs + 4 * threadIdx.x, pack_half2(codec::tq3_level(static_cast<int>(threadIdx.x & 7)),
                                                         codec::tq3_level(static_cast<int>(threadIdx.x >> 3))));
  // pairs[a | b << 4] = {level a, level b}: a TQ4 byte (low nibble first) to one fragment register.
  if (F == codec::PageFormat::kTq4)
    for (int i = threadIdx.x; i < 256; i += kThreads)
      store_shared_u32(pairs + 4 * i, pack_half2(codec::tq4_level(i & 15), codec::tq4_level(i >> 4)));
  const int G = p.group;
  {
    const float* qsrc = (kRotatedFormat<F> ? p.q_rot : p.q) +
                        (static_cast<size_t>(sp.seq) * p.q_heads + static_cast<size_t>(h) * G) * D;
    const float qscale = p.scale * kLog2e;
    for (int i = threadIdx.x; i < MB * 32; i += kThreads) {
      const int ks = i / 32, qg = (i % 32) >> 2, d0 = qk_dim<F>(ks, i & 3);
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (qg < G)
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = qsrc[qg * D + d0 + j] * qscale;
      uint32_t b0[NQ], b1[NQ];
      split_terms<F, NQ>(x[0], x[1], b0);
      split_terms<F, NQ>(x[2], x[3], b1);
#pragma unroll
      for (int j = 0; j < NQ; ++j) qf[(ks * NQ + j) * 32 + (i % 32)] = make_uint2(b0[j], b1[j]);
    }
  }
  const DeviceLayout L = p.pools.layout[codec::format_index(F)];
  const uint8_t* base = p.pools.base[codec::format_index(F)];
  const auto* entries = reinterpret_cast<const PlanEntry*>(p.plan + p.off_entry);
  const bool want_pages = p.page_m != nullptr;
  // The pipelined loop runs where the tiling asks for it and no page scores are wanted.
  const bool pipelined = TG::kPipelined && !want_pages;

  auto stage_tile_half = [&](const TileCursor& c, bool v_half, uint8_t* dst) {
    int n = 0;
    const uint8_t* rows = nullptr;
    if (c.ei < sp.entry_end) {
      const EntryRows er = entry_rows(L, base, entries[c.ei], sp, h);
      n = min(TT, er.t_end - c.tile);
      rows = (v_half ? er.vc : er.kc) + static_cast<size_t>(c.tile) * TG::kRow;
    }
    if (v_half)
      stage_rows<TG, TG::kVStride>(rows, n, dst);
    else
      stage_rows<TG, TG::kKStride>(rows, n, dst);
  };
  // Valid tokens of the tile at c (0 past the split's last tile) and their K and V row scales: the
  // tokens of this lane's C rows, 16 (j / 2) + g + 8 (j % 2) at [j].
  auto tile_scales = [&](const TileCursor& c, float(&ksc)[2 * KB], float(&vsc)[2 * KB]) {
    int n = 0;
    EntryRows er{};
    if (c.ei < sp.entry_end) {
      er = entry_rows(L, base, entries[c.ei], sp, h);
      n = min(TT, er.t_end - c.tile);
    }
#pragma unroll
    for (int j = 0; j < 2 * KB; ++j) {
      const int tok = 16 * (j >> 1) + g + 8 * (j & 1);
      const uint32_t mo = static_cast<uint32_t>(c.tile + tok) * L.meta;  // within one page
      ksc[j] = tok < n ? load_meta<F>(er.km + mo) : 0.0f;
      vsc[j] = tok < n ? load_meta<F>(er.vm + mo) : 0.0f;
    }
    return n;
  };
  // S = K Q^T of the tile staged at st_k: C element [mb][2 r + i] is token 16 mb + g + 8 r, query head
  // 2 t + i. 64 dims (four k-steps, every query term) per tensor-core sum from zero, added up in fp32
  // (see PV). Every token block of the tile in one pass per 64 dims, so each query fragment is loaded
  // from shared memory once per tile, not once per block (2-6% faster on mixed pages on an H200,
  // docs/benchmarks.md). Blocks of padding rows only are computed too: their rows are masked by the
  // softmax, and a row of the product depends on its own K row only.
  auto tile_logits = [&](const uint8_t* st_k, float(&s)[KB][4]) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      uint32_t a[KB][4][4];
#pragma unroll
      for (int mb = 0; mb < KB; ++mb) {
        const uint8_t* r0 = st_k + (16 * mb + g) * TG::kKStride;
        qk_chunk<F, D>(r0, r0 + 8 * TG::kKStride, c, t, pairs, tb, a[mb]);
      }
      float part[KB][4] = {};
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int j = 0; j < NQ; ++j) {
          const uint2 qv = qf[((4 * c + kk) * NQ + j) * 32 + lane];
#pragma unroll
          for (int mb = 0; mb < KB; ++mb) mma_tile<F>(part[mb], a[mb][kk], qv.x, qv.y);
        }
#pragma unroll
      for (int mb = 0; mb < KB; ++mb)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mb][e] = c == 0 ? part[mb][e] : s[mb][e] + part[mb][e];
    }
  };
  // Lane (g, t) holds the columns (query heads) 2 t + i of every C tile: its own m, l per i.
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
  // Softmax over the tile for columns 2 t + i: scales the logits by the K row scales, masks padding,
  // moves the running max, writes P (times each token's V scale) to ps[warp] and returns the rescale
  // of the running output in corrs. With page scores, the tile's (max, sum) joins the page's (pm, pl).
  auto tile_softmax = [&](float(&s)[KB][4], int n, const float(&ksc)[2 * KB], const float(&vsc)[2 * KB],
                          float(&corrs)[2], float(&pm)[2], float(&pl)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 2 * KB; ++j) {
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
      for (int j = 0; j < 2 * KB; ++j) {
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
  };
  // P^T as the PV product's B fragments (hi and lo terms) from ps[warp]: lane (g, t) takes tokens
  // t + 4 j, j = 0..3, of each 16-token k-step, query head g.
  auto p_fragments = [&](uint32_t(&b_hi)[KB][2], uint32_t(&b_lo)[KB][2]) {
#pragma unroll
    for (int kt = 0; kt < KB; ++kt) {
      float pv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) pv[j] = ps[warp][16 * kt + t + 4 * j][g];
      uint32_t t01[2], t23[2];
      split_terms<F, 2>(pv[0], pv[1], t01);
      split_terms<F, 2>(pv[2], pv[3], t23);
      b_hi[kt][0] = t01[0];
      b_lo[kt][0] = t01[1];
      b_hi[kt][1] = t23[0];
      b_lo[kt][1] = t23[1];
    }
  };
  float acc[MB][4];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) acc[mb][0] = acc[mb][1] = acc[mb][2] = acc[mb][3] = 0.0f;
  // O^T += V^T P^T over the tile's 16-token k-steps (the V slot at st_v, `steps` of them); lane (g, t)
  // takes output dims pv_dim(k, g) .. + 3 (row blocks 2 k and 2 k + 1), loading a run of its dims of each
  // token row at once (decode_fragments.cuh, PvGroup). Each tile's product is summed on the tensor cores
  // from zero and added to the running output in fp32 with the tile's rescale: tensor-core accumulation
  // is not rounded to nearest, so a long chain of it drifts.
  auto tile_pv = [&](const uint8_t* st_v, int n, int steps, const uint32_t(&b_hi)[KB][2], const uint32_t(&b_lo)[KB][2],
                     const float(&corrs)[2]) {
    using PG = PvGroup<F, D>;
    const uint8_t* vrow = st_v + t * TG::kVStride;  // token t; t + 4 j + 16 kt at a fixed offset
#pragma unroll
    for (int q = 0; q < PG::kLoads; ++q) {
      uint32_t w[KB][4][PG::kWords];
#pragma unroll
      for (int kt = 0; kt < KB; ++kt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          pv_load<F, D>(vrow + (16 * kt + 4 * j) * TG::kVStride, g, q, 16 * kt + t + 4 * j < n, w[kt][j]);
#pragma unroll
      for (int kk = 0; kk < PG::kBlocks; ++kk) {
        const int k = PG::kBlocks * q + kk;
        float tmp[2][4] = {};
#pragma unroll
        for (int kt = 0; kt < KB; ++kt) {
          if (kt >= steps) break;
          uint32_t a0[4], a1[4];
          pv_block<F, D>(w[kt], kk, pairs, tb, a0, a1);
          mma_tile<F>(tmp[0], a0, b_hi[kt][0], b_hi[kt][1]);
          mma_tile<F>(tmp[0], a0, b_lo[kt][0], b_lo[kt][1]);
          mma_tile<F>(tmp[1], a1, b_hi[kt][0], b_hi[kt][1]);
          mma_tile<F>(tmp[1], a1, b_lo[kt][0], b_lo[kt][1]);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[2 * k + e][c] = acc[2 * k + e][c] * corrs[c & 1] + tmp[e][c];
      }
    }
  };

  TileCursor cur = seek_tile<TT>(entries, sp, sp.entry_begin, 0, warp);
  if (!pipelined) {
    // Sequential: per tile, QK, softmax, then PV. K(i) sits in slot 2 i, V(i) in 2 i + 1 (mod 2 A + 1),
    // so K(i + A) takes the slot V(i - 1) has left and V(i + A) the one K(i) has. While the warp
    // computes QK of tile i, V(i) and K, V of tiles i + 1 .. i + A - 1 and K(i + A) are in flight; while
    // it computes PV of tile i, K, V of tiles i + 1 .. i + A.
    TileCursor lead = cur;  // A - 1 tiles ahead, then A
    int slot = 0;           // ring slot of the current tile's K; its V is in slot + 1
    auto slot_at = [&](int s) { return ring + (s % (2 * A + 1)) * TG::kSlot; };
    // The first A tiles' K and V go out before the block waits for the query fragments.
    stage_tile_half(lead, false, slot_at(0));
    stage_tile_half(lead, true, slot_at(1));
#pragma unroll
    for (int a = 1; a < A; ++a) {
      lead = next_tile<TT>(entries, sp, lead, warp);
      stage_tile_half(lead, false, slot_at(2 * a));
      stage_tile_half(lead, true, slot_at(2 * a + 1));
    }
    __syncthreads();
    for (int ei = sp.entry_begin; ei < sp.entry_end; ++ei) {
      float pm[2] = {-INFINITY, -INFINITY}, pl[2] = {0.0f, 0.0f};
      while (cur.ei == ei) {
        lead = next_tile<TT>(entries, sp, lead, warp);
        stage_tile_half(lead, false, slot_at(slot + 2 * A));
        float ksc[2 * KB], vsc[2 * KB];
        const int n = tile_scales(cur, ksc, vsc);
        __pipeline_wait_prior(2 * A);  // K of this tile; the 2 A groups after it may still be in flight
        __syncwarp();
        float s[KB][4], corrs[2];
        tile_logits(slot_at(slot), s);
        tile_softmax(s, n, ksc, vsc, corrs, pm, pl);
        __syncwarp();  // every lane is done with this K slot and has written its P
        stage_tile_half(lead, true, slot_at(slot));
        uint32_t b_hi[KB][2], b_lo[KB][2];
        p_fragments(b_hi, b_lo);
        __pipeline_wait_prior(2 * A);  // V of this tile; the next A tiles' K and V may still be in flight
        __syncwarp();
        tile_pv(slot_at(slot + 1), n, n > 16 ? 2 : 1, b_hi, b_lo, corrs);
        __syncwarp();  // every lane is done with this V slot and with ps
        cur = next_tile<TT>(entries, sp, cur, warp);
        slot += 2;
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
  } else {
    // Pipelined: iteration i computes QK of tile i + 1 and PV of tile i (independent: P(i) is already in
    // registers), then the softmax of tile i + 1. K(j) sits in slot 2 j, V(j) in 2 j + 1 (mod 2 A + 2).
    // Iteration i first stages K(i + 1 + A) (into the slot of K(i), whose QK ran in iteration i - 1) and
    // V(i + A) (the slot of V(i - 1)), then waits for K(i + 1) and V(i), staged A iterations before.
    // Both chains are branch-free: padding rows are computed and masked (a padding row's P is 0 and its
    // V fragments are read as zero or are finite TQ3 levels), past the last tile on a stale slot whose
    // logits are dropped.
    auto slot_k = [&](int j) { return ring + ((2 * j) % (2 * A + 2)) * TG::kSlot; };
    auto slot_v = [&](int j) { return ring + ((2 * j + 1) % (2 * A + 2)) * TG::kSlot; };
    TileCursor k_lead = cur, v_lead = cur;
    stage_tile_half(k_lead, false, slot_k(0));
#pragma unroll
    for (int a = 0; a < A; ++a) {
      k_lead = next_tile<TT>(entries, sp, k_lead, warp);
      stage_tile_half(k_lead, false, slot_k(a + 1));
      stage_tile_half(v_lead, true, slot_v(a));
      v_lead = next_tile<TT>(entries, sp, v_lead, warp);
    }
    __syncthreads();
    float pm[2] = {}, pl[2] = {};  // unused: no page scores on this path
    float corrs[2] = {1.0f, 1.0f};
    uint32_t b_hi[KB][2], b_lo[KB][2];
    int n;
    {
      float ksc[2 * KB], vsc[2 * KB], s[KB][4];
      n = tile_scales(cur, ksc, vsc);
      __pipeline_wait_prior(2 * A);  // K(0)
      __syncwarp();
      if (n > 0) {
        tile_logits(slot_k(0), s);
        tile_softmax(s, n, ksc, vsc, corrs, pm, pl);
        __syncwarp();
        p_fragments(b_hi, b_lo);
      }
      __syncwarp();  // every lane is done with K(0)'s slot and with ps
    }
    for (int i = 0; cur.ei < sp.entry_end; ++i) {
      k_lead = next_tile<TT>(entries, sp, k_lead, warp);
      stage_tile_half(k_lead, false, slot_k(i + 1 + A));
      stage_tile_half(v_lead, true, slot_v(i + A));
      v_lead = next_tile<TT>(entries, sp, v_lead, warp);
      const TileCursor nxt = next_tile<TT>(entries, sp, cur, warp);
      float ksc[2 * KB], vsc[2 * KB], s[KB][4];
      const int n_next = tile_scales(nxt, ksc, vsc);
      __pipeline_wait_prior(2 * A);  // K(i + 1) and V(i); the last 2 A groups may still be in flight
      __syncwarp();
      tile_logits(slot_k(i + 1), s);
      tile_pv(slot_v(i), n, KB, b_hi, b_lo, corrs);
      if (n_next > 0) {
        tile_softmax(s, n_next, ksc, vsc, corrs, pm, pl);
        __syncwarp();
        p_fragments(b_hi, b_lo);
      }
      __syncwarp();  // every lane is done with K(i + 1), V(i) and ps
      cur = nxt;
      n = n_next;
    }
  }
  __pipeline_wait_prior(0);  // the empty groups of the last tile: nothing may still write the ring
  // Combine the warps through shared memory (red_acc overlays the rings, so wait for every warp).
  __syncthreads();
  auto* red_acc = reinterpret_cast<float(*)[kMmaCols][D]>(smem + SM::kRing);
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
      red_acc[warp][2 * t + (c & 1)][pv_dim<F, D>(mb >> 1, g) + 2 * (mb & 1) + (c >> 1)] = acc[mb][c];
  write_partials<D, kMmaCols>(p, split, red_m, red_l, red_acc);
}

}  // namespace minimakv::cuda::decode_detail
