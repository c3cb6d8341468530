// `minimakv eval`: RULER-NIAH, KL and memory of the KV arms against the dense control, as Markdown
// (stdout or --markdown) and JSON (--json).
#pragma once

#include <string>
#include <vector>

namespace minimakv::app {

struct EvalCmdOptions {
  std::string what = "all";         // niah | kl | memory | all | merge
  std::vector<std::string> inputs;  // merge: --json files of NIAH runs (shards of one protocol)
  std::string model = "models/minima-qwen3-23m";
  std::string data = "data";
  std::string device = "cpu";
  std::vector<std::string> tasks;
  std::vector<int> lengths;
  int examples = 0;
  int first_example = 0;
  std::vector<std::string> arms;
  uint64_t seed = 1;
  int page_size = 64, prefill_chunk = 512, gen_budget = 64, threads = 0;
  int kl_windows = 0, kl_score_tokens = 0;
  std::vector<int> kl_lengths;
  std::vector<size_t> memory_tokens;
  bool quick = false;
  bool dry_run = false;  // niah: generate the examples and report their lengths, run no model
  std::string json, markdown;
};

int run_eval(EvalCmdOptions opt);

}  // namespace minimakv::app
