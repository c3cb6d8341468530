// The decode plan: which pages of which sequences each CTA of a paged decode step reads, as host code
// that builds and is tested without nvcc.
//
// Owns: the decode shape, the plan records the device reads (trivially copyable), make_decode_plan
// and the split bound a workspace is sized by. Invariants of a plan: entries and splits are grouped by
// (format, sequence), entries in logical order inside a group; seq_split_begin holds
// [format][batch + 1] offsets into splits; a split reads one format's entries of one sequence.
// cuda/paged_decode.h stages a plan into device memory and runs it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/codec/page_format.h"

namespace minimakv::cuda {

struct DecodeShape {
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  int tokens_per_page = 0;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
};

// One page of one sequence, in logical order.
struct PageRef {
  codec::PageFormat format = codec::PageFormat::kFp8;
  uint32_t page_id = 0;
  uint32_t tokens = 0;  // valid tokens (the last page may be partial)
};

// Device plan records (trivially copyable).
struct PlanEntry {
  uint32_t page_id, tokens, seq, logical;
};
struct PlanSplit {
  int32_t seq, format, entry_begin, entry_end, tok_begin, tok_end;
};

struct DecodePlan {
  std::vector<PlanEntry> entries;        // grouped by (format, sequence), logical order inside a group
  std::vector<PlanSplit> splits;         // grouped by (format, sequence)
  std::vector<int32_t> seq_split_begin;  // [format][batch + 1] offsets into splits
  int batch = 0;
};

// split_tokens: tokens per split (>= 128 recommended; 0 chooses from the batch so the grid fills the
// GPU). page_granular: never cut a page across splits (needed for per-page (m_p, l_p)).
DecodePlan make_decode_plan(std::span<const std::vector<PageRef>> seqs, const DecodeShape& shape, int split_tokens = 0,
                            bool page_granular = false);
// At least make_decode_plan(seqs, shape).splits.size() (automatic split size, not page-granular) for
// sequences holding these many tokens, whatever the formats of their pages: the split capacity a
// workspace needs before the plan exists (a captured graph's launches are sized before each step's plan).
int decode_split_bound(std::span<const uint32_t> seq_tokens, const DecodeShape& shape);

// Throws std::invalid_argument for an unsupported shape (head_dim, GQA ratio above 8, page size); the
// message starts with `where`. The prefill plan checks its shape with it too.
void validate_decode_shape(const DecodeShape& shape, const char* where = "DecodeWorkspace");

}  // namespace minimakv::cuda
