#include "eval_cmd.h"

#include <fmt/format.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "command.h"
#include "default_paths.h"
#include "minimakv/eval/report.h"
#include "minimakv/eval/runner.h"
#include "minimakv/model/checkpoint_digest.h"

namespace minimakv::app {

namespace {

void fill_defaults(EvalCmdOptions& o) {
  // --quick: a CPU smoke run (CI, the README's first command); otherwise the GPU-scale settings.
  if (o.lengths.empty()) o.lengths = o.quick ? std::vector<int>{1024} : std::vector<int>{4096, 8192, 16384};
  if (o.examples == 0) o.examples = o.quick ? 1 : 64;
  if (o.arms.empty())
    o.arms = o.quick
                 ? std::vector<std::string>{"bf16", "minima"}
                 : std::vector<std::string>{"bf16", "fp8", "minima", "minima-scored", "minima-aggr", "minima-reuse"};
  if (o.kl_lengths.empty()) o.kl_lengths = o.quick ? std::vector<int>{1024} : std::vector<int>{4096, 16384};
  if (o.kl_windows == 0) o.kl_windows = o.quick ? 1 : 8;
  if (o.kl_score_tokens == 0) o.kl_score_tokens = o.quick ? 128 : 512;
  if (o.memory_tokens.empty())
    o.memory_tokens = o.quick ? std::vector<size_t>{16384, 65536} : std::vector<size_t>{16384, 65536, 131072};
}

}  // namespace

// NIAH runs made separately (e.g. shards by task, in parallel processes) as one report: the same
// tables and paired statistics as one run over all of them.
int run_merge(const EvalCmdOptions& o) {
  if (o.inputs.empty()) throw std::invalid_argument("eval merge: give the runs' --json files with --inputs");
  std::vector<std::vector<eval::NiahRecord>> runs;
  nlohmann::json first;
  std::string md = "Merged from " + std::to_string(o.inputs.size()) + " runs:";
  for (const auto& path : o.inputs) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("eval merge: cannot read " + path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument("eval merge: " + path + " is not JSON: " + e.what());
    }
    if (!j.contains("niah")) throw std::invalid_argument("eval merge: " + path + " holds no NIAH run");
    if (first.is_null()) first = j;
    // One model: by its files' digest where both runs recorded one (the same files under another path,
    // e.g. on another machine, are the same model), else by its path.
    const char* model_key = j.contains("model_digest") && first.contains("model_digest") ? "model_digest" : "model";
    for (const char* key : {model_key, "seed", "device_name"})
      if (j.value(key, nlohmann::json()) != first.value(key, nlohmann::json()))
        throw std::invalid_argument(std::string("eval merge: ") + path + " differs in '" + key + "' from " +
                                    o.inputs[0]);
    runs.push_back(eval::niah_records_from_json(j["niah"]));
    md += " `" + path + "`";
  }
  const auto recs = eval::merge_niah_records(runs);
  const uint64_t seed = first.value("seed", uint64_t{1});
  md += fmt::format(" (model `{}`, {} {}).\n\n### RULER-NIAH\n", first.value("model", std::string()),
                    first.value("device", std::string()), first.value("device_name", std::string()));
  md += eval::niah_markdown(recs, seed);
  nlohmann::json j = first;
  j["niah"] = eval::to_json(recs, seed);
  j["merged_from"] = o.inputs;
  std::fputs(md.c_str(), stdout);
  if (!o.markdown.empty()) std::ofstream(o.markdown) << md;
  if (!o.json.empty()) std::ofstream(o.json) << eval::json_text(j);
  return 0;
}

