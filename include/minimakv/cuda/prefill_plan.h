// The prefill plan: which query tiles of which sequences meet which key splits in a chunked prefill, as
// host code that builds and is tested without nvcc (like the decode plan, with whose records it shares
// its vocabulary: PageRef, PlanEntry, PlanSplit).
//
// Owns: the prefill tiling (query rows and keys per tile, by head_dim), the prefill sequence
// description, the plan records the device reads (trivially copyable) and make_prefill_plan.
// Invariants of a plan: entries are grouped by (sequence, format), logical order inside a group; a
// split holds whole pages of one format of one sequence; works are grouped by query tile
// (tile_work_begin) and a tile meets only the splits whose first key its last query can see; a work's
// key_tiles cover every key of its split that its tile's last query can see and end at the tile that
// holds the last such key; launch_order lists every work once, those with the most key tiles first;
// every sequence's page partials (stats_offset) and page scores (score_offset) tile their buffers; a
// tile's works of one format are contiguous (merge_ranges), and every row names its tile (merge_rows).
// cuda/paged_prefill.h stages a plan into device memory and runs it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/codec/page_format.h"
#include "minimakv/codec/portable.h"
#include "minimakv/cuda/decode_plan.h"

namespace minimakv::cuda {

// Query rows (tokens x the query heads of one GQA group) of one prefill CTA: its four MMA warps take 32
// rows each at head_dim <= 128 and 16 at 256, where a row's fp32 output takes twice the registers.
MINIMAKV_HD constexpr int prefill_tile_rows(int head_dim) {
  return head_dim > 128 ? 64 : 128;
}
// Keys of one K/V tile the CTA stages at a time (the fp16 tiles of 256-wide rows take twice the bytes).
MINIMAKV_HD constexpr int prefill_key_tile(int head_dim) {
  return head_dim > 128 ? 32 : 64;
}
// Query rows of a plan tile for cuda::PrefillKernel::kTma: 128 at every head_dim. At head_dim 256 its
// copy-engine CTA runs them as two consumer warpgroups of 64 rows, so one's softmax runs under the
// other's products and each K/V tile serves twice the rows; a CTA of fewer rows (the decoding CTA at
// head_dim 256, the copy-engine CTA with two query terms there) takes the tile in 64-row parts, one CTA
// each.
MINIMAKV_HD constexpr int prefill_tma_tile_rows(int /*head_dim*/) {
  return 128;
}
// Keys of one BF16 or FP8 tile where the copy engine fills shared memory (BF16 pages as the operands
// themselves, FP8 codes widened in place; cuda::PrefillKernel::kTma): twice as many, so each QK^T
// instruction is 128 keys wide (64 at head_dim 256).
MINIMAKV_HD constexpr int prefill_tma_key_tile(int head_dim) {
  return head_dim > 128 ? 64 : 128;
}

// The tiling a prefill kernel runs: query rows of a CTA and keys of one K/V tile per stored format.
struct PrefillTiling {
  int32_t rows = 0;
  std::array<int32_t, codec::kNumPageFormats> keys{};
  bool operator==(const PrefillTiling&) const = default;
};
// Whether cuda::PrefillKernel::kTma reads pages of format f by the copy engine: BF16 and FP8 always, TQ3
// at head_dim 128 and 256 (its 3d/8-byte rows are whole 16-byte chunks there); the rest (TQ3 at 64, TQ4)
// go to the decoding CTA.
constexpr bool prefill_tma_reads(int head_dim, codec::PageFormat f) {
  return f == codec::PageFormat::kBf16 || f == codec::PageFormat::kFp8 ||
         (f == codec::PageFormat::kTq3 && head_dim >= 128);
}
// tma: the tiling of cuda::PrefillKernel::kTma (the copy engine's key tiles for the formats it reads).
constexpr PrefillTiling prefill_tiling(int head_dim, bool tma) {
  PrefillTiling t;
  t.rows = tma ? prefill_tma_tile_rows(head_dim) : prefill_tile_rows(head_dim);
  t.keys.fill(prefill_key_tile(head_dim));
  if (tma)
    for (int f = 0; f < codec::kNumPageFormats; ++f)
      if (prefill_tma_reads(head_dim, static_cast<codec::PageFormat>(f))) t.keys[f] = prefill_tma_key_tile(head_dim);
  return t;
}

// One sequence of a prefill call: `n` query rows at positions first..first+n-1, stored at rows
// [row_begin, row_begin + n) of q and out; `pages` are the pages the LAST row may see, in logical order
// (page p holds positions [p * tokens_per_page, ...)).
struct PrefillSeq {
  int row_begin = 0, n = 0;
  uint32_t first = 0;
  std::vector<PageRef> pages;
};

// Device plan records (trivially copyable).
struct PrefillSeqRec {
  int32_t row_begin, n, first, pages, tile_begin;
  int32_t score_offset;  // of the sequence's pages in AttentionBuffers::score_acc
  int64_t stats_offset;  // of the sequence's [row][page][q_head] block in page_m / page_l
};
struct PrefillWorkRec {
  int32_t split, tile_token;  // first token (relative to the sequence's chunk) of the query tile
  int32_t key_tiles;          // key tiles of the split the CTA reads (>= 1)
};

struct PrefillPlan {
  int tile_tokens = 0;  // query tokens per tile: tiling.rows / GQA ratio
  PrefillTiling tiling;  // the kernel's tiling the plan was made for
  std::vector<PrefillSeqRec> seqs;
  std::vector<PlanEntry> entries;        // grouped by (sequence, format), logical order inside a group
  std::vector<PlanSplit> splits;         // whole pages of one format of one sequence
  std::vector<PrefillWorkRec> works;     // grouped by query tile
  std::vector<int32_t> tile_work_begin;  // [tiles + 1]
  std::vector<int32_t> launch_order;     // work indices, most key tiles first (ties in work order)
  // The merge (decode_plan.h): groups are query tiles, a tile's works of one format are contiguous;
  // unit_stride is tile_tokens, a row's offset its token in its tile.
  std::vector<MergeRange> merge_ranges;  // [tile][format]
  std::vector<MergeRow> merge_rows;      // [rows]
  int rows = 0;
  int64_t stats_size = 0;  // floats of page_m (and of page_l): sum of n * pages * q_heads
  // (key token, KV head) rows read by one CTA per work; a CTA that takes the tile in parts reads them once
  // per part (PrefillWorkspace::run counts those reads in its DecodeStats).
  std::array<uint64_t, codec::kNumPageFormats> key_reads{};
};

// Keys a split's tiles address per page: whole key tiles for pages of at least one tile, else the page
// itself (several pages share a tile). Key index i of a split is token i % slot of its entry i / slot.
MINIMAKV_HD constexpr int prefill_page_slot(int tokens_per_page, int key_tile) {
  return tokens_per_page >= key_tile ? (tokens_per_page + key_tile - 1) / key_tile * key_tile : tokens_per_page;
}

// tiling: the kernel's (PrefillWorkspace::tiling(), one of prefill_tiling's); split_tokens: keys per split
// (0: chosen so the grid fills the GPU). Throws std::invalid_argument on an inconsistent shape, tiling or
// page list (a null page id, token counts outside [1, tokens_per_page], rows that overlap, a last row
// whose position lies outside the listed pages).
PrefillPlan make_prefill_plan(std::span<const PrefillSeq> seqs, const DecodeShape& shape, const PrefillTiling& tiling,
                              int split_tokens = 0);

}  // namespace minimakv::cuda
