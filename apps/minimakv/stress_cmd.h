// `minimakv stress`: the randomized store simulation outside the test harness.
#pragma once

#include <cstdint>

namespace minimakv::app {

struct StressCmdOptions {
  uint64_t ops = 100000;
  uint64_t seed = 1;
  bool json = false;
};

int run_stress_cmd(const StressCmdOptions& opt);

}  // namespace minimakv::app
