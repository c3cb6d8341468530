#include "minimakv/cuda/decode_plan.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/rotation.h"
#include "require.h"

namespace minimakv::cuda {

namespace {

// Aim for about one CTA per SM of a 132-SM part (each warp of a CTA then streams several tiles through
// its ring, and the merge has few partials); splits of 128..1024 tokens. Measured on an H200 against
// fixed sizes (cuda_decode_bench --split-tokens, docs/benchmarks.md). This is the smallest split any
// format gets, so decode_split_bound, which counts with it, bounds every format's splits.
int auto_split_tokens(size_t tokens, const DecodeShape& shape, int cap = 1024) {
  const size_t per = tokens * static_cast<size_t>(shape.kv_heads) / 132;
  int split_tokens = 128;
  while (split_tokens < cap && static_cast<size_t>(split_tokens) * 2 <= per) split_tokens *= 2;
  return split_tokens;
}

// The largest automatic split of a format. Measured on an H200 (docs/benchmarks.md, "split sizes"):
// 2,048-token splits make FP8 7-11% faster from batch 2 (fewer partials, longer rings) and the dense
// control at head_dim 256, but lose at batch 1, where fewer, longer CTAs leave SMs idle, and on the
// canary's mixed layout, where the FP8 pages are the few Recent and Anchor ones beside the TQ3 launch:
// the longer splits apply where the format holds at least half of the batch's tokens. The rotated
// formats' heavier tiles gain only from about four waves of 2,048-token CTAs (tokens x KV heads >= 4M)
// and lose below that (mixed at 32K batch 8).
int split_cap(codec::PageFormat f, size_t format_tokens, size_t tokens, size_t batch, const DecodeShape& shape) {
  const bool most = 2 * format_tokens >= tokens;
  switch (f) {
    case codec::PageFormat::kFp8:
      return batch >= 2 && most ? 2048 : 1024;
    case codec::PageFormat::kBf16:
      return batch >= 2 && most && shape.head_dim >= 256 ? 2048 : 1024;
    case codec::PageFormat::kTq3:
    case codec::PageFormat::kTq4:
      return tokens * static_cast<size_t>(shape.kv_heads) >= (size_t{4} << 20) ? 2048 : 1024;
  }
  return 1024;
}

}  // namespace

void validate_decode_shape(const DecodeShape& s, const char* where) {
  codec::require_supported_head_dim(s.head_dim, where);
  auto check = [where](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string(where) + ": " + what);
  };
  check(s.kv_heads > 0 && s.q_heads > 0 && s.q_heads % s.kv_heads == 0, "q_heads must be a positive multiple of kv_heads");
  check(s.q_heads / s.kv_heads <= 8, "GQA ratio above 8 is not supported");
  check(s.tokens_per_page >= 1 && s.tokens_per_page <= codec::kMaxTokensPerPage, "tokens_per_page out of range");
}

int decode_split_bound(std::span<const uint32_t> seq_tokens, const DecodeShape& shape) {
  validate_decode_shape(shape);
  const size_t B = static_cast<size_t>(shape.tokens_per_page);
  size_t tokens = 0;
  for (uint32_t t : seq_tokens) tokens += t;
  const size_t split_tokens = static_cast<size_t>(auto_split_tokens(tokens, shape));
  size_t bound = 0;
  for (uint32_t t : seq_tokens) {
    const size_t pages = (t + B - 1) / B;
    // Pages as long as a split are cut into at most ceil(B / split) parts each; shorter pages are grouped
    // `per` at a time within each format, and each of the three formats may end on a partial group.
    bound += B >= split_tokens ? pages * ((B + split_tokens - 1) / split_tokens)
                               : (pages + split_tokens / B - 1) / (split_tokens / B) + codec::kNumPageFormats - 1;
  }
  return static_cast<int>(bound);
}

DecodePlan make_decode_plan(std::span<const std::vector<PageRef>> seqs, const DecodeShape& shape, int split_tokens,
                            bool page_granular) {
  validate_decode_shape(shape);
  const int B = shape.tokens_per_page;
  for (const auto& s : seqs)
    for (const auto& pr : s)
      if (!cuda_reads(pr.format))
        throw std::invalid_argument(std::string("make_decode_plan: no CUDA kernel reads ") + codec::to_string(pr.format) +
                                    " pages");
  // Each format's split size: the caller's, or the automatic one for the whole batch's tokens.
  std::array<int, codec::kNumPageFormats> format_split{};
  {
    size_t tokens = 0;
    std::array<size_t, codec::kNumPageFormats> format_tokens{};
    for (const auto& s : seqs)
      for (const auto& pr : s) {
        tokens += pr.tokens;
        format_tokens[static_cast<int>(pr.format)] += pr.tokens;
      }
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const int cap = split_cap(static_cast<codec::PageFormat>(f), format_tokens[f], tokens, seqs.size(), shape);
      format_split[f] = split_tokens > 0 ? split_tokens : auto_split_tokens(tokens, shape, cap);
    }
  }
  DecodePlan plan;
  plan.batch = static_cast<int>(seqs.size());
  // Format-major, then sequence: each format's splits are one contiguous range (one launch per format).
  plan.seq_split_begin.push_back(0);
  for (int f = 0; f < codec::kNumPageFormats; ++f) {
    if (f > 0) plan.seq_split_begin.push_back(static_cast<int32_t>(plan.splits.size()));
    for (size_t si = 0; si < seqs.size(); ++si) {
      const int first = static_cast<int>(plan.entries.size());
      uint32_t logical = 0;
      for (const auto& pr : seqs[si]) {
        if (static_cast<int>(pr.format) == f) {
          require(pr.page_id != 0, "make_decode_plan: page id 0 is the null page");
          require(pr.tokens >= 1 && pr.tokens <= static_cast<uint32_t>(B),
                  "make_decode_plan: page token count outside [1, tokens_per_page]");
          plan.entries.push_back({pr.page_id, pr.tokens, static_cast<uint32_t>(si), logical});
        }
        ++logical;
      }
      const int last = static_cast<int>(plan.entries.size());
      const int split = format_split[f];
      if (B >= split) {
        const int parts = page_granular ? 1 : (B + split - 1) / split;
        const int step = (B + parts - 1) / parts;
        for (int e = first; e < last; ++e)
          for (int t = 0; t < static_cast<int>(plan.entries[e].tokens); t += step)
            plan.splits.push_back({static_cast<int32_t>(si), f, e, e + 1, t, std::min(B, t + step)});
      } else {
        const int per = std::max(1, split / B);
        for (int e = first; e < last; e += per)
          plan.splits.push_back({static_cast<int32_t>(si), f, e, std::min(last, e + per), 0, B});
      }
      plan.seq_split_begin.push_back(static_cast<int32_t>(plan.splits.size()));
    }
  }
  return plan;
}

std::vector<MergeRange> decode_merge_ranges(const DecodePlan& plan) {
  const size_t items = static_cast<size_t>(plan.batch) + 1;
  require(plan.batch >= 0 && plan.seq_split_begin.size() == codec::kNumPageFormats * items,
          "decode_merge_ranges: seq_split_begin must hold 3 * (batch + 1) offsets");
  std::vector<MergeRange> ranges;
  ranges.reserve(static_cast<size_t>(plan.batch) * codec::kNumPageFormats);
  for (int b = 0; b < plan.batch; ++b)
    for (int f = 0; f < codec::kNumPageFormats; ++f)
      ranges.push_back({plan.seq_split_begin[f * items + b], plan.seq_split_begin[f * items + b + 1]});
  return ranges;
}

}  // namespace minimakv::cuda
