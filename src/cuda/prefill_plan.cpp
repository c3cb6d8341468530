#include "minimakv/cuda/prefill_plan.h"

#include <algorithm>
#include <climits>
#include <string>

#include "minimakv/codec/page_layout.h"
#include "require.h"

namespace minimakv::cuda {

PrefillPlan make_prefill_plan(std::span<const PrefillSeq> seqs, const DecodeShape& shape, int split_tokens) {
  validate_decode_shape(shape, "make_prefill_plan");
  const int G = shape.q_heads / shape.kv_heads;
  const int B = shape.tokens_per_page;
  require(!seqs.empty(), "make_prefill_plan: no sequences");
  PrefillPlan plan;
  plan.tile_tokens = kPrefillTileRows / G;
  const int TQ = plan.tile_tokens;
  if (split_tokens <= 0) {
    // Enough CTAs (tiles x splits x KV heads) for about 8 per SM of a 132-SM part.
    double work = 0;
    for (const auto& s : seqs)
      work += static_cast<double>((s.n + TQ - 1) / TQ) * (static_cast<double>(s.first) + s.n) * shape.kv_heads;
    split_tokens = 256;
    while (split_tokens < 4096 && 2.0 * split_tokens <= work / (132 * 8)) split_tokens *= 2;
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
        plan.works.push_back({static_cast<int32_t>(sp), k * TQ});
        for (int e = rec.entry_begin; e < rec.entry_end; ++e) {
          const int64_t start = static_cast<int64_t>(plan.entries[e].logical) * B;
          const int64_t n = std::min<int64_t>(plan.entries[e].tokens, tile_last - start + 1);
          if (n > 0) plan.key_reads[rec.format] += static_cast<uint64_t>(n) * shape.kv_heads;
        }
      }
      plan.tile_work_begin.push_back(static_cast<int32_t>(plan.works.size()));
    }
  }
  plan.rows = rows;
  plan.stats_size = stats;
  return plan;
}

}  // namespace minimakv::cuda
