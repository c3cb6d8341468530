// The prefill plan: which query tiles of which sequences meet which key splits in a chunked prefill, as
// host code that builds and is tested without nvcc (like the decode plan, with whose records it shares
// its vocabulary: PageRef, PlanEntry, PlanSplit).
//
// Owns: the prefill sequence description, the plan records the device reads (trivially copyable) and
// make_prefill_plan. Invariants of a plan: entries are grouped by (sequence, format), logical order
// inside a group; a split holds whole pages of one format of one sequence; works are grouped by query
// tile (tile_work_begin) and a tile meets only the splits whose first key its last query can see;
// every sequence's page partials (stats_offset) and page scores (score_offset) tile their buffers.
// cuda/paged_prefill.h stages a plan into device memory and runs it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/codec/page_format.h"
#include "minimakv/cuda/decode_plan.h"

namespace minimakv::cuda {

// Query rows (tokens x the GQA group's query heads) of one prefill CTA: 4 warps x 16 mma rows.
inline constexpr int kPrefillTileRows = 64;

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
  int32_t score_offset;  // of the sequence's pages in PrefillBuffers::score_acc
  int64_t stats_offset;  // of the sequence's [row][page][q_head] block in page_m / page_l
};
struct PrefillWorkRec {
  int32_t split, tile_token;  // first token (relative to the sequence's chunk) of the query tile
};

struct PrefillPlan {
  int tile_tokens = 0;  // query tokens per tile: kPrefillTileRows / GQA ratio
  std::vector<PrefillSeqRec> seqs;
  std::vector<PlanEntry> entries;        // grouped by (sequence, format), logical order inside a group
  std::vector<PlanSplit> splits;         // whole pages of one format of one sequence
  std::vector<PrefillWorkRec> works;     // grouped by query tile
  std::vector<int32_t> tile_work_begin;  // [tiles + 1]
  int rows = 0;
  int64_t stats_size = 0;  // floats of page_m (and of page_l): sum of n * pages * q_heads
  std::array<uint64_t, codec::kNumPageFormats> key_reads{};  // (key token, KV head) rows the CTAs read
};

// split_tokens: keys per split (0: chosen so the grid fills the GPU). Throws std::invalid_argument on an
// inconsistent shape or page list (a null page id, token counts outside [1, tokens_per_page], rows that
// overlap, a last row whose position lies outside the listed pages).
PrefillPlan make_prefill_plan(std::span<const PrefillSeq> seqs, const DecodeShape& shape, int split_tokens = 0);

}  // namespace minimakv::cuda
