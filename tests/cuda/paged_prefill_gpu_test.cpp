// Tiled tensor-core prefill against the fp64 reference over the same dequantized pages and against the
// CPU mixed kernel, for each kernel the GPU has (mma.sync everywhere, wgmma and wgmma with BF16 pages by
// the tensor copy engine on Hopper): every head_dim
// and GQA ratio, page sizes 16..832, chunks that start mid-sequence and mid-page, several sequences in
// one call, random format mixes; per-page partials turned into page scores against the fp64 collector;
// the byte accounting; bad plans.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "gpu_pages.h"
#include "minimakv/attention/reference.h"
#include "minimakv/cuda/paged_prefill.h"
#include "test_util.h"

namespace minimakv {
namespace {

using codec::PageFormat;
using testing::GpuPageSet;

struct PrefillResult {
  double gpu_vs_ref = 0, cpu_vs_ref = 0, score_err = 0;
  double device_score_err = 0;  // device-side accumulation vs attention::page_scores on the same partials
  int unwritten = 0;            // page partials a row's position reaches that the kernel left poisoned
};

// Attends the last chunks[b] tokens of every sequence of `s` in one call and checks them.
// The prefill kernels this GPU runs.
std::vector<cuda::PrefillKernel> kernels() {
  std::vector<cuda::PrefillKernel> k{cuda::PrefillKernel::kMma};
  if (cuda::prefill_wgmma_available()) {
    k.push_back(cuda::PrefillKernel::kWgmma);
    k.push_back(cuda::PrefillKernel::kTma);
  }
  return k;
}

PrefillResult run_prefill(std::mt19937_64& rng, const GpuPageSet& s, int q_heads, const std::vector<int>& chunks,
                          bool scores, int split_tokens = 0, cuda::PrefillKernel kernel = cuda::PrefillKernel::kAuto) {
  const int d = s.geo.head_dim, H = s.geo.kv_heads, B = s.geo.tokens_per_page;
  const cuda::DecodeShape shape{q_heads, H, d, B, 0.0f};
  std::vector<cuda::PrefillSeq> seqs;
  std::vector<uint32_t> lens;
  int rows = 0;
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    uint32_t len = 0;
    for (const auto& v : s.views[b]) len += v.tokens;
    lens.push_back(len);
    seqs.push_back({rows, chunks[b], len - chunks[b], s.seqs[b]});
    rows += chunks[b];
  }
  cuda::PrefillWorkspace ws(shape, kernel);
  const auto plan = cuda::make_prefill_plan(seqs, shape, ws.tiling(), split_tokens);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t per = static_cast<size_t>(q_heads) * d;
  std::vector<float> q(static_cast<size_t>(rows) * per);
  for (auto& x : q) x = 2.0f * nd(rng);  // peaky enough that the softmax is not uniform
  const auto signs = cuda::upload_rotation_signs(1, H, d, codec::kDefaultRotationSeed);
  cuda::DeviceArray<float> dq(q.size()), dout(q.size()), dm(static_cast<size_t>(rows) * q_heads), dl(dm.size()),
      dpm(static_cast<size_t>(plan.stats_size)), dpl(dpm.size());
  cuda::check(cudaMemcpy(dq.get(), q.data(), dq.bytes(), cudaMemcpyHostToDevice), "q");
  for (auto* a : {&dout, &dm, &dl, &dpm, &dpl}) cuda::check(cudaMemset(a->get(), 0xff, a->bytes()), "poison");
  int score_pages = 0;
  for (const auto& rec : plan.seqs) score_pages += rec.pages;
  // The device-side page scores add into an accumulator that already holds 0.25 per page.
  const std::vector<float> acc0(static_cast<size_t>(score_pages), 0.25f);
  cuda::DeviceArray<float> dacc(acc0.size());
  cuda::check(cudaMemcpy(dacc.get(), acc0.data(), dacc.bytes(), cudaMemcpyHostToDevice), "acc");
  const auto dout_bf16 = testing::poisoned_bf16_copy(q.size());
  cuda::AttentionBuffers io{dq.get(),
                            signs.get(),
                            dout.get(),
                            dm.get(),
                            dl.get(),
                            scores ? dpm.get() : nullptr,
                            scores ? dpl.get() : nullptr,
                            scores ? dacc.get() : nullptr,
                            0.5f,
                            dout_bf16.get()};
  ws.run(plan, s.pool->views(), io, nullptr);
  cuda::check(cudaDeviceSynchronize(), "prefill");
  std::vector<float> out(q.size()), m(dm.size()), l(dm.size()), pm(dpm.size()), pl(dpm.size());
  cuda::check(cudaMemcpy(out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost), "out");
  cuda::check(cudaMemcpy(m.data(), dm.get(), dm.bytes(), cudaMemcpyDeviceToHost), "m");
  cuda::check(cudaMemcpy(l.data(), dl.get(), dl.bytes(), cudaMemcpyDeviceToHost), "l");
  cuda::check(cudaMemcpy(pm.data(), dpm.get(), dpm.bytes(), cudaMemcpyDeviceToHost), "page m");
  cuda::check(cudaMemcpy(pl.data(), dpl.get(), dpl.bytes(), cudaMemcpyDeviceToHost), "page l");
  std::vector<float> acc(acc0.size());
  cuda::check(cudaMemcpy(acc.data(), dacc.get(), dacc.bytes(), cudaMemcpyDeviceToHost), "acc");
  // The output's BF16 copy is the output rounded to nearest even, element for element.
  EXPECT_EQ(testing::bf16_copy_mismatches(dout_bf16, out), 0u)
      << "elements whose BF16 copy is not the output rounded to nearest even";