int run_eval(EvalCmdOptions o) {
  if (o.what == "merge") return run_merge(o);
  fill_defaults(o);
  const auto t0 = std::chrono::steady_clock::now();
  const unsigned threads =
      o.threads > 0 ? static_cast<unsigned>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  engine::LoadOptions load;
  load.cpu_threads = threads;
  auto model = engine::Model::load(o.model, backend::parse_device(o.device), load);
  const std::string where = model->backend().device() == backend::Device::kCuda
                                ? "GPU " + model->backend().describe()
                                : std::to_string(threads) + " CPU threads (" + model->backend().describe() + ")";
  nlohmann::json j = {{"model", o.model},
                      {"model_digest", model::checkpoint_digest(o.model)},
                      {"seed", o.seed},
                      {"threads", threads},
                      {"quick", o.quick},
                      {"device", o.device},
                      {"device_name", model->backend().describe()}};
  std::string md = fmt::format(
      "Model `{}`, seed {}, {}. Compression happens during prefill: every arm prefills "
      "in chunks of {} tokens with a retier checkpoint after each chunk, so minima's context is in "
      "its tiers when the question is read.\n\nArms:\n",
      o.model, o.seed, where, o.prefill_chunk);
  for (const auto& a : o.arms) {
    const auto arm = eval::make_arm(a, o.page_size, o.prefill_chunk);
    md += "- `" + a + "`: " + arm.describe();
    if (cache::retiers(arm.opt.mode) && !arm.opt.tq4_layers) {  // name what the profile resolved to
      const auto layers = engine::tq4_layers_for(model->config(), arm.opt);
      md += layers.empty() ? " (this model: none, TQ3 everywhere)"
                           : fmt::format(" (this model: layers {})", fmt::join(layers, ", "));
    }
    md += "\n";
  }
  const bool all = o.what == "all";
  if (o.dry_run) {
    const auto data = eval::load_niah_data(o.data);
    const eval::NiahGenerator gen(data, model->tokenizer(), o.seed);
    std::vector<std::string> names = o.tasks;
    if (names.empty())
      for (const auto& t : eval::ruler_niah_tasks()) names.push_back(t.name);
    for (int len : o.lengths)
      for (const auto& n : names) {
        size_t lo = SIZE_MAX, hi = 0;
        for (int i = 0; i < o.examples; ++i) {
          const auto ex = gen.make(eval::task_by_name(n), len, o.gen_budget, i);
          lo = std::min(lo, ex.ids.size());
          hi = std::max(hi, ex.ids.size());
        }
        std::printf("%-16s %6d: %d examples, prompt tokens %zu..%zu (+%d generation budget)\n", n.c_str(), len,
                    o.examples, lo, hi, o.gen_budget);
      }
    return 0;
  }
  if (all || o.what == "niah") {
    const auto data = eval::load_niah_data(o.data);
    eval::NiahConfig cfg;
    cfg.tasks = o.tasks;
    cfg.lengths = o.lengths;
    cfg.examples = o.examples;
    cfg.first_example = o.first_example;
    cfg.seed = o.seed;
    cfg.arms = o.arms;
    cfg.page_size = o.page_size;
    cfg.prefill_chunk = o.prefill_chunk;
    cfg.gen_budget = o.gen_budget;
    size_t done = 0;
    const size_t total = (o.tasks.empty() ? eval::ruler_niah_tasks().size() : o.tasks.size()) * o.lengths.size() *
                         static_cast<size_t>(o.examples) * o.arms.size();
    const auto recs = eval::run_niah(*model, data, cfg, [&](const eval::NiahRecord& r) {
      std::fprintf(stderr, "\r[%zu/%zu] %s %d #%d %s: %.2f   ", ++done, total, r.task.c_str(), r.length, r.index,
                   r.arm.c_str(), r.score);
    });
    std::fprintf(stderr, "\n");
    md += "\n### RULER-NIAH\n" + eval::niah_markdown(recs, o.seed);
    j["niah"] = eval::to_json(recs, o.seed);
  }
  if (all || o.what == "kl") {
    const auto data = eval::load_niah_data(o.data);
    std::vector<std::string> arms;  // a single long text: the prefix-reuse arm is the same as minima here
    for (const auto& a : o.arms)
      if (a != "minima-reuse") arms.push_back(a);
    const auto kl = eval::run_kl(*model, data, o.kl_lengths, o.kl_windows, o.kl_score_tokens, arms, o.page_size,
                                 o.prefill_chunk, o.seed);
    md += fmt::format(
              "\n### KL divergence of next-token distributions (held-out essay, last {} positions of each window)\n",
              o.kl_score_tokens) +
          eval::kl_markdown(kl);
    j["kl"] = eval::to_json(kl);
  }
  if (all || o.what == "memory") {
    std::vector<std::string> arms;  // sizes do not depend on how the prefix arrived
    for (const auto& a : o.arms)
      if (a != "minima-reuse") arms.push_back(a);
    const auto mem = eval::project_memory(*model, arms, o.memory_tokens, o.page_size, o.prefill_chunk);
    md += "\n### KV memory per live token, from the store's accounting (one sequence of that many tokens)\n" +
          eval::memory_markdown(mem);
    j["memory"] = eval::to_json(mem);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  md += fmt::format("\n(total {:.0f} s)\n", secs);
  j["seconds"] = secs;
  std::fputs(md.c_str(), stdout);
  if (!o.markdown.empty()) std::ofstream(o.markdown) << md;
  if (!o.json.empty()) std::ofstream(o.json) << eval::json_text(j);
  return 0;
}

namespace {
const Registration kCommand(
    {"eval", "RULER-NIAH, KL and KV memory of bf16 / fp8 / minima arms on identical inputs", 70, [](CLI::App& sub) {
       auto opt = std::make_shared<EvalCmdOptions>();
       opt->model = default_model_dir();
       opt->data = default_data_dir();
       sub.add_option("what", opt->what, "niah, kl, memory, all, or merge (NIAH runs of --inputs into one report)")
           ->check(CLI::IsMember({"niah", "kl", "memory", "all", "merge"}));
       sub.add_option("--inputs", opt->inputs, "merge: --json files of NIAH runs (e.g. shards by task)")
           ->delimiter(',');
       sub.add_option("--model", opt->model, "model directory");
       sub.add_option("--data", opt->data,
                      "directory made by scripts/data/extract_corpus.py (essay, evaluation words)");
       sub.add_option("--tasks", opt->tasks,
                      "tasks: RULER's eight NIAH tasks (the default), vt, cwe, fwe, and the NIAH shapes in held-out "
                      "phrasing (heldout_single_1 .. heldout_multiquery)")
           ->delimiter(',');
       sub.add_option("--lengths", opt->lengths, "lengths in model tokens, prompt plus generation budget")
           ->delimiter(',')
           ->check(CLI::Range(1, 1 << 24));
       sub.add_option("--examples", opt->examples, "examples per task and length")->check(CLI::Range(1, 100000));
       sub.add_option("--first-example", opt->first_example,
                      "index of the first example (split one protocol into runs)")
           ->check(CLI::Range(0, 100000));
       sub.add_option("--arms", opt->arms,
                      "arms: bf16, fp8, minima, minima-scored, minima-aggr, minima-reuse; a minima arm may add "
                      "@recent=W, @sinks=S, @anchors=A, @protect=L+L, @tq4=L+L (e.g. minima@recent=8@tq4=0+6)")
           ->delimiter(',');
       sub.add_option("--seed", opt->seed, "example and bootstrap seed");
       sub.add_option("--page-size", opt->page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
       sub.add_option("--prefill-chunk", opt->prefill_chunk, "prompt tokens per prefill chunk")
           ->check(CLI::Range(16, 1 << 20));
       sub.add_option("--gen-budget", opt->gen_budget, "answer tokens reserved inside each length")
           ->check(CLI::Range(1, 4096));
       sub.add_option("--threads", opt->threads, "CPU threads (default: all)")->check(CLI::Range(0, 4096));
       sub.add_option("--device", opt->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
       sub.add_option("--kl-lengths", opt->kl_lengths, "KL window lengths")
           ->delimiter(',')
           ->check(CLI::Range(1, 1 << 24));
       sub.add_option("--kl-windows", opt->kl_windows, "KL windows per length")->check(CLI::Range(1, 100000));
       sub.add_option("--kl-score-tokens", opt->kl_score_tokens, "scored positions at the end of each window")
           ->check(CLI::Range(0, 1 << 24));
       sub.add_option("--memory-tokens", opt->memory_tokens, "live-token counts for the memory table")
           ->delimiter(',')
           ->check(CLI::Range(size_t{1}, size_t{1} << 30));
       sub.add_flag("--dry-run", opt->dry_run, "generate the NIAH examples and print their lengths; run no model");
       sub.add_flag("--quick", opt->quick, "CPU smoke run: 1K tokens, 1 example per task, bf16 vs minima");
       sub.add_option("--json", opt->json, "write machine-readable results here");
       sub.add_option("--markdown", opt->markdown, "write the Markdown report here");
       return std::function<int()>([=] { return run_eval(*opt); });
     }});
}  // namespace

}  // namespace minimakv::app
