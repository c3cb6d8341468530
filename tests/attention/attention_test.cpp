// Mixed-format paged attention against the fp64 reference on fresh random data: every format mix
// (dense BF16, FP8-only, TQ3-only, TQ4-only, mixed FP8 + TQ3 + TQ4), decode and chunked prefill with a causal mask,
// partial last pages, GQA ratios 1-8, head_dim 64/128/256, single-threaded and threaded. Outputs are poisoned before
// every run. Page scores from the direct path are checked against the dense reference collector.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include <hwy/targets.h>

#include "minimakv/attention/paged_attention.h"
#include "minimakv/attention/reference.h"
#include "minimakv/codec/page_codec.h"
#include "test_util.h"

namespace minimakv::attention {
namespace {

using codec::PageFormat;

struct Built {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<codec::PageLayout> layouts;
  std::vector<codec::Rotation> rotations;
  std::vector<float> k, v;  // raw [tokens][kv][d]
  LayerInput in;
};

// Pages of B tokens holding `tokens` random rows; page i has format fmt(i) (a rotated format, TQ3 or
// TQ4, is made from a whole FP8 page by conversion; a partial last page stays FP8, as in the store).
template <typename Fmt>
Built build(std::mt19937_64& rng, int d, int kv, int q_heads, int B, int tokens, Fmt fmt, float outlier = 0.0f) {
  Built b;
  std::normal_distribution<float> g;
  b.k.resize(static_cast<size_t>(tokens) * kv * d);
  b.v.resize(b.k.size());
  for (auto& x : b.k) x = g(rng);
  for (auto& x : b.v) x = g(rng);
  if (outlier > 0)  // make some keys stand out so attention is peaked, as in retrieval
    for (int t = 0; t < tokens; t += 7)
      for (int i = 0; i < d; ++i) b.k[(static_cast<size_t>(t) * kv) * d + i] *= outlier;
  for (int h = 0; h < kv; ++h) b.rotations.push_back(codec::Rotation::for_head(d, 3, static_cast<uint32_t>(h)));
  for (const codec::PageFormatSpec& s : codec::all_page_formats())
    b.layouts.emplace_back(s.format, codec::PageGeometry{B, kv, d});
  const int pages = (tokens + B - 1) / B;
  for (int p = 0; p < pages; ++p) {
    const int nt = std::min(B, tokens - p * B);
    PageFormat f = fmt(p);
    const bool rotated = codec::format_spec(f).rotated;
    if (rotated && nt < B) f = PageFormat::kFp8;
    const PageFormat write = rotated ? PageFormat::kFp8 : f;
    std::vector<uint8_t> page(b.layouts[static_cast<int>(write)].bytes(), 0);
    for (int t = 0; t < nt; ++t) {
      const size_t off = static_cast<size_t>(p * B + t) * kv * d;
      codec::write_token(page, b.layouts[static_cast<int>(write)], t,
                         std::span<const float>(b.k).subspan(off, static_cast<size_t>(kv) * d),
                         std::span<const float>(b.v).subspan(off, static_cast<size_t>(kv) * d));
    }
    if (codec::format_spec(f).rotated) {
      const codec::PageLayout& to = b.layouts[static_cast<int>(f)];
      std::vector<uint8_t> sealed(to.bytes());
      codec::convert_fp8_to_rotated(page, b.layouts[1], sealed, to, b.rotations, B);
      page = std::move(sealed);
    }
    b.bytes.push_back(std::move(page));
    b.in.pages.push_back({f, nullptr, static_cast<uint32_t>(nt), static_cast<uint32_t>(p * B)});
  }
  for (size_t p = 0; p < b.bytes.size(); ++p) b.in.pages[p].data = b.bytes[p].data();
  for (int f = 0; f < codec::kNumPageFormats; ++f) b.in.layouts[f] = &b.layouts[f];
  b.in.rotations = b.rotations;
  b.in.q_heads = q_heads;
  b.in.kv_heads = kv;
  b.in.head_dim = d;
  return b;
}

double rel_l2(std::span<const float> got, std::span<const double> ref) {
  double e = 0, n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    e += (got[i] - ref[i]) * (got[i] - ref[i]);
    n += ref[i] * ref[i];
  }
  return std::sqrt(e / n);
}

enum class Mix { kBf16, kFp8, kTq3, kTq4, kMixed };
const char* mix_name(Mix m) {
  return m == Mix::kBf16 ? "bf16" : m == Mix::kFp8 ? "fp8" : m == Mix::kTq3 ? "tq3" : m == Mix::kTq4 ? "tq4" : "mixed";
}

// (head_dim, GQA ratio, mix)
class MixedAttention : public ::testing::TestWithParam<std::tuple<int, int, Mix>> {};

TEST_P(MixedAttention, MatchesFp64ReferenceOverTheSamePages) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto [d, ratio, mix] = GetParam();
  const int kv = 2, q_heads = kv * ratio, B = 16, tokens = 16 * 9 + 5;  // partial last page
  std::uniform_int_distribution<int> coin(0, 3);
  std::vector<int> pattern(64);
  for (auto& x : pattern) x = coin(rng);
  auto fmt = [&](int p) {
    switch (mix) {
      case Mix::kBf16:
        return PageFormat::kBf16;
      case Mix::kFp8:
        return PageFormat::kFp8;
      case Mix::kTq3:
        return PageFormat::kTq3;
      case Mix::kTq4:
        return PageFormat::kTq4;
      default:  // ~27% FP8, ~18% TQ4 (a partial last page stays FP8)
        return pattern[p] == 0 ? PageFormat::kFp8 : pattern[p] == 1 ? PageFormat::kTq4 : PageFormat::kTq3;
    }
  };
  Built b = build(rng, d, kv, q_heads, B, tokens, fmt, 3.0f);
  ThreadPool pool(3);
  for (int n : {1, 6, 37}) {  // decode, and chunked-prefill blocks at the end (37: across pages)
    std::normal_distribution<float> g;
    std::vector<float> q(static_cast<size_t>(n) * q_heads * d);
    for (auto& x : q) x = g(rng);
    const QueryBlock qb{q, n, static_cast<uint32_t>(tokens - n)};
    const ReferenceResult ref = attend_reference(b.in, qb);
    for (int variant = 0; variant < 3; ++variant) {
      AttendOptions opt;
      if (variant == 1) opt.pages_per_split = 1;  // many splits, merged serially
      if (variant == 2) {
        opt.pages_per_split = 2;
        opt.pool = &pool;  // threaded
      }
      std::vector<float> out(q.size());
      testing::poison(std::span<float>(out));
      PagePartials parts;
      attend(b.in, qb, out, &parts, opt);
      EXPECT_LT(rel_l2(out, ref.out), 2e-6)
          << mix_name(mix) << " d=" << d << " ratio=" << ratio << " n=" << n << " variant=" << variant;
      // page scores of the direct path vs the dense reference collector, per (query, page, head)
      double e = 0, nn = 0;
      for (int qi = 0; qi < n; ++qi)
        for (int h = 0; h < q_heads; ++h)
          for (size_t p = 0; p < b.in.pages.size(); ++p) {
            const size_t i = (static_cast<size_t>(qi) * b.in.pages.size() + p) * q_heads + h;
            const size_t mi = static_cast<size_t>(qi) * q_heads + h;
            const double qhp = parts.l_page[i] > 0 ? std::exp(static_cast<double>(parts.m_page[i]) - parts.m[mi]) *
                                                         parts.l_page[i] / parts.l[mi]
                                                   : 0.0;
            e += (qhp - ref.page_mass[i]) * (qhp - ref.page_mass[i]);
            nn += ref.page_mass[i] * ref.page_mass[i];
          }
      EXPECT_LT(std::sqrt(e / nn), 1e-5) << "page scores, " << mix_name(mix) << " variant " << variant;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MixedAttention,
                         ::testing::Combine(::testing::Values(64, 128, 256), ::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(Mix::kBf16, Mix::kFp8, Mix::kTq3, Mix::kTq4,
                                                              Mix::kMixed)));

// FP8-only against attention over the unquantized K/V. E4M3 keeps 3 mantissa bits, so each element
// carries ~2.6% RMS error; for zero-mean i.i.d. values the attention output shrinks exactly as fast as
// that error averages out, so the output error stays near sqrt(2) x the per-element error (~0.037).
// Values with a shared component, as real value projections have, average to a larger output and the
// error falls to about a third of that. Over 300 seeds (release build, 2026-12-01): i.i.d. mean 0.037,
// sd 0.002-0.003, max 0.055; shared mean 0.012, sd 0.002, max 0.025, a tail from seeds whose random
// mean direction is short. Bounds: 1.5x those maxima (0.08, 0.04); the shared bound stays half the
// i.i.d. mean, so the shared case still shows its smaller error.
TEST(MixedAttention, Fp8OnlyIsCloseToUnquantizedAttention) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int d : {64, 128, 256}) {
    for (bool shared : {false, true}) {
      const int kv = 2, q_heads = 8, tokens = 600;
      Built b = build(
          rng, d, kv, q_heads, 32, tokens, [](int) { return PageFormat::kFp8; }, shared ? 3.0f : 0.0f);
      if (shared) {  // rebuild pages from values with a per-head mean direction
        std::normal_distribution<float> g;
        std::vector<float> mean(static_cast<size_t>(kv) * d);
        for (auto& x : mean) x = 2.0f * g(rng);
        for (size_t i = 0; i < b.v.size(); ++i) b.v[i] += mean[i % mean.size()];
        const codec::PageLayout& L = b.layouts[1];
        for (size_t p = 0; p < b.bytes.size(); ++p)
          for (uint32_t t = 0; t < b.in.pages[p].tokens; ++t) {
            const size_t off = (p * 32 + t) * kv * d;
            codec::write_token(b.bytes[p], L, static_cast<int>(t), std::span<const float>(b.k).subspan(off, kv * d),
                               std::span<const float>(b.v).subspan(off, kv * d));
          }
      }
      std::normal_distribution<float> g;
      std::vector<float> q(static_cast<size_t>(q_heads) * d), out(q.size());
      for (auto& x : q) x = g(rng);
      const QueryBlock qb{q, 1, tokens - 1};
      testing::poison(std::span<float>(out));
      attend(b.in, qb, out);
      const auto dense = attend_dense_reference(b.k, b.v, tokens, kv, q_heads, d, qb);
      const double err = rel_l2(out, dense);
      RecordProperty("fp8_rel_l2_d" + std::to_string(d) + (shared ? "_shared" : "_iid"), std::to_string(err));
      EXPECT_LT(err, shared ? 4e-2 : 8e-2) << "d=" << d << (shared ? " shared-mean values" : " iid values");
    }
  }
}

