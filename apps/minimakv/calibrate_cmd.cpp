// `minimakv calibrate`: measures which layers of a model need their Stale pages in TQ4 (eval/calibrate.h)
// and writes the model's kv_profile.json, which minima then follows by default.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "command.h"
#include "default_paths.h"
#include "minimakv/eval/calibrate.h"
#include "minimakv/model/kv_profile.h"

namespace minimakv::app {

namespace {

struct CalibrateCmdOptions {
  std::string model, data, device = "cpu", out, markdown;
  bool write = false;
  int threads = 0;
  eval::CalibrationConfig cfg;
};

int run_calibrate(const CalibrateCmdOptions& o) {
  if (o.write && !o.out.empty()) throw std::invalid_argument("calibrate: give --write or --out, not both");
  engine::LoadOptions load;
  load.cpu_threads =
      o.threads > 0 ? static_cast<unsigned>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  const auto model = engine::Model::load(o.model, backend::parse_device(o.device), load);
  const auto data = eval::load_niah_data(o.data);
  const auto c = eval::calibrate_tq4_layers(
      *model, data, o.cfg, [](const std::string& what) { std::fprintf(stderr, "calibrate: %s\n", what.c_str()); });
  const std::string md =
      fmt::format("Model `{}`, {}.\n\n", o.model, model->backend().describe()) + eval::calibration_markdown(c);
  std::fputs(md.c_str(), stdout);
  if (!o.markdown.empty()) std::ofstream(o.markdown) << md;
  const std::string path = o.write ? o.model + "/" + model::kKvProfileFile : o.out;
  if (!path.empty()) {
    const model::KvProfile profile{c.chosen, eval::calibration_json(c)};
    std::ofstream f(path);
    if (!(f << model::kv_profile_json(profile))) throw std::runtime_error("calibrate: cannot write " + path);
    std::fprintf(stderr, "calibrate: wrote %s (TQ4 layers: %s)\n", path.c_str(), eval::tq4_arm(c.chosen).c_str());
  }
  return 0;
}

const Registration kCommand(
    {"calibrate", "measure which layers' Stale pages need TQ4 and write the model's kv_profile.json", 75,
     [](CLI::App& sub) {
       auto opt = std::make_shared<CalibrateCmdOptions>();
       opt->model = default_model_dir();
       opt->data = default_data_dir();
       sub.add_option("--model", opt->model, "model directory");
       sub.add_option("--data", opt->data, "directory made by scripts/data/extract_corpus.py (the held-out essay)");
       sub.add_option("--device", opt->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
       sub.add_option("--threads", opt->threads, "CPU threads (default: all)")->check(CLI::Range(0, 4096));
       sub.add_option("--length", opt->cfg.length, "tokens per essay window")->check(CLI::Range(64, 1 << 24));
       sub.add_option("--windows", opt->cfg.windows, "windows")->check(CLI::Range(1, 100000));
       sub.add_option("--score-tokens", opt->cfg.score_tokens, "scored positions at the end of each window")
           ->check(CLI::Range(1, 1 << 24));
       sub.add_option("--min-compression", opt->cfg.min_compression,
                      "KV at least this many times smaller than bf16's at --compression-tokens")
           ->check(finite())
           ->check(CLI::Range(1.0, 100.0));
       sub.add_option("--compression-tokens", opt->cfg.compression_tokens, "live tokens of the compression floor")
           ->check(CLI::Range(size_t{1}, size_t{1} << 30));
       sub.add_option("--min-gain", opt->cfg.min_gain,
                      "share of TQ3's KL above fp8's that a layer's TQ4 must remove to be chosen")
           ->check(finite())
           ->check(CLI::Range(0.0, 1.0));
       sub.add_option("--target-ratio", opt->cfg.target_ratio,
                      "top up with layers of any positive gain while KL is above this many times fp8's (0: never)")
           ->check(finite())
           ->check(CLI::Range(0.0, 100.0));
       sub.add_option("--page-size", opt->cfg.page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
       sub.add_option("--prefill-chunk", opt->cfg.prefill_chunk, "prompt tokens per prefill chunk")
           ->check(CLI::Range(16, 1 << 20));
       sub.add_option("--seed", opt->cfg.seed, "window seed");
       sub.add_flag("--write", opt->write, "write the profile to the model directory's kv_profile.json");
       sub.add_option("--out", opt->out, "write the profile to this file instead");
       sub.add_option("--markdown", opt->markdown, "write the report here");
       return std::function<int()>([=] { return run_calibrate(*opt); });
     }});

}  // namespace

}  // namespace minimakv::app
