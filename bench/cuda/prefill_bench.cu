// GPU prefill-attention benchmark and kernel lab: a whole prompt attended chunk by chunk (one layer) over
// paged K/V in BF16, FP8 and the mixed layout the tier controller leaves between chunks (FP8 sink,
// anchors, recent window and the chunk's own pages, TQ3 elsewhere), with and without page scores, on
// pages written by our own append and conversion kernels, by every prefill kernel the GPU runs (wgmma
// with BF16 pages by the tensor copy engine, wgmma, and mma.sync consumers). Each (kernel, arm) is first
// checked against the fp64 reference on a small problem of the same geometry (relative L2 <= 3e-3, or
// 6e-3 where BF16 pages meet bf16 operands, else the run fails before timing), then timed with
// CUDA events (warm-up, then >= 10 repetitions; median and min-max). TFLOP/s counts the causal
// attention's useful work, 4 * q_heads * head_dim * S (S + 1) / 2, the same count PyTorch's SDPA is
// given in scripts/bench/sdpa_prefill.py.
// --configs, --arms and --kernels LIST keep the configurations, layouts (bf16, fp8, mixed, mixed+scores)
// and kernels (tma, wgmma, mma) whose names start with one of the comma-separated prefixes.
// Usage: cuda_prefill_bench [--reps N] [--quick] [--chunk N] [--split-tokens N] [--configs LIST]
//                           [--arms LIST] [--kernels LIST] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "minimakv/attention/reference.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/page_writes.h"
#include "minimakv/cuda/paged_prefill.h"

using namespace minimakv;
using bench::comma_list;
using bench::fill_random;
using bench::Stat;
using bench::time_events;
using codec::PageFormat;

namespace {

struct Config {
  std::string name;
  int tokens, q_heads, kv_heads, d, B;
};

enum class Arm { kBf16, kFp8, kMixed, kMixedScores };
constexpr Arm kArms[] = {Arm::kBf16, Arm::kFp8, Arm::kMixed, Arm::kMixedScores};
const char* arm_name(Arm a) {
  switch (a) {
    case Arm::kBf16:
      return "bf16";
    case Arm::kFp8:
      return "fp8";
    case Arm::kMixed:
      return "mixed";
    default:
      return "mixed+scores";
  }
}

// The format of page p while the chunk starting at `chunk_first` is attended: the tier controller's
// defaults (1 sink, 4 anchors, a 4-page recent window) before the chunk, FP8 for the chunk's own pages.
PageFormat page_format(Arm a, int p, int chunk_first, int B) {
  if (a == Arm::kBf16) return PageFormat::kBf16;
  if (a == Arm::kFp8) return PageFormat::kFp8;
  const int first_chunk_page = chunk_first / B;
  if (p >= first_chunk_page - 4 || p == 0) return PageFormat::kFp8;
  const int stale = first_chunk_page - 5;  // pages 1 .. first_chunk_page - 5
  if (stale >= 8 && (p - 1) % (stale / 4) == 0 && (p - 1) / (stale / 4) < 4) return PageFormat::kFp8;  // anchors
  return PageFormat::kTq3;
}

// Pages 1..n_pages of every format hold the same tokens: BF16 and FP8 written by append_tokens from one
// random K/V draw, TQ3 converted from the FP8 pages.
void write_pages(const cuda::DevicePagePool& pool, const codec::PageGeometry& geo, int n_pages, uint64_t seed,
                 const float* signs) {
  const auto views = pool.views();
  const size_t vec = static_cast<size_t>(geo.kv_heads) * geo.head_dim;
  const int chunk_pages = std::max(1, 65536 / geo.tokens_per_page);
  cuda::DeviceArray<float> k(static_cast<size_t>(chunk_pages) * geo.tokens_per_page * vec), v(k.size());
  cuda::DeviceArray<cuda::AppendSlot> slots(static_cast<size_t>(chunk_pages) * geo.tokens_per_page);
  std::vector<cuda::AppendSlot> hs;
  std::vector<cuda::ConvertJob> jobs;
  for (int p0 = 0; p0 < n_pages; p0 += chunk_pages) {
    const int np = std::min(chunk_pages, n_pages - p0);
    fill_random<<<1024, 256>>>(k.get(), static_cast<size_t>(np) * geo.tokens_per_page * vec, seed + 2 * p0, 1.0f);
    fill_random<<<1024, 256>>>(v.get(), static_cast<size_t>(np) * geo.tokens_per_page * vec, seed + 2 * p0 + 1, 0.0f);
    hs.clear();
    for (int p = 0; p < np; ++p)
      for (int t = 0; t < geo.tokens_per_page; ++t)
        hs.push_back({static_cast<uint32_t>(p0 + p + 1), static_cast<uint32_t>(t)});
    cuda::check(cudaMemcpy(slots.get(), hs.data(), hs.size() * sizeof(hs[0]), cudaMemcpyHostToDevice), "slots");
    for (PageFormat f : {PageFormat::kBf16, PageFormat::kFp8})
      cuda::append_tokens(views, f, geo, k.get(), v.get(), slots.get(), static_cast<int>(hs.size()), nullptr);
  }
  for (int p = 1; p <= n_pages; ++p)
    jobs.push_back({static_cast<uint32_t>(p), static_cast<uint32_t>(p), static_cast<uint32_t>(geo.tokens_per_page), 0});
  cuda::DeviceArray<cuda::ConvertJob> djobs(jobs.size());
  cuda::check(cudaMemcpy(djobs.get(), jobs.data(), jobs.size() * sizeof(jobs[0]), cudaMemcpyHostToDevice), "jobs");
  cuda::convert_fp8_to_tq3(views, geo, signs, djobs.get(), static_cast<int>(jobs.size()), {}, nullptr);
  cuda::check(cudaDeviceSynchronize(), "write pages");
}

// The pages rows [first, first + n) see, in the arm's formats.
cuda::PrefillSeq chunk_seq(Arm a, int first, int n, int B) {
  cuda::PrefillSeq s{0, n, static_cast<uint32_t>(first), {}};
  const int last = first + n - 1;
  for (int p = 0; p <= last / B; ++p)
    s.pages.push_back({page_format(a, p, first, B), static_cast<uint32_t>(p + 1),
                       static_cast<uint32_t>(p == last / B ? last % B + 1 : B)});
  return s;
}

// One chunk's plan, workspace and buffers.
struct ChunkRun {
  cuda::PrefillPlan plan;
  std::unique_ptr<cuda::PrefillWorkspace> ws;
  cuda::DeviceArray<float> page_m, page_l, score_acc;
};

struct Problem {
  std::vector<ChunkRun> chunks;
  cuda::DeviceArray<float> q, out, m, l;