// Every SIMD target compiled in (EMU128 scalar fallback, SSSE3, SSE4, AVX2, AVX-512 where the CPU has
// them) against the fp64 reference, on a mixed-format sequence.
TEST(MixedAttention, EverySimdTargetMatchesReference) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const auto targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_GE(targets.size(), 2u);  // at least the scalar fallback and one vector target
  // GQA 1, 3, 4 and 8: the head passes of every register budget (6 or 2 heads per logits pass, 1..8
  // per value pass) and their remainders; decode (one query) and a chunked-prefill block of three.
  for (int d : {64, 128, 256})
    for (int G : {1, 3, 4, 8})
      for (int n : {1, 3}) {
        std::vector<int> pattern(32);
        for (auto& x : pattern) x = static_cast<int>(rng() % codec::kNumPageFormats);  // every format
        const int q_heads = 2 * G;
        Built b = build(
            rng, d, 2, q_heads, 16, 16 * 6 + 3, [&](int p) { return static_cast<PageFormat>(pattern[p]); }, 2.0f);
        std::normal_distribution<float> g;
        std::vector<float> q(static_cast<size_t>(n) * q_heads * d), out(q.size());
        for (auto& x : q) x = g(rng);
        const QueryBlock qb{q, n, static_cast<uint32_t>(16 * 6 + 3 - n)};
        const auto ref = attend_reference(b.in, qb);
        for (int64_t target : targets) {
          hwy::SetSupportedTargetsForTest(target);
          testing::poison(std::span<float>(out));
          attend(b.in, qb, out);
          EXPECT_LT(rel_l2(out, ref.out), 2e-6) << hwy::TargetName(target) << " d=" << d << " G=" << G << " n=" << n;
        }
        hwy::SetSupportedTargetsForTest(0);
      }
}