  PrefillResult r;
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const int n = chunks[b];
    const auto in = s.layer_input(static_cast<int>(b), q_heads);
    const size_t off = static_cast<size_t>(seqs[b].row_begin) * per;
    const attention::QueryBlock qb{{q.data() + off, n * per}, n, seqs[b].first};
    const auto ref = attention::attend_reference(in, qb);
    std::vector<float> cpu(n * per);
    testing::poison(std::span<float>(cpu));
    attention::attend(in, qb, cpu);
    r.gpu_vs_ref = std::max(r.gpu_vs_ref, testing::rel_l2(out.data() + off, ref.out.data(), n * per));
    r.cpu_vs_ref = std::max(r.cpu_vs_ref, testing::rel_l2(cpu.data(), ref.out.data(), n * per));
    if (!scores) continue;
    const auto& rec = plan.seqs[b];
    const int np = rec.pages;
    attention::PagePartials gp;
    gp.pages = np;
    gp.q_heads = q_heads;
    gp.queries = n;
    gp.m_page.assign(pm.begin() + rec.stats_offset,
                     pm.begin() + rec.stats_offset + static_cast<size_t>(n) * np * q_heads);
    gp.l_page.assign(pl.begin() + rec.stats_offset,
                     pl.begin() + rec.stats_offset + static_cast<size_t>(n) * np * q_heads);
    for (int t = 0; t < n; ++t)
      for (int p = 0; p < np; ++p)
        for (int h = 0; h < q_heads; ++h) {
          const size_t at = (static_cast<size_t>(t) * np + p) * q_heads + h;
          if (p > static_cast<int>((seqs[b].first + t) / B)) {  // never visited for this row
            gp.m_page[at] = -std::numeric_limits<float>::infinity();
            gp.l_page[at] = 0.0f;
          } else if (std::isnan(gp.l_page[at])) {
            ++r.unwritten;
          }
        }
    gp.m.assign(m.begin() + rec.row_begin * q_heads, m.begin() + (rec.row_begin + n) * q_heads);
    gp.l.assign(l.begin() + rec.row_begin * q_heads, l.begin() + (rec.row_begin + n) * q_heads);
    const auto rp = attention::page_scores(gp);
    for (int p = 0; p < np; ++p)
      r.device_score_err =
          std::max(r.device_score_err, std::abs(static_cast<double>(acc[rec.score_offset + p]) - (0.25 + 0.5 * rp[p])));
    r.score_err = std::max(r.score_err, testing::page_score_error(rp, ref.page_mass, n, q_heads));
  }
  // fp16 operands on the tensor cores (see paged_prefill.h): about 1e-3 of the output's norm; bf16 query
  // and softmax weights over BF16 pages under kTma: about 3.5e-3 where BF16 pages carry the whole mass.
  const bool bf16_operands = ws.kernel() == cuda::PrefillKernel::kTma &&
                             plan.key_reads[codec::format_index(PageFormat::kBf16)] > 0;
  EXPECT_LE(r.gpu_vs_ref, bf16_operands ? 6e-3 : 3e-3) << "GPU prefill vs fp64 reference";
  if (scores) {
    EXPECT_EQ(r.unwritten, 0) << "page partials left unwritten";
    EXPECT_LE(r.score_err, 3e-3) << "page scores vs the fp64 collector";
    EXPECT_LE(r.device_score_err, 1e-6) << "device page scores vs attention::page_scores";
  }
  return r;
}

