#include "minimakv/cuda/prefill_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <string>

#include "minimakv/codec/page_layout.h"
#include "require.h"

namespace minimakv::cuda {

namespace {

// CTAs (query tile x key split x KV head) of a plan with splits of `split_tokens` keys, counting the
// keys each tile's last row sees (pages of every format together: a close enough estimate).
double estimated_ctas(std::span<const PrefillSeq> seqs, int tile_tokens, int kv_heads, int split_tokens) {
  double ctas = 0;
  for (const auto& s : seqs)
    for (int k = 0; k * tile_tokens < s.n; ++k) {
      const double seen = static_cast<double>(s.first) + std::min(s.n, (k + 1) * tile_tokens);
      ctas += std::ceil(seen / split_tokens) * kv_heads;
    }
  return ctas;
}

}  // namespace

PrefillPlan make_prefill_plan(std::span<const PrefillSeq> seqs, const DecodeShape& shape, const PrefillTiling& tiling,
                              int split_tokens) {
  validate_decode_shape(shape, "make_prefill_plan");
  const int G = shape.q_heads / shape.kv_heads;
  const int B = shape.tokens_per_page;
  require(!seqs.empty(), "make_prefill_plan: no sequences");
  require(tiling == prefill_tiling(shape.head_dim, false) || tiling == prefill_tiling(shape.head_dim, true),
          "make_prefill_plan: no prefill kernel has this tiling at head_dim " + std::to_string(shape.head_dim));
  PrefillPlan plan;
  plan.tiling = tiling;
  plan.tile_tokens = tiling.rows / G;
  const int TQ = plan.tile_tokens;
  if (split_tokens <= 0) {
    // One CTA per SM at a time (132 SMs): long splits keep the partials and the merge small; at least
    // six waves of CTAs keep the causal triangle's uneven works from leaving SMs idle at the end.
    split_tokens = 16384;
    while (split_tokens > 512 && estimated_ctas(seqs, TQ, shape.kv_heads, split_tokens) < 6 * 132) split_tokens /= 2;
  }
  const int per_split = std::max(1, split_tokens / B);  // whole pages per split (page partials need it)
  int rows = 0, tiles = 0;
  int32_t score_pages = 0;
  int64_t stats = 0;
  plan.tile_work_begin.push_back(0);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const PrefillSeq& s = seqs[si];
    require(s.n >= 1, "make_prefill_plan: a sequence with no query rows");
    require(s.row_begin == rows, "make_prefill_plan: sequences must take consecutive rows in order");
    const uint64_t last = static_cast<uint64_t>(s.first) + s.n - 1;
    require(last < static_cast<uint64_t>(INT_MAX), "make_prefill_plan: position out of range");
    const size_t need = static_cast<size_t>(last / B + 1);
    require(s.pages.size() == need, "make_prefill_plan: sequence " + std::to_string(si) + " lists " +
                                        std::to_string(s.pages.size()) + " pages, its last row sees " +
                                        std::to_string(need));
    const int seq_tiles = (s.n + TQ - 1) / TQ;
    plan.seqs.push_back(
        {s.row_begin, s.n, static_cast<int32_t>(s.first), static_cast<int32_t>(need), tiles, score_pages, stats});
    score_pages += static_cast<int32_t>(need);
    rows += s.n;
    tiles += seq_tiles;
    stats += static_cast<int64_t>(s.n) * static_cast<int64_t>(need) * shape.q_heads;
    for (const PageRef& pr : s.pages)
      require(cuda_reads(pr.format),
              std::string("make_prefill_plan: no CUDA kernel reads ") + codec::to_string(pr.format) + " pages");
    const size_t split0 = plan.splits.size();
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const int first = static_cast<int>(plan.entries.size());
      for (size_t p = 0; p < s.pages.size(); ++p) {
        const PageRef& pr = s.pages[p];
        if (static_cast<int>(pr.format) != f) continue;
        require(pr.page_id != 0, "make_prefill_plan: page id 0 is the null page");
        require(pr.tokens >= 1 && pr.tokens <= static_cast<uint32_t>(B),
                "make_prefill_plan: page token count outside [1, tokens_per_page]");
        plan.entries.push_back({pr.page_id, pr.tokens, static_cast<uint32_t>(si), static_cast<uint32_t>(p)});
      }
      const int end = static_cast<int>(plan.entries.size());
      for (int e = first; e < end; e += per_split)
        plan.splits.push_back({static_cast<int32_t>(si), f, e, std::min(end, e + per_split), 0, B});
    }
    for (int k = 0; k < seq_tiles; ++k) {
      const int64_t tile_last = static_cast<int64_t>(s.first) + std::min(s.n, (k + 1) * TQ) - 1;
      for (size_t sp = split0; sp < plan.splits.size(); ++sp) {
        const PlanSplit& rec = plan.splits[sp];
        if (static_cast<int64_t>(plan.entries[rec.entry_begin].logical) * B > tile_last) continue;
        const int KT = tiling.keys[rec.format], slot = prefill_page_slot(B, KT);
        int64_t keys = 0;  // key index (in slots) just past the last key the tile's last row sees
        for (int e = rec.entry_begin; e < rec.entry_end; ++e) {
          const int64_t start = static_cast<int64_t>(plan.entries[e].logical) * B;
          const int64_t n = std::min<int64_t>(plan.entries[e].tokens, tile_last - start + 1);
          if (n <= 0) break;  // entries are in logical order: the rest lie past the tile too
          plan.key_reads[rec.format] += static_cast<uint64_t>(n) * shape.kv_heads;
          keys = static_cast<int64_t>(e - rec.entry_begin) * slot + n;
        }
        plan.works.push_back({static_cast<int32_t>(sp), k * TQ, static_cast<int32_t>((keys + KT - 1) / KT)});
      }
      plan.tile_work_begin.push_back(static_cast<int32_t>(plan.works.size()));
      // Splits were made format by format, so the tile's works of each format are one run.
      const int32_t tile_end = plan.tile_work_begin.back();
      int32_t w = plan.tile_work_begin[plan.tile_work_begin.size() - 2];
      for (int f = 0; f < codec::kNumPageFormats; ++f) {
        const int32_t begin = w;
        while (w < tile_end && plan.splits[plan.works[w].split].format == f) ++w;
        plan.merge_ranges.push_back({begin, w});
      }
      require(w == tile_end, "make_prefill_plan: a tile's works are not grouped by format");
      const int tile = static_cast<int>(plan.tile_work_begin.size()) - 2;
      for (int t = k * TQ; t < std::min(s.n, (k + 1) * TQ); ++t) plan.merge_rows.push_back({tile, t - k * TQ});
    }
  }
  plan.rows = rows;
  plan.stats_size = stats;
  plan.launch_order.resize(plan.works.size());
  std::iota(plan.launch_order.begin(), plan.launch_order.end(), 0);
  std::stable_sort(plan.launch_order.begin(), plan.launch_order.end(),
                   [&](int32_t a, int32_t b) { return plan.works[a].key_tiles > plan.works[b].key_tiles; });
  return plan;
}

}  // namespace minimakv::cuda
