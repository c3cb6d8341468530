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

// Whether the CUDA attention kernels read pages of format f (every format of the table today): the
// plans refuse any other rather than leave its pages out of the softmax.
constexpr bool cuda_reads(codec::PageFormat f) {
  return codec::format_index(f) < codec::kNumPageFormats;
}

// CTAs of decode_split_kernel<f, head_dim> an SM holds at once: the kernel's __launch_bounds__ minimum
// (its shared-memory rings are sized for it), and what the automatic split size counts waves with.
constexpr int decode_ctas_per_sm(codec::PageFormat f, int head_dim) {
  return codec::format_spec(f).rotated ? (head_dim >= 256 ? 3 : 4) : (head_dim >= 256 ? 2 : 3);
}

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

// The one merge of decode and prefill. Each output row merges the partials of its group's works (decode:
// a batch item's splits; prefill: a query tile's works); those of each format form one contiguous range
// of works, [begin, end), and the rotated formats' share is rotated back once. Work w's partial of a row
// is unit w * unit_stride + the row's offset in its group, in the one partials layout of both:
// part_o[(unit * q_heads + q_head) * head_dim + d] and part_m, part_l[unit * q_heads + q_head].
struct MergeRange {
  int32_t begin, end;  // works of one format of one group
};
struct MergeRow {
  int32_t group, offset;  // an output row's group, and its offset among the group's units
};

struct DecodePlan {
  std::vector<PlanEntry> entries;        // grouped by (format, sequence), logical order inside a group
  std::vector<PlanSplit> splits;         // grouped by (format, sequence)
  std::vector<int32_t> seq_split_begin;  // [format][batch + 1] offsets into splits
  int batch = 0;
};

// split_tokens: tokens per split (>= 128 recommended; 0 chooses per format from the batch so the grid
// fills the GPU: 128..1024 tokens, up to 2048 where a format measured faster with them). page_granular:
// never cut a page across splits (needed for per-page (m_p, l_p)).
DecodePlan make_decode_plan(std::span<const std::vector<PageRef>> seqs, const DecodeShape& shape, int split_tokens = 0,
                            bool page_granular = false);
// The merge ranges of a decode plan, [batch][format]: item b's splits of format f (its group is b, its
// offset 0, unit_stride 1).
std::vector<MergeRange> decode_merge_ranges(const DecodePlan& plan);
// At least make_decode_plan(seqs, shape).splits.size() (automatic split size, not page-granular) for
// sequences holding these many tokens, whatever the formats of their pages: the split capacity a
// workspace needs before the plan exists (a captured graph's launches are sized before each step's plan).
int decode_split_bound(std::span<const uint32_t> seq_tokens, const DecodeShape& shape);

// Throws std::invalid_argument for an unsupported shape (head_dim, GQA ratio above 8, page size); the
// message starts with `where`. The prefill plan checks its shape with it too.
void validate_decode_shape(const DecodeShape& shape, const char* where = "DecodeWorkspace");

}  // namespace minimakv::cuda