TEST(GpuPrefill, EveryHeadDimAndGqaRatioMatchesTheReference) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (const auto kernel : kernels()) {
    double worst = 0;
    for (int d : {64, 128, 256}) {
      for (int g = 1; g <= 8; ++g) {
        const int H = g <= 4 ? 2 : 1;
        const int B = (g % 2) ? 16 : 64;
        auto s = testing::make_gpu_pages(rng, {B, H, d}, {70, 333, 900 + g}, testing::random_format_mix(rng));
        SCOPED_TRACE(std::string(cuda::to_string(kernel)) + " d=" + std::to_string(d) + " G=" + std::to_string(g) +
                     " B=" + std::to_string(B));
        const auto r = run_prefill(rng, s, g * H, {70, 1 + g, 130 + 7 * g}, g % 3 == 0, 0, kernel);
        worst = std::max(worst, r.gpu_vs_ref);
      }
    }
    std::printf("prefill %s: worst gpu-ref %.2e over d 64/128/256, G 1..8\n", cuda::to_string(kernel), worst);
  }
}

TEST(GpuPrefill, PageSizesChunksAndSplits) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (const auto kernel : kernels())
    for (int B : {16, 48, 100, 128, 832}) {
      auto s = testing::make_gpu_pages(rng, {B, 2, 128}, {3000, 2 * B + 7, 513}, testing::random_format_mix(rng));
      for (int split : {0, 128, 1024}) {
        SCOPED_TRACE(std::string(cuda::to_string(kernel)) + " B=" + std::to_string(B) +
                     " split=" + std::to_string(split));
        const auto r = run_prefill(rng, s, 4, {512, B + 3, 513}, split != 128, split, kernel);
        std::printf("%s B=%d split=%d: gpu-ref %.2e cpu-ref %.2e scores %.2e\n", cuda::to_string(kernel), B, split,
                    r.gpu_vs_ref, r.cpu_vs_ref, r.score_err);
      }
    }
}

TEST(GpuPrefill, RecentFp8OverTq3HistoryLikeTheEngine) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  // The engine's layout after a few chunks: the sink and the chunk's pages FP8, the rest TQ3.
  auto engine_like = [](int, int p, int np) { return (p == 0 || p >= np - 9) ? PageFormat::kFp8 : PageFormat::kTq3; };
  auto s = testing::make_gpu_pages(rng, {64, 2, 128}, {4096, 2600}, engine_like);
  for (const auto kernel : kernels())
    for (const bool scores : {true, false}) {
      SCOPED_TRACE(std::string(cuda::to_string(kernel)) + (scores ? " with scores" : ""));
      const auto r = run_prefill(rng, s, 4, {512, 512}, scores, 0, kernel);
      std::printf("engine-like %s%s: gpu-ref %.2e cpu-ref %.2e scores %.2e\n", cuda::to_string(kernel),
                  scores ? " +scores" : "", r.gpu_vs_ref, r.cpu_vs_ref, r.score_err);
    }
}

