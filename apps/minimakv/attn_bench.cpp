#include "attn_bench.h"

#include <fmt/core.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "command.h"
#include "default_paths.h"
#include "minimakv/attention/paged_attention.h"
#include "minimakv/attention/reference.h"
#include "minimakv/codec/page_codec.h"

namespace minimakv::app {
namespace {

using codec::PageFormat;

struct Shape {
  int d, q_heads, kv_heads;
};

struct Arm {
  const char* name;
  std::vector<std::vector<uint8_t>> pages;
  attention::LayerInput in;
  size_t bytes = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Spread {
  double median, min, max;
};

std::string ratio_text(const Spread& x) {
  return fmt::format("{:.2f} ({:.2f}-{:.2f})", x.median, x.min, x.max);
}

}  // namespace

int run_attn_bench(const AttnBenchOptions& opt) {
  std::mt19937_64 rng(opt.seed);
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  attention::ThreadPool pool(all);
  nlohmann::json out = nlohmann::json::array();
  if (!opt.json)
    fmt::print(
        "minimakv attn-bench  seed={}  page={} tokens  reps={}  threads: 1 and {}  (decode, one layer; arms\n"
        "round-robin per repetition, ratios paired within a repetition: median (min-max))\n"
        "{:>7} {:>12} {:<6} {:>4} {:>10} {:>21} {:>7} {:>16} {:>16} {:>8}\n",
        opt.seed, opt.page_size, opt.reps, all, "context", "shape", "arm", "thr", "median us", "min-max us", "GB/s",
        "vs bf16", "vs fp8", "rel err");
  for (const Shape sh : {Shape{128, 32, 8}, Shape{256, 24, 4}}) {
    const int d = sh.d, kv = sh.kv_heads, B = opt.page_size;
    std::vector<codec::Rotation> rots;
    for (int h = 0; h < kv; ++h) rots.push_back(codec::Rotation::for_head(d, 0, static_cast<uint32_t>(h)));
    const codec::PageLayout lay[3] = {codec::PageLayout(PageFormat::kBf16, {B, kv, d}),
                                      codec::PageLayout(PageFormat::kFp8, {B, kv, d}),
                                      codec::PageLayout(PageFormat::kTq3, {B, kv, d})};
    for (int ctx : opt.contexts) {
      const int pages = (ctx + B - 1) / B;
      std::normal_distribution<float> g;
      std::vector<float> K(static_cast<size_t>(ctx) * kv * d), V(K.size());
      for (auto& x : K) x = g(rng);
      for (auto& x : V) x = g(rng);
      std::vector<float> q(static_cast<size_t>(sh.q_heads) * d);
      for (auto& x : q) x = g(rng);
      // Which pages are FP8 in the mixed arm: an evenly spread ~fp8_fraction, the last page always.
      std::vector<bool> mixed_fp8(pages);
      for (int p = 0; p < pages; ++p)
        mixed_fp8[p] =
            p == pages - 1 || static_cast<int>((p + 1) * opt.fp8_fraction) != static_cast<int>(p * opt.fp8_fraction);
      Arm arms[3] = {{"bf16", {}, {}, 0}, {"fp8", {}, {}, 0}, {"mixed", {}, {}, 0}};
      for (Arm& a : arms) {
        a.in.q_heads = sh.q_heads;
        a.in.kv_heads = kv;
        a.in.head_dim = d;
        a.in.rotations = rots;
        for (int f = 0; f < 3; ++f) a.in.layouts[f] = &lay[f];
      }
      for (int p = 0; p < pages; ++p) {
        const int nt = std::min(B, ctx - p * B);
        std::vector<uint8_t> bf(lay[0].bytes()), f8(lay[1].bytes());
        for (int t = 0; t < nt; ++t) {
          const size_t off = static_cast<size_t>(p * B + t) * kv * d;
          const std::span<const float> kr(K.data() + off, static_cast<size_t>(kv) * d), vr(V.data() + off, kr.size());
          codec::write_token(bf, lay[0], t, kr, vr);
          codec::write_token(f8, lay[1], t, kr, vr);
        }
        const auto pos = static_cast<uint32_t>(p * B);
        arms[0].pages.push_back(std::move(bf));
        arms[0].in.pages.push_back({PageFormat::kBf16, nullptr, static_cast<uint32_t>(nt), pos});
        arms[1].pages.push_back(f8);
        arms[1].in.pages.push_back({PageFormat::kFp8, nullptr, static_cast<uint32_t>(nt), pos});
        if (mixed_fp8[p] || nt < B) {
          arms[2].pages.push_back(std::move(f8));
          arms[2].in.pages.push_back({PageFormat::kFp8, nullptr, static_cast<uint32_t>(nt), pos});
        } else {
          std::vector<uint8_t> t3(lay[2].bytes());
          codec::convert_fp8_to_tq3(f8, lay[1], t3, lay[2], rots, B);
          arms[2].pages.push_back(std::move(t3));
          arms[2].in.pages.push_back({PageFormat::kTq3, nullptr, static_cast<uint32_t>(nt), pos});
        }
      }
      for (Arm& a : arms) {
        for (size_t p = 0; p < a.pages.size(); ++p) {
          a.in.pages[p].data = a.pages[p].data();
          a.bytes += a.pages[p].size();
        }
      }
      const attention::QueryBlock qb{q, 1, static_cast<uint32_t>(ctx - 1)};
      std::vector<double> ref;
      if (ctx <= opt.error_max_context) ref = attention::attend_dense_reference(K, V, ctx, kv, sh.q_heads, d, qb);
      std::vector<float> o(q.size());
      double err[3] = {NAN, NAN, NAN};
      for (int ai = 0; ai < 3; ++ai) {
        attention::attend(arms[ai].in, qb, o, nullptr, {0, &pool});
        if (ref.empty()) continue;
        double e = 0, n = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          e += (o[i] - ref[i]) * (o[i] - ref[i]);
          n += ref[i] * ref[i];
        }
        err[ai] = std::sqrt(e / n);
      }
      const std::string shape = fmt::format("d{}/{}q{}kv", d, sh.q_heads, kv);
      for (unsigned threads : {1u, all}) {
        attention::AttendOptions ao;
        ao.pool = threads > 1 ? &pool : nullptr;
        if (threads == 1) ao.pages_per_split = 1 << 30;
        for (Arm& a : arms) attention::attend(a.in, qb, o, nullptr, ao);  // warm-up
        // Round-robin over the arms within each repetition: a slow phase of the machine hits every arm
        // alike, and each arm's ratio to the others is taken within a repetition (paired).
        const int reps = ctx >= 131072 ? std::max(5, opt.reps / 4) : opt.reps;
        std::vector<double> us[3];
        for (int r = 0; r < reps; ++r)
          for (int ai = 0; ai < 3; ++ai) {
            const auto t0 = std::chrono::steady_clock::now();
            attention::attend(arms[ai].in, qb, o, nullptr, ao);
            us[ai].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          }
        const auto ratios = [&](int ai, int base) {
          std::vector<double> v;
          for (int r = 0; r < reps; ++r) v.push_back(us[ai][r] / us[base][r]);
          return Spread{median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
        };
        for (int ai = 0; ai < 3; ++ai) {
          const Arm& a = arms[ai];
          const Spread t{median(us[ai]), *std::min_element(us[ai].begin(), us[ai].end()),
                         *std::max_element(us[ai].begin(), us[ai].end())};
          const Spread vs_bf16 = ratios(ai, 0), vs_fp8 = ratios(ai, 1);
          const double gbs = static_cast<double>(a.bytes) / (t.median * 1e3);
          const auto spread = [](const Spread& x) {
            return nlohmann::json{{"median", x.median}, {"min", x.min}, {"max", x.max}};
          };
          out.push_back({{"context", ctx},
                         {"shape", shape},
                         {"arm", a.name},
                         {"threads", threads},
                         {"median_us", t.median},
                         {"min_us", t.min},
                         {"max_us", t.max},
                         {"bytes_read", a.bytes},
                         {"gb_per_s", gbs},
                         {"vs_bf16", spread(vs_bf16)},
                         {"vs_fp8", spread(vs_fp8)},
                         {"rel_err_vs_fp64", std::isnan(err[ai]) ? nlohmann::json() : nlohmann::json(err[ai])},
                         {"reps", reps}});
          if (!opt.json)
            fmt::print("{:>7} {:>12} {:<6} {:>4} {:>10.1f} {:>21} {:>7.2f} {:>16} {:>16} {:>8}\n", ctx, shape, a.name,
                       threads, t.median, fmt::format("{:.1f}-{:.1f}", t.min, t.max), gbs, ratio_text(vs_bf16),
                       ratio_text(vs_fp8), std::isnan(err[ai]) ? std::string("-") : fmt::format("{:.5f}", err[ai]));
        }
      }
    }
  }
  if (opt.json) fmt::print("{}\n", out.dump(2));
  return 0;
}

namespace {
const Registration kCommand(
    {"attn-bench", "decode attention: dense BF16 vs FP8-only vs mixed FP8/TQ3", 40, [](CLI::App& sub) {
       auto opt = std::make_shared<AttnBenchOptions>();
       sub.add_option("--contexts", opt->contexts, "context lengths in tokens")->check(CLI::Range(1, 1 << 24));
       sub.add_option("--page-size", opt->page_size, "tokens per page")->check(CLI::Range(16, 4096));
       sub.add_option("--reps", opt->reps, "timed repetitions (after one warm-up)")->check(CLI::Range(3, 100000));
       sub.add_option("--fp8-fraction", opt->fp8_fraction, "share of FP8 pages in the mixed arm")
           ->check(finite())
           ->check(CLI::Range(0.0, 1.0));
       sub.add_option("--error-max-context", opt->error_max_context, "largest context with an fp64 error check")
           ->check(CLI::Range(0, 1 << 24));
       sub.add_option("--seed", opt->seed, "random seed");
       sub.add_flag("--json", opt->json, "machine-readable output");
       return std::function<int()>([=] { return run_attn_bench(*opt); });
     }});
}  // namespace

}  // namespace minimakv::app
