#include "codec_report.h"

#include <fmt/core.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "command.h"
#include "default_paths.h"
#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"

namespace minimakv::app {
namespace {

using codec::NormCorrection;
using json = nlohmann::json;

enum class Dist { kGaussian, kStudentT3, kOutliers };
const char* dist_name(Dist d) {
  return d == Dist::kGaussian ? "gaussian" : d == Dist::kStudentT3 ? "student-t3" : "outliers-20x";
}

std::vector<float> draw(std::mt19937_64& rng, Dist dist, int n, int d) {
  std::normal_distribution<float> g;
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (auto& v : x) v = dist == Dist::kStudentT3 ? t(rng) : g(rng);
  if (dist == Dist::kOutliers) {  // a few fixed channels 20x larger, as in real K projections
    for (int i = 0; i < n; ++i)
      for (int c : {3, 17, 40}) x[static_cast<size_t>(i) * d + (c % d)] *= 20.0f;
  }
  return x;
}

// Errors of one codec over a set of vectors: reconstruction and inner products with random queries.
struct Stats {
  double err = 0, energy = 0;                 // sum ||x - x^||^2, sum ||x||^2
  double ip_cross = 0, ip_err2 = 0, ip2 = 0;  // for slope bias and relative RMS of <q, x^> vs <q, x>
  double rel_mse() const { return err / energy; }
  double ip_bias() const { return ip_cross / ip2; }
  double ip_rms() const { return std::sqrt(ip_err2 / ip2); }
};

template <typename Codec>
Stats measure(const std::vector<float>& x, const std::vector<float>& q, int d, Codec&& roundtrip) {
  Stats s;
  std::vector<float> y(d);
  const int n = static_cast<int>(x.size() / d);
  for (int v = 0; v < n; ++v) {
    const float* xv = x.data() + static_cast<size_t>(v) * d;
    const float* qv = q.data() + static_cast<size_t>(v) * d;
    roundtrip(v, std::span<const float>(xv, d), std::span<float>(y));
    double ip = 0, iph = 0;
    for (int i = 0; i < d; ++i) {
      s.err += (xv[i] - y[i]) * static_cast<double>(xv[i] - y[i]);
      s.energy += xv[i] * static_cast<double>(xv[i]);
      ip += static_cast<double>(qv[i]) * xv[i];
      iph += static_cast<double>(qv[i]) * y[i];
    }
    s.ip_cross += (iph - ip) * ip;
    s.ip_err2 += (iph - ip) * (iph - ip);
    s.ip2 += ip * ip;
  }
  return s;
}

// Relative error of a softmax-weighted average of 64 values: exposes a systematic shrink that a
// per-vector error hides.
template <typename Codec>
double averaged_output_error(std::mt19937_64& rng, const std::vector<float>& x, int d, Codec&& roundtrip) {
  const int n = static_cast<int>(x.size() / d), group = 64;
  std::normal_distribution<double> g;
  double err = 0, energy = 0;
  std::vector<float> y(d);
  for (int start = 0; start + group <= n; start += group) {
    std::vector<double> w(group), o(d, 0.0), oh(d, 0.0);
    double z = 0;
    for (auto& wi : w) z += (wi = std::exp(g(rng)));
    for (int j = 0; j < group; ++j) {
      const float* xv = x.data() + static_cast<size_t>(start + j) * d;
      roundtrip(start + j, std::span<const float>(xv, d), std::span<float>(y));
      for (int i = 0; i < d; ++i) {
        o[i] += w[j] / z * xv[i];
        oh[i] += w[j] / z * y[i];
      }
    }
    for (int i = 0; i < d; ++i) {
      err += (o[i] - oh[i]) * (o[i] - oh[i]);
      energy += o[i] * o[i];
    }
  }
  return std::sqrt(err / energy);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Single-thread throughput of `op` over n vectors: median of 5 runs, in vectors per second.
template <typename Op>
double throughput(int n, Op&& op) {
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int v = 0; v < n; ++v) op(v);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(n / s);
  }
  return median(rates);
}

}  // namespace