  Problem(const cuda::DecodeShape& shape, Arm a, int tokens, int first, int chunk, int split_tokens,
          cuda::PrefillKernel kernel) {
    const int n_rows = std::min(chunk, tokens - first);
    q = cuda::DeviceArray<float>(static_cast<size_t>(n_rows) * shape.q_heads * shape.head_dim);
    out = cuda::DeviceArray<float>(q.size());
    m = cuda::DeviceArray<float>(static_cast<size_t>(n_rows) * shape.q_heads);
    l = cuda::DeviceArray<float>(m.size());
    fill_random<<<256, 256>>>(q.get(), q.size(), 4242, 0.0f);
    for (int c0 = first; c0 < tokens; c0 += chunk) {
      ChunkRun r;
      const std::vector<cuda::PrefillSeq> seqs{chunk_seq(a, c0, std::min(chunk, tokens - c0), shape.tokens_per_page)};
      r.ws = std::make_unique<cuda::PrefillWorkspace>(shape, kernel);
      r.plan = cuda::make_prefill_plan(seqs, shape, r.ws->tiling(), split_tokens);
      if (a == Arm::kMixedScores) {
        r.page_m = cuda::DeviceArray<float>(static_cast<size_t>(r.plan.stats_size));
        r.page_l = cuda::DeviceArray<float>(r.page_m.size());
        r.score_acc = cuda::DeviceArray<float>(static_cast<size_t>(r.plan.seqs[0].pages));
        cuda::check(cudaMemset(r.score_acc.get(), 0, r.score_acc.bytes()), "scores");
      }
      chunks.push_back(std::move(r));
    }
  }

