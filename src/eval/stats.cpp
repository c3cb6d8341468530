#include "minimakv/eval/stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "minimakv/eval/niah.h"

namespace minimakv::eval {

double mcnemar_exact(int b, int c) {
  if (b < 0 || c < 0) throw std::invalid_argument("mcnemar_exact: negative counts");
  const int n = b + c;
  if (n == 0) return 1.0;
  const int k = std::min(b, c);
  // sum_{i<=k} C(n, i) / 2^n in log space
  double acc = 0.0;
  for (int i = 0; i <= k; ++i)
    acc += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2.0 * acc);
}

namespace {

double mean(std::span<const double> x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

void discordant(std::span<const double> arm, std::span<const double> base, PairedResult& r) {
  for (size_t i = 0; i < arm.size(); ++i) {
    const bool a = arm[i] >= 1.0, b = base[i] >= 1.0;
    r.arm_only += a && !b;
    r.base_only += b && !a;
  }
}

void percentile_ci(std::vector<double>& d, PairedResult& r) {
  std::sort(d.begin(), d.end());
  const double last = static_cast<double>(d.size() - 1);
  const auto at = [&](double q) { return d[static_cast<size_t>(std::clamp(q * last, 0.0, last) + 0.5)]; };
  r.lo = at(0.025);
  r.hi = at(0.975);
}

}  // namespace

PairedResult paired_bootstrap(std::span<const double> arm, std::span<const double> base, uint64_t seed, int resamples) {
  if (arm.size() != base.size() || arm.empty())
    throw std::invalid_argument("paired_bootstrap: need equal, non-empty samples");
  // One group: the macro average of a single task is its mean.
  return paired_bootstrap_macro({std::vector<double>(arm.begin(), arm.end())},
                                {std::vector<double>(base.begin(), base.end())}, seed, resamples);
}

PairedResult paired_bootstrap_macro(const std::vector<std::vector<double>>& arm,
                                    const std::vector<std::vector<double>>& base, uint64_t seed, int resamples) {
  if (arm.size() != base.size() || arm.empty())
    throw std::invalid_argument("paired_bootstrap_macro: need equal, non-empty groups");
  PairedResult r;
  for (size_t g = 0; g < arm.size(); ++g) {
    if (arm[g].size() != base[g].size() || arm[g].empty())
      throw std::invalid_argument("paired_bootstrap_macro: group sizes differ or are empty");
    r.n += static_cast<int>(arm[g].size());
    r.arm += mean(arm[g]) / static_cast<double>(arm.size());
    r.base += mean(base[g]) / static_cast<double>(arm.size());
    discordant(arm[g], base[g], r);
  }
  r.diff = r.arm - r.base;
  r.mcnemar_p = mcnemar_exact(r.arm_only, r.base_only);
  SplitMix rng(seed);
  std::vector<double> d(static_cast<size_t>(resamples));
  for (auto& x : d) {
    double macro = 0;
    for (size_t g = 0; g < arm.size(); ++g) {
      double s = 0;
      for (size_t i = 0; i < arm[g].size(); ++i) {
        const size_t j = rng.below(arm[g].size());
        s += arm[g][j] - base[g][j];
      }
      macro += s / static_cast<double>(arm[g].size());
    }
    x = macro / static_cast<double>(arm.size());
  }
  percentile_ci(d, r);
  return r;
}

}  // namespace minimakv::eval