// BF16, FP8 or TQ3 pages only, where the copy engine fills whole key tiles (pages of 64/128/256 tokens,
// 832 with a partial last box) and where a page is not a whole number of boxes (16, 48, 100: the cp.async
// path), with partial last pages, page scores on and off, and every head_dim (FP8: raw codes widened in
// place, with the three in-place orders of head_dim 64, 128 and 256; TQ3: codes through the raw ring at
// 128 and 256, one and two boxes a row, and the decoding CTA at 64).
void copy_engine_case(std::mt19937_64& rng, PageFormat f) {
  if (!cuda::prefill_wgmma_available()) GTEST_SKIP() << "the copy-engine kernel needs sm_90";
  const auto kernel = cuda::PrefillKernel::kTma;
  auto only = [f](int, int, int) { return f; };
  for (int d : {64, 128, 256})
    for (int B : {16, 48, 64, 100, 128, 256, 832}) {
      auto s = testing::make_gpu_pages(rng, {B, 2, d}, {1500, 3 * B + 5}, only);
      SCOPED_TRACE(std::string(codec::to_string(f)) + " " + cuda::to_string(kernel) + " d=" + std::to_string(d) +
                   " B=" + std::to_string(B));
      const bool scores = (B / 16) % 2 == 0;
      const auto r = run_prefill(rng, s, 8, {300, std::min(B + 2, 200)}, scores, 0, kernel);
      if (B == 64 || B == 832)
        std::printf("%s %s d=%d B=%d: gpu-ref %.2e scores %.2e\n", codec::to_string(f), cuda::to_string(kernel), d, B,
                    r.gpu_vs_ref, r.score_err);
    }
}

TEST(GpuPrefill, Tq3PagesThroughTheCopyEngine) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  copy_engine_case(rng, PageFormat::kTq3);
}

TEST(GpuPrefill, Bf16PagesThroughTheCopyEngine) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  copy_engine_case(rng, PageFormat::kBf16);
}

TEST(GpuPrefill, Fp8PagesThroughTheCopyEngine) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  copy_engine_case(rng, PageFormat::kFp8);
}

TEST(GpuPrefill, AccountingCountsEveryKeyTileRead) {
  auto rng = testing::rng_for_test();
  auto all = [](PageFormat f) { return [f](int, int, int) { return f; }; };
  auto s = testing::make_gpu_pages(rng, {64, 2, 128}, {640}, all(PageFormat::kFp8));
  const cuda::DecodeShape shape{4, 2, 128, 64, 0.0f};
  // 64 rows at positions 576..639: one query tile (64 tokens of 2 heads) sees all 10 pages, per KV head.
  const std::vector<cuda::PrefillSeq> seqs{{0, 64, 576, s.seqs[0]}};
  cuda::PrefillWorkspace ws(shape);
  const auto plan = cuda::make_prefill_plan(seqs, shape, ws.tiling(), 256);
  EXPECT_EQ(plan.tile_tokens, 64);
  EXPECT_EQ(plan.tile_work_begin.size(), 2u);
  EXPECT_EQ(plan.key_reads[1], 640u * 2u);
  EXPECT_EQ(plan.key_reads[0] + plan.key_reads[2], 0u);
  cuda::DeviceArray<float> q(64 * 4 * 128), out(q.size());
  cuda::check(cudaMemset(q.get(), 0, q.bytes()), "q");
  const auto signs = cuda::upload_rotation_signs(1, 2, 128, codec::kDefaultRotationSeed);
  const auto st = ws.run(plan, s.pool->views(), {q.get(), signs.get(), out.get()}, nullptr);
  cuda::check(cudaDeviceSynchronize(), "prefill");
  const auto& L = s.pool->layout(PageFormat::kFp8);
  EXPECT_EQ(st.route, "fp8-only");
  EXPECT_EQ(st.bytes_read[1], plan.key_reads[1] * 2 * (L.row_bytes() + L.meta_bytes()));
  EXPECT_EQ(st.dense_shadow_bytes, 0u);
  EXPECT_EQ(st.fallbacks, 0u);
}