  void run(const cuda::PoolViews& views, const float* signs) {
    for (auto& r : chunks) {
      cuda::AttentionBuffers io{q.get(),        signs,          out.get(),         m.get(), l.get(),
                              r.page_m.get(), r.page_l.get(), r.score_acc.get(), 1.0f};
      r.ws->run(r.plan, views, io, nullptr);
    }
  }
};

// Relative L2 error of the last chunk of a small problem of this geometry (two KV heads, eleven and a
// third pages, so that the mixed arm reads TQ3 pages too) against the fp64 reference.
double validate(const Config& c, Arm a, cuda::PrefillKernel kernel) {
  const int B = c.B, H = 2, G = c.q_heads / c.kv_heads, tokens = 11 * B + B / 3, chunk = B / 2 + 7;
  const codec::PageGeometry geo{B, H, c.d};
  const int n_pages = (tokens + B - 1) / B;
  cuda::DevicePagePool pool(geo, static_cast<size_t>(n_pages) + 1);
  const auto signs = cuda::upload_rotation_signs(1, H, c.d, codec::kDefaultRotationSeed);
  write_pages(pool, geo, n_pages, 777, signs.get());
  const cuda::DecodeShape shape{G * H, H, c.d, B, 0.0f};
  const int first = tokens - chunk;
  Problem prob(shape, a, tokens, first, chunk, 0, kernel);
  prob.run(pool.views(), signs.get());
  cuda::check(cudaDeviceSynchronize(), "validate");
  const size_t per = static_cast<size_t>(G * H) * c.d;
  std::vector<float> q(static_cast<size_t>(chunk) * per), out(q.size());
  cuda::check(cudaMemcpy(q.data(), prob.q.get(), prob.q.bytes(), cudaMemcpyDeviceToHost), "q");
  cuda::check(cudaMemcpy(out.data(), prob.out.get(), prob.out.bytes(), cudaMemcpyDeviceToHost), "out");
  // Host copies of the pages the chunk read, in its formats.
  std::vector<codec::Rotation> rotations;
  for (int h = 0; h < H; ++h) rotations.push_back(codec::Rotation::for_head(c.d, 0, static_cast<uint32_t>(h)));
  const cuda::PrefillSeq seq = chunk_seq(a, first, chunk, B);
  std::vector<std::vector<uint8_t>> host(seq.pages.size());
  attention::LayerInput in;
  for (size_t p = 0; p < seq.pages.size(); ++p) {
    const auto& L = pool.layout(seq.pages[p].format);
    host[p].resize(L.bytes());
    pool.download(seq.pages[p].format, seq.pages[p].page_id, host[p]);
    in.pages.push_back({seq.pages[p].format, host[p].data(), seq.pages[p].tokens, static_cast<uint32_t>(p * B)});
  }
  for (int f = 0; f < codec::kNumPageFormats; ++f) in.layouts[f] = &pool.layout(static_cast<PageFormat>(f));
  in.rotations = rotations;
  in.q_heads = G * H;
  in.kv_heads = H;
  in.head_dim = c.d;
  const auto ref = attention::attend_reference(in, {q, chunk, static_cast<uint32_t>(first)});
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref.out[i]) * (out[i] - ref.out[i]);
    den += ref.out[i] * ref.out[i];
  }
  return std::sqrt(num / den);
}

