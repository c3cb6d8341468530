// `minimakv kv-stats`: what the KV codecs do to a model's own keys and values. codec-report measures
// synthetic vectors; this runs the model over held-out essay text with an exact BF16 cache, reads every
// cached K/V vector back, and reports per layer how much of each tensor's energy is a common offset
// (over the whole sequence, and within each page) and the error of FP8, TQ3 and TQ3 of page-centred
// vectors on those vectors. All figures are computed at run time from the model and the text.
#pragma once

#include <string>

namespace minimakv::app {

struct KvStatsOptions {
  std::string model = "models/minima-qwen3-23m";
  std::string data = "data";
  int tokens = 4096;
  int page_size = 64;
  int threads = 0;   // 0: all
  std::string json;  // write machine-readable results here when set
};

int run_kv_stats(const KvStatsOptions& opt);

}  // namespace minimakv::app