TEST(GpuPrefill, BadPlansAreRejected) {
  auto rng = testing::rng_for_test();
  auto s = testing::make_gpu_pages(rng, {64, 2, 128}, {200}, [](int, int, int) { return PageFormat::kFp8; });
  const cuda::DecodeShape shape{4, 2, 128, 64, 0.0f};
  auto expect_bad = [&](std::vector<cuda::PrefillSeq> seqs, const char* what) {
    EXPECT_THROW(cuda::make_prefill_plan(seqs, shape, cuda::prefill_tiling(128, false)), std::invalid_argument)
        << what;
  };
  expect_bad({}, "no sequences");
  expect_bad({{0, 0, 199, s.seqs[0]}}, "no rows");
  expect_bad({{5, 10, 190, s.seqs[0]}}, "rows not starting at 0");
  expect_bad({{0, 10, 100, s.seqs[0]}}, "more pages than the last row sees");
  auto bad_id = s.seqs[0];
  bad_id[1].page_id = 0;
  expect_bad({{0, 10, 190, bad_id}}, "null page");
  auto bad_tokens = s.seqs[0];
  bad_tokens[3].tokens = 65;
  expect_bad({{0, 10, 190, bad_tokens}}, "token count");
  EXPECT_THROW(cuda::make_prefill_plan({}, {6, 4, 128, 64, 0.0f}, cuda::prefill_tiling(128, false)),
               std::invalid_argument);
  EXPECT_THROW(cuda::make_prefill_plan({}, {4, 2, 96, 64, 0.0f}, cuda::prefill_tiling(96, false)),
               std::invalid_argument);
  // A plan for G = 2 does not run on a G = 4 workspace, nor a plan of one tiling on a kernel of another.
  const std::vector<cuda::PrefillSeq> ok{{0, 10, 190, s.seqs[0]}};
  const auto plan = cuda::make_prefill_plan(ok, shape, cuda::prefill_tiling(128, false));
  cuda::PrefillWorkspace other({8, 2, 128, 64, 0.0f});
  cuda::DeviceArray<float> q(10 * 8 * 128), out(q.size());
  const auto signs = cuda::upload_rotation_signs(1, 2, 128, codec::kDefaultRotationSeed);
  EXPECT_THROW(other.run(plan, s.pool->views(), {q.get(), signs.get(), out.get()}, nullptr), std::invalid_argument);
  if (cuda::prefill_wgmma_available()) {
    cuda::PrefillWorkspace tma(shape, cuda::PrefillKernel::kTma);
    EXPECT_THROW(tma.run(plan, s.pool->views(), {q.get(), signs.get(), out.get()}, nullptr), std::invalid_argument);
  }
  // kAuto takes the copy-engine kernel exactly where wgmma runs; asking for wgmma elsewhere is refused.
  EXPECT_EQ(cuda::PrefillWorkspace(shape).kernel(),
            cuda::prefill_wgmma_available() ? cuda::PrefillKernel::kTma : cuda::PrefillKernel::kMma);
  if (!cuda::prefill_wgmma_available()) {
    EXPECT_THROW(cuda::PrefillWorkspace(shape, cuda::PrefillKernel::kWgmma), std::invalid_argument);
    EXPECT_THROW(cuda::PrefillWorkspace(shape, cuda::PrefillKernel::kTma), std::invalid_argument);
  }
}

}  // namespace
}  // namespace minimakv