struct Row {
  std::string config, arm;
  Stat ms;
  double tflops, rel_err;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 10, chunk = 4096, split_tokens = 0;
  bool quick = false;
  const char* json = nullptr;
  std::vector<std::string> prefixes, arm_prefixes, kernel_prefixes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(10, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--chunk") && i + 1 < argc)
      chunk = std::max(16, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--split-tokens") && i + 1 < argc)
      split_tokens = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else if (!std::strcmp(argv[i], "--configs") && i + 1 < argc)
      prefixes = comma_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--arms") && i + 1 < argc)
      arm_prefixes = comma_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc)
      kernel_prefixes = comma_list(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: cuda_prefill_bench [--reps N>=10] [--quick] [--chunk N] [--split-tokens N] "
                   "[--configs LIST] [--arms LIST] [--kernels LIST] [--json FILE]\n");
      return 2;
    }
  }
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "cuda_prefill_bench: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("GPU: %s, %d SMs; prompts prefilled in chunks of %d\n", prop.name, prop.multiProcessorCount, chunk);
  std::vector<Config> configs = {
      {"8b 16K h32/8 d128 p256", 16384, 32, 8, 128, 256},
      {"d256 16K h24/4 p256", 16384, 24, 4, 256, 256},
      {"8b 32K h32/8 d128 p256", 32768, 32, 8, 128, 256},
      {"d256 32K h24/4 p256", 32768, 24, 4, 256, 256},
      {"8b 32K h32/8 d128 p64", 32768, 32, 8, 128, 64},  // the engine's default page size
  };
  if (quick) configs.resize(2);
  std::erase_if(configs, [&](const Config& c) { return !bench::matches_prefix(prefixes, c.name); });
  std::vector<cuda::PrefillKernel> kernels{cuda::PrefillKernel::kMma};
  if (cuda::prefill_wgmma_available())
    kernels.insert(kernels.begin(), {cuda::PrefillKernel::kTma, cuda::PrefillKernel::kWgmma});
  std::erase_if(kernels,
                [&](cuda::PrefillKernel k) { return !bench::matches_prefix(kernel_prefixes, cuda::to_string(k)); });
  std::vector<Row> rows;
  bool all_valid = true;
  std::map<std::string, double> checked;  // geometry and arm -> error of its small check
  for (const auto& c : configs) {
    const codec::PageGeometry geo{c.B, c.kv_heads, c.d};
    const int n_pages = (c.tokens + c.B - 1) / c.B;
    cuda::DevicePagePool pool(geo, static_cast<size_t>(n_pages) + 1);
    const auto signs = cuda::upload_rotation_signs(1, c.kv_heads, c.d, codec::kDefaultRotationSeed);
    write_pages(pool, geo, n_pages, 1234, signs.get());
    const cuda::DecodeShape shape{c.q_heads, c.kv_heads, c.d, c.B, 0.0f};
    const double flops = 4.0 * c.q_heads * c.d * (static_cast<double>(c.tokens) * (c.tokens + 1) / 2);
    for (const auto kernel : kernels) {
      for (Arm a : kArms) {
        if (!bench::matches_prefix(arm_prefixes, arm_name(a))) continue;
        const std::string arm = std::string(arm_name(a)) + " " + cuda::to_string(kernel);
        const std::string key = std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + "/" +
                                std::to_string(c.d) + "/" + std::to_string(c.B) + " " + arm;
        // bf16 query and softmax weights meet BF16 pages under kTma (paged_prefill.h's precision note).
        const double bound = kernel == cuda::PrefillKernel::kTma && a == Arm::kBf16 ? 6e-3 : 3e-3;
        if (!checked.count(key)) {
          checked[key] = validate(c, a, kernel);
          std::printf("h%s: relative L2 vs fp64 reference %.2e %s\n", key.c_str(), checked[key],
                      checked[key] <= bound ? "ok" : "FAILED");
        }
        const double err = checked[key];
        const bool ok = err <= bound;
        all_valid = all_valid && ok;
        if (!ok) continue;
        Problem prob(shape, a, c.tokens, 0, chunk, split_tokens, kernel);
        const Stat t = time_events(2, reps, [&] { prob.run(pool.views(), signs.get()); });
        cuda::check(cudaGetLastError(), "prefill");
        rows.push_back({c.name, arm, t, flops / (t.median * 1e-3) / 1e12, err});
      }
    }
  }
  std::printf(
      "\n| config | arm | ms (median) | min-max | TFLOP/s | vs bf16 | rel. L2 (small check) |\n"
      "|---|---|---|---|---|---|---|\n");
  double bf16_ms = 0;
  for (const Row& r : rows) {
    if (r.arm.rfind("bf16 ", 0) == 0) bf16_ms = r.ms.median;
    std::printf("| %s | %s | %.2f | %.2f-%.2f | %.1f | %.2fx | %.1e |\n", r.config.c_str(), r.arm.c_str(), r.ms.median,
                r.ms.lo, r.ms.hi, r.tflops, r.ms.median / bf16_ms, r.rel_err);
  }
  if (json) {
    std::FILE* jf = std::fopen(json, "w");
    if (jf) {
      std::fprintf(jf, "[\n");
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(jf,
                     "  {\"config\": \"%s\", \"arm\": \"%s\", \"chunk\": %d, \"ms_median\": %.4f, \"ms_min\": %.4f, "
                     "\"ms_max\": %.4f, \"tflops\": %.2f, \"rel_l2\": %.3e}%s\n",
                     r.config.c_str(), r.arm.c_str(), chunk, r.ms.median, r.ms.lo, r.ms.hi, r.tflops, r.rel_err,
                     i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(jf, "]\n");
      std::fclose(jf);
    }
  }
  return all_valid ? 0 : 1;
}
