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

constexpr size_t kSms = 132;  // of an H200, the part the split sizes are measured on

// Aim for about one CTA per SM (each warp of a CTA then streams several tiles through its ring, and the
// merge has few partials); splits of 128..1024 tokens. Measured on an H200 against fixed sizes
// (cuda_decode_bench --split-tokens, docs/benchmarks.md). This is the smallest split any format gets,
// so decode_split_bound, which counts with it, bounds every format's splits.
int auto_split_tokens(size_t tokens, const DecodeShape& shape, int cap = 1024) {
  const size_t per = tokens * static_cast<size_t>(shape.kv_heads) / kSms;
  int split_tokens = 128;
  while (split_tokens < cap && static_cast<size_t>(split_tokens) * 2 <= per) split_tokens *= 2;
  return split_tokens;
}

// Splits of `split` tokens a format's pages make, summed over the batch (per_seq_pages: that format's
// pages in each sequence), as make_decode_plan cuts them, counting every page as full.
size_t format_splits(std::span<const size_t> per_seq_pages, int B, int split) {
  size_t n = 0;
  for (size_t pages : per_seq_pages)
    n += B >= split ? pages * static_cast<size_t>((B + split - 1) / split)
                    : (pages + static_cast<size_t>(split / B) - 1) / static_cast<size_t>(split / B);
  return n;
}

// A split size's time in waves: the CTAs (splits x KV heads) run decode_ctas_per_sm x 132 at a time,
// each reading the tokens of one split, so a launch takes about (waves) x (tokens per split).
double wave_cost(codec::PageFormat f, std::span<const size_t> per_seq_pages, const DecodeShape& shape, int split) {
  const int B = shape.tokens_per_page;
  const size_t ctas = format_splits(per_seq_pages, B, split) * static_cast<size_t>(shape.kv_heads);
  const size_t slots = kSms * static_cast<size_t>(decode_ctas_per_sm(f, shape.head_dim));
  const int per_split = B >= split ? (B + (B + split - 1) / split - 1) / ((B + split - 1) / split) : split / B * B;
  return static_cast<double>((ctas + slots - 1) / slots) * per_split;
}

// Each format's automatic split size. Measured on an H200 (docs/benchmarks.md, "split sizes"):
// - FP8, and the dense control at head_dim 256: 2,048-token splits are 6-10% faster (fewer partials,
//   longer rings) unless they cost more waves: at batch 1 (128K: 2 waves of 2,048-token splits against
//   3 of 1,024) and on the canary with 832-token pages (2 waves of 1,664-token splits against 3 of 832,
//   13% slower). So they are taken where the wave model above puts them within 10% of the shorter
//   splits (with many waves: 5% more at 32K batch 32, measured 8% faster). On the canary's mixed
//   layout the FP8 pages are the few Recent and Anchor ones beside the TQ3 launch, where the longer
//   splits lost: a minority format takes them only from 4M token-heads (the FP8 launch then has many
//   waves of its own), where they made mixed decode at 128K, batch 8 and 32, 2-6% faster.
// - TQ3 and TQ4: their heavier tiles gain only from tokens x KV heads >= 4M and lose below that (mixed at
//   32K batch 8).
int format_split_tokens(codec::PageFormat f, size_t format_tokens, size_t tokens, std::span<const size_t> per_seq_pages,
                        const DecodeShape& shape) {
  const int base = auto_split_tokens(tokens, shape);
  const bool many_token_heads = tokens * static_cast<size_t>(shape.kv_heads) >= (size_t{4} << 20);
  switch (f) {
    case codec::PageFormat::kFp8:
    case codec::PageFormat::kBf16: {
      if (f == codec::PageFormat::kBf16 && shape.head_dim < 256) return base;
      const int longer = auto_split_tokens(tokens, shape, 2048);
      if (longer == base || (2 * format_tokens < tokens && !many_token_heads)) return base;
      return wave_cost(f, per_seq_pages, shape, longer) <= 1.1 * wave_cost(f, per_seq_pages, shape, base) ? longer
                                                                                                          : base;
    }
    case codec::PageFormat::kTq3:
    case codec::PageFormat::kTq4:
      return auto_split_tokens(tokens, shape, many_token_heads ? 2048 : 1024);
  }
  return base;
}

}  // namespace

void validate_decode_shape(const DecodeShape& s, const char* where) {
  codec::require_supported_head_dim(s.head_dim, where);
  auto check = [where](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string(where) + ": " + what);
  };
  check(s.kv_heads > 0 && s.q_heads > 0 && s.q_heads % s.kv_heads == 0,
        "q_heads must be a positive multiple of kv_heads");
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
        throw std::invalid_argument(std::string("make_decode_plan: no CUDA kernel reads ") +
                                    codec::to_string(pr.format) + " pages");
  // Each format's split size: the caller's, or the automatic one for the whole batch's tokens.
  std::array<int, codec::kNumPageFormats> format_split{};
  {
    size_t tokens = 0;
    std::array<size_t, codec::kNumPageFormats> format_tokens{};
    std::array<std::vector<size_t>, codec::kNumPageFormats> format_pages;  // per sequence
    for (auto& v : format_pages) v.assign(seqs.size(), 0);
    for (size_t si = 0; si < seqs.size(); ++si)
      for (const auto& pr : seqs[si]) {
        tokens += pr.tokens;
        format_tokens[static_cast<int>(pr.format)] += pr.tokens;
        ++format_pages[static_cast<int>(pr.format)][si];
      }
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      format_split[f] = split_tokens > 0 ? split_tokens
                                         : format_split_tokens(static_cast<codec::PageFormat>(f), format_tokens[f],
                                                               tokens, format_pages[f], shape);
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
