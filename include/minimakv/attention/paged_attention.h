// Attention over a sequence's pages in their stored formats (BF16, FP8, TQ3), merged under one softmax.
//
// Owns: the CPU kernels of decode (one query) and chunked prefill (a block of queries with a causal
// mask). All query heads of a GQA group are processed together, so each K/V row is decoded once and
// used by the whole group; in chunked prefill, by up to 8 / G consecutive queries of the block as well
// (8 (query, head) rows per decoded row, each with its own causal limit). FP8 and BF16 rows are decoded
// and dotted directly; for TQ3 pages the query is rotated once per KV head (q' = R q) and dotted against
// the rotated codes, values are accumulated in the rotated domain, and the accumulated output is rotated
// back once per split. No dense copy of the cache is ever made.
// Softmax partials use the NATURAL logarithm: a partition j reports m_j = max logit and
// l_j = sum exp(s - m_j) and a normalised output O_j; partitions merge as m = max m_j,
// l = sum exp(m_j - m) l_j, O = sum exp(m_j - m) l_j O_j / l (libraries using log2 differ).
// Each page is a partition: its own (m_p, l_p) can be returned for the page scores of the controller.
// Accumulation is fp32. Supported: head_dim 64/128/256, GQA ratios 1..8 (q_heads % kv_heads == 0),
// any page order and format mix, a partial last page.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/attention/thread_pool.h"
#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/rotation.h"

namespace minimakv::cache {
class HostPageStorage;
class PagedView;
}  // namespace minimakv::cache

namespace minimakv::attention {

struct PageView {
  codec::PageFormat format = codec::PageFormat::kFp8;
  const uint8_t* data = nullptr;  // one layer-page in the layout of `format`
  uint32_t tokens = 0;            // valid tokens (the last page may be partial)
  uint32_t first_position = 0;    // sequence position of the page's token 0
};

struct LayerInput {
  std::vector<PageView> pages;                                             // logical order
  std::array<const codec::PageLayout*, codec::kNumPageFormats> layouts{};  // one per format present
  std::span<const codec::Rotation> rotations;                              // per KV head (needed for TQ3 pages)
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)
};

struct QueryBlock {
  std::span<const float> q;  // [n][q_heads][head_dim]
  int n = 1;
  uint32_t first_position = 0;  // query i attends to positions <= first_position + i
};

// Per page and query head: the page's own (m_p, l_p); and the merged (m, l) of each query head.
struct PagePartials {
  int pages = 0, q_heads = 0, queries = 0;
  std::vector<float> m_page, l_page;  // [query][page][q_head]; l_page = 0 when the page is fully masked
  std::vector<float> m, l;            // [query][q_head]
};

struct AttendOptions {
  int pages_per_split = 0;     // 0: choose from the page count (splits of >= 128 tokens)
  ThreadPool* pool = nullptr;  // null: run on the calling thread
};

// out: [n][q_heads][head_dim]. Throws std::invalid_argument on inconsistent shapes.
void attend(const LayerInput& in, const QueryBlock& qb, std::span<float> out, PagePartials* partials = nullptr,
            const AttendOptions& opt = {});

// The pages of a paged view, in logical order, as the kernel reads them from host storage.
LayerInput layer_input(const cache::HostPageStorage& storage, const cache::PagedView& view, int q_heads);

// Page scores of eq. 7-9: q_{h,p} = exp(m_p - m) l_p / l, renormalised over the pages, averaged over
// the query heads in `heads` (all when empty) and over the queries. Result: one r_p per page.
std::vector<float> page_scores(const PagePartials& p, std::span<const int> heads = {});

}  // namespace minimakv::attention
