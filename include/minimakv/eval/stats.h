// Paired statistics for comparing an arm against the dense control on identical examples.
//
// Owns: the percentile bootstrap of paired mean differences (per task, and of the macro average with
// examples resampled within each task), and McNemar's exact test over discordant binary outcomes.
// Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace minimakv::eval {

struct PairedResult {
  int n = 0;
  double base = 0, arm = 0;         // means (same scale as the inputs)
  double diff = 0, lo = 0, hi = 0;  // arm - base and its 95% bootstrap interval
  int arm_only = 0, base_only = 0;  // discordant pairs of the binary outcome (score == 1)
  double mcnemar_p = 1.0;           // exact two-sided
};

// Two-sided exact McNemar p-value: 2 * P[X <= min(b, c)], X ~ Binomial(b + c, 1/2), capped at 1.
double mcnemar_exact(int b, int c);

// One group of paired scores (same length). Scores are in [0, 1]; "correct" means score == 1.
PairedResult paired_bootstrap(std::span<const double> arm, std::span<const double> base, uint64_t seed,
                              int resamples = 2000);

// Macro average over groups (tasks): each resample draws every group's examples with replacement
// inside that group, then averages the group means. McNemar pools every pair.
PairedResult paired_bootstrap_macro(const std::vector<std::vector<double>>& arm,
                                    const std::vector<std::vector<double>>& base, uint64_t seed, int resamples = 2000);

}  // namespace minimakv::eval