// Causality holds even for values a query must not see: a NaN in a later token's V (a broken model
// state, but not a reason to corrupt earlier queries) stays out of every earlier query's output, also
// when a chunked-prefill block shares the page that holds it.
TEST(MixedAttention, LaterTokensNeverReachEarlierQueries) {
  auto rng = testing::rng_for_test();
  const int d = 64, kv = 1, q_heads = 2, B = 16, tokens = 16 * 3;
  for (PageFormat f : {PageFormat::kBf16, PageFormat::kFp8}) {
    Built b = build(rng, d, kv, q_heads, B, tokens, [f](int) { return f; });
    const int poisoned = 37;  // inside page 2, which the block's queries end in
    const codec::PageLayout& L = b.layouts[static_cast<int>(f)];
    uint8_t* v = b.bytes[poisoned / B].data() + L.v_codes(0, poisoned % B);
    if (f == PageFormat::kBf16) {
      for (int i = 0; i < d; ++i) v[2 * i] = 0xC0, v[2 * i + 1] = 0x7F;  // bf16 quiet NaN
    } else {
      std::fill(v, v + d, uint8_t{0x7F});  // E4M3 NaN
    }
    std::normal_distribution<float> g;
    const int n = 8;
    std::vector<float> q(static_cast<size_t>(n) * q_heads * d);
    for (auto& x : q) x = g(rng);
    // Positions 30..37: the last query sees the NaN (and its output is NaN), the seven before it must
    // not, although the last block of queries (4 at GQA 2) shares the poisoned page with it.
    const QueryBlock qb{q, n, static_cast<uint32_t>(poisoned - n + 1)};
    const ReferenceResult ref = attend_reference(b.in, qb);
    std::vector<float> out(q.size());
    testing::poison(std::span<float>(out));
    attend(b.in, qb, out);
    const size_t earlier = static_cast<size_t>(n - 1) * q_heads * d;
    for (size_t i = 0; i < earlier; ++i) ASSERT_TRUE(std::isfinite(out[i])) << codec::to_string(f) << " at " << i;
    EXPECT_LT(rel_l2(std::span<const float>(out).first(earlier), std::span<const double>(ref.out).first(earlier)), 2e-6)
        << codec::to_string(f);
    EXPECT_TRUE(std::isnan(out[earlier])) << "the query at the poisoned position reads it";
  }
}

