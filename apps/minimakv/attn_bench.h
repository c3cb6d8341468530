// `minimakv attn-bench`: decode-attention speed and error of dense BF16, FP8-only and mixed FP8/TQ3.
#pragma once

#include <cstdint>
#include <vector>

namespace minimakv::app {

struct AttnBenchOptions {
  std::vector<int> contexts{4096, 32768, 131072};
  int page_size = 256;
  int reps = 20;
  double fp8_fraction = 0.27;     // the paper's canary mix: ~27% of pages FP8, the rest TQ3
  int error_max_context = 32768;  // fp64 reference is computed up to this context
  uint64_t seed = 1;
  bool json = false;
};

int run_attn_bench(const AttnBenchOptions& opt);

}  // namespace minimakv::app