int run_codec_report(const CodecReportOptions& opt) {
  std::mt19937_64 rng(opt.seed);
  json out;
  out["seed"] = opt.seed;
  out["vectors_per_cell"] = opt.vectors;
  if (!opt.json) {
    fmt::print("minimakv codec-report  seed={}  vectors per cell={}\n", opt.seed, opt.vectors);
    fmt::print(
        "relative MSE = E||x-x^||^2 / E||x||^2; ip bias = slope of <q,k^> on <q,k> minus 1; "
        "ip rms = RMS(<q,k^>-<q,k>) / RMS(<q,k>)\n\n");
    fmt::print("{:>4} {:<13} {:<28} {:>10} {:>10} {:>10}\n", "d", "data", "codec", "rel MSE", "ip bias", "ip rms");
  }
  const NormCorrection corrs[] = {NormCorrection::kUnbiased, NormCorrection::kMinMse, NormCorrection::kPreserveNorm,
                                  NormCorrection::kNone};
  for (int d : {64, 128, 256}) {
    std::vector<codec::Rotation> rots;
    for (uint32_t h = 0; h < 8; ++h) rots.push_back(codec::Rotation::for_head(d, 0, h));
    std::vector<float> scratch(d);
    std::vector<uint8_t> codes(d), packed(codec::tq3_packed_bytes(d));
    auto fp8_rt = [&](int, std::span<const float> x, std::span<float> y) {
      const float s = codec::fp8_encode_vector(x, codes);
      codec::fp8_decode_vector(codes, s, y);
    };
    auto fp8_rot_rt = [&](int v, std::span<const float> x, std::span<float> y) {
      std::copy(x.begin(), x.end(), scratch.begin());
      rots[v % 8].forward(scratch);
      const float s = codec::fp8_encode_vector(scratch, codes);
      codec::fp8_decode_vector(codes, s, y);
      rots[v % 8].inverse(y);
    };
    auto tq3_rt = [&](NormCorrection c) {
      return [&, c](int v, std::span<const float> x, std::span<float> y) {
        const uint16_t a = codec::tq3_encode(x, rots[v % 8], scratch, packed, c);
        codec::tq3_decode(packed, a, rots[v % 8], y);
      };
    };
    // The alternative value format the layout could have used: uniform asymmetric 3-bit codes over
    // [min, max] of the rotated vector, with fp16 scale and zero. Measured here to justify the choice.
    auto uniform3_rt = [&](int v, std::span<const float> x, std::span<float> y) {
      std::copy(x.begin(), x.end(), scratch.begin());
      rots[v % 8].forward(scratch);
      const auto [mn, mx] = std::minmax_element(scratch.begin(), scratch.end());
      const float zero = codec::half_to_float(codec::float_to_half(*mn));
      const float scale = codec::half_to_float(codec::float_to_half((*mx - *mn) / 7.0f));
      for (int i = 0; i < d; ++i) {
        const float q = scale > 0 ? std::nearbyint((scratch[i] - zero) / scale) : 0.0f;
        y[i] = zero + std::clamp(q, 0.0f, 7.0f) * scale;
      }
      rots[v % 8].inverse(y);
    };
    auto tq3_norot_rt = [&](int, std::span<const float> x, std::span<float> y) {
      const uint16_t a = codec::tq3_encode_rotated(x, packed, NormCorrection::kUnbiased);
      codec::tq3_decode_rotated(packed, a, y);
    };
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kOutliers}) {
      const auto x = draw(rng, dist, opt.vectors, d);
      const auto q = draw(rng, Dist::kGaussian, opt.vectors, d);
      std::vector<std::pair<std::string, Stats>> rows;
      rows.emplace_back("fp8", measure(x, q, d, fp8_rt));
      rows.emplace_back("fp8 rotated", measure(x, q, d, fp8_rot_rt));
      rows.emplace_back("tq3 no rotation (unbiased)", measure(x, q, d, tq3_norot_rt));
      for (auto c : corrs) rows.emplace_back(std::string("tq3 ") + codec::to_string(c), measure(x, q, d, tq3_rt(c)));
      rows.emplace_back("uniform3 rotated (alt. V)", measure(x, q, d, uniform3_rt));
      json cell;
      for (auto& [name, s] : rows) {
        cell[name] = {{"rel_mse", s.rel_mse()}, {"ip_bias", s.ip_bias()}, {"ip_rel_rms", s.ip_rms()}};
        if (!opt.json)
          fmt::print("{:>4} {:<13} {:<28} {:>10.5f} {:>+10.4f} {:>10.4f}\n", d, dist_name(dist), name, s.rel_mse(),
                     s.ip_bias(), s.ip_rms());
      }
      for (auto c : {NormCorrection::kUnbiased, NormCorrection::kMinMse}) {
        const double e = averaged_output_error(rng, x, d, tq3_rt(c));
        cell[std::string("tq3 ") + codec::to_string(c)]["avg64_output_rel_err"] = e;
        if (!opt.json)
          fmt::print("{:>4} {:<13} {:<28} softmax-weighted mean of 64 values: rel err {:.5f}\n", d, dist_name(dist),
                     std::string("tq3 ") + codec::to_string(c), e);
      }
      out["errors"][std::to_string(d)][dist_name(dist)] = cell;
    }
  }

  // Bits per scalar from the accounting function (K and V, scales/norms and padding included).
  if (!opt.json) fmt::print("\nbits per scalar (page of 64 tokens, 8 KV heads; from PageLayout)\n");
  for (int d : {64, 128, 256}) {
    json row;
    std::string line = fmt::format("  d={:<4}", d);
    for (const codec::PageFormatSpec& spec : codec::all_page_formats()) {
      const codec::PageFormat f = spec.format;
      const codec::PageLayout L(f, {64, 8, d});
      const auto b = L.breakdown();
      row[codec::to_string(f)] = {{"bits_per_scalar", L.bits_per_scalar()},
                                  {"page_bytes", L.bytes()},
                                  {"codes", b.codes},
                                  {"metadata", b.metadata},
                                  {"padding", b.padding}};
      line += fmt::format("  {} {:.4f}", codec::to_string(f), L.bits_per_scalar());
    }
    out["bits_per_scalar"][std::to_string(d)] = row;
    if (!opt.json) fmt::print("{}\n", line);
  }

  // Single-core throughput (wall clock; a report, not a test).
  if (!opt.json) fmt::print("\nthroughput, one core (median of 5 runs)\n");
  for (int d : {64, 128, 256}) {
    const int n = 20000;
    const auto x = draw(rng, Dist::kGaussian, n, d);
    std::vector<uint8_t> codes(static_cast<size_t>(n) * d), packed(static_cast<size_t>(n) * codec::tq3_packed_bytes(d));
    std::vector<float> scales(n), y(d), scratch(d);
    std::vector<uint16_t> alpha(n);
    const codec::Rotation rot = codec::Rotation::for_head(d, 0, 0);
    const size_t pb = codec::tq3_packed_bytes(d);
    const double fe = throughput(n, [&](int v) {
      scales[v] = codec::fp8_encode_vector({x.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)},
                                           {codes.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)});
    });
    const double fd = throughput(n, [&](int v) {
      codec::fp8_decode_vector({codes.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)}, scales[v], y);
    });
    const double te = throughput(n, [&](int v) {
      alpha[v] = codec::tq3_encode({x.data() + static_cast<size_t>(v) * d, static_cast<size_t>(d)}, rot, scratch,
                                   {packed.data() + v * pb, pb}, NormCorrection::kUnbiased);
    });
    const double td = throughput(n, [&](int v) { codec::tq3_decode({packed.data() + v * pb, pb}, alpha[v], rot, y); });
    const double mb = 4.0 * d / 1e6;  // fp32 input or output per vector, MB
    out["throughput"][std::to_string(d)] = {{"fp8_encode_vec_per_s", fe},
                                            {"fp8_decode_vec_per_s", fd},
                                            {"tq3_encode_vec_per_s", te},
                                            {"tq3_decode_vec_per_s", td}};
    if (!opt.json)
      fmt::print(
          "  d={:<4} fp8 encode {:7.0f} MB/s  decode {:7.0f} MB/s   tq3 encode {:7.0f} MB/s  decode {:7.0f} MB/s"
          "  (fp32 side)\n",
          d, fe * mb, fd * mb, te * mb, td * mb);
  }
  if (opt.json) fmt::print("{}\n", out.dump(2));
  return 0;
}

namespace {
const Registration kCommand({"codec-report", "measure FP8 and TQ3 error, bits per scalar and speed", 10,
                             [](CLI::App& sub) {
                               auto opt = std::make_shared<CodecReportOptions>();
                               opt->seed =
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
                               sub.add_option("--seed", opt->seed, "random seed (default: from the clock; printed)");
                               sub.add_option("--vectors", opt->vectors, "vectors per (head_dim, distribution) cell")
                                   ->check(CLI::Range(64, 1000000));
                               sub.add_flag("--json", opt->json, "machine-readable output");
                               return std::function<int()>([=] { return run_codec_report(*opt); });
                             }});
}  // namespace

}  // namespace minimakv::app