// The FP8 kernels decode by bit arithmetic that maps the E4M3 NaN code to a finite number; tiles that
// hold one take an exact decoder. On every SIMD target: a NaN key element makes its KV head's outputs
// NaN; a NaN value element makes exactly that output dimension NaN, and the rest still match the fp64
// reference.
TEST(MixedAttention, Fp8NanCodesReachTheOutputOnEveryTarget) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const int d = 128, kv = 2, q_heads = 8, B = 16, tokens = 16 * 4 + 5, G = q_heads / kv;
  for (bool in_key : {true, false}) {
    Built b = build(rng, d, kv, q_heads, B, tokens, [](int) { return PageFormat::kFp8; });
    const codec::PageLayout& L = b.layouts[static_cast<int>(PageFormat::kFp8)];
    const int token = 16 * 2 + 9, dim = 17;  // kv head 1
    uint8_t* row = b.bytes[token / B].data() + (in_key ? L.k_codes(1, token % B) : L.v_codes(1, token % B));
    row[dim] = in_key ? 0x7F : 0xFF;
    std::normal_distribution<float> g;
    std::vector<float> q(static_cast<size_t>(q_heads) * d), out(q.size());
    for (auto& x : q) x = g(rng);
    const QueryBlock qb{q, 1, static_cast<uint32_t>(tokens - 1)};
    const ReferenceResult ref = attend_reference(b.in, qb);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      testing::poison(std::span<float>(out));
      attend(b.in, qb, out);
      for (int hq = 0; hq < q_heads; ++hq)
        for (int i = 0; i < d; ++i) {
          const size_t at = static_cast<size_t>(hq) * d + i;
          const bool nan = hq / G == 1 && (in_key || i == dim);
          ASSERT_EQ(std::isnan(out[at]), nan) << hwy::TargetName(target) << " head " << hq << " dim " << i;
          if (!nan) {
            ASSERT_NEAR(out[at], ref.out[at], 2e-5 * (1 + std::abs(ref.out[at])));
          }
        }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(MixedAttention, PageScoreHelperAveragesHeadsAndSumsToOne) {
  auto rng = testing::rng_for_test();
  Built b = build(rng, 128, 2, 4, 16, 100, [](int p) { return p % 2 ? PageFormat::kTq3 : PageFormat::kFp8; });
  std::normal_distribution<float> g;
  std::vector<float> q(4 * 128), out(q.size());
  for (auto& x : q) x = g(rng);
  PagePartials parts;
  attend(b.in, {q, 1, 99}, out, &parts);
  const auto r = page_scores(parts);
  double sum = 0;
  for (float x : r) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  const std::vector<int> one{2};
  const auto r2 = page_scores(parts, one);
  const auto ref = attend_reference(b.in, {q, 1, 99});
  for (size_t p = 0; p < r2.size(); ++p) EXPECT_NEAR(r2[p], ref.page_mass[p * 4 + 2], 1e-6);
}

TEST(MixedAttention, RejectsBadShapes) {
  auto rng = testing::rng_for_test();
  Built b = build(rng, 64, 2, 4, 16, 40, [](int) { return PageFormat::kFp8; });
  std::vector<float> q(4 * 64), out(4 * 64);
  b.in.q_heads = 3;
  EXPECT_THROW(attend(b.in, {q, 1, 39}, out), std::invalid_argument);
  b.in.q_heads = 4;
  std::vector<float> small(10);
  EXPECT_THROW(attend(b.in, {q, 1, 39}, small), std::invalid_argument);
  b.in.q_heads = 2 * 9;
  std::vector<float> q9(18 * 64), o9(18 * 64);
  EXPECT_THROW(attend(b.in, {q9, 1, 39}, o9), std::invalid_argument);  // GQA ratio 9
}

}  // namespace
}  // namespace minimakv::attention
