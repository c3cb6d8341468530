// The minimakv command line: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <cstdio>
#include <exception>

#include "attn_bench.h"
#include "codec_report.h"
#include "default_paths.h"
#include "eval_cmd.h"
#include "generate_cmd.h"
#include "kv_stats_cmd.h"
#include "stress_cmd.h"
#include "tokenize_cmd.h"

namespace {
// CLI::Range lets NaN through (every comparison with NaN is false), so real-valued options are checked
// to be finite first: "--temperature nan" is an error, not a silently degenerate sampler.
const CLI::Validator kFinite(
    [](std::string& s) {
      try {
        size_t used = 0;
        const double v = std::stod(s, &used);
        if (used != s.size() || !std::isfinite(v)) return std::string("must be a finite number, got '") + s + "'";
      } catch (const std::exception&) {
        return std::string("must be a finite number, got '") + s + "'";
      }
      return std::string();
    },
    "FINITE");
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minimakv: a paged KV cache with FP8 and TQ3 pages for long-context LLM inference"};
  app.require_subcommand(1);

  minimakv::app::CodecReportOptions cr;
  cr.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  auto* codec = app.add_subcommand("codec-report", "measure FP8 and TQ3 error, bits per scalar and speed");
  codec->add_option("--seed", cr.seed, "random seed (default: from the clock; printed)");
  codec->add_option("--vectors", cr.vectors, "vectors per (head_dim, distribution) cell")
      ->check(CLI::Range(64, 1000000));
  codec->add_flag("--json", cr.json, "machine-readable output");

  const std::string model_dir = minimakv::app::default_model_dir(), data_dir = minimakv::app::default_data_dir();
  minimakv::app::KvStatsOptions ks;
  ks.model = model_dir;
  ks.data = data_dir;
  auto* kvs = app.add_subcommand("kv-stats", "FP8 and TQ3 error on a model's own keys and values");
  kvs->add_option("--model", ks.model, "model directory (config.json, model.safetensors, tokenizer.json)");
  kvs->add_option("--data", ks.data, "data directory (corpus/essay.txt)");
  kvs->add_option("--tokens", ks.tokens, "tokens of essay text to run")->check(CLI::Range(128, 1 << 20));
  kvs->add_option("--page-size", ks.page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
  kvs->add_option("--threads", ks.threads, "CPU threads (default: all)")->check(CLI::Range(0, 4096));
  kvs->add_option("--json", ks.json, "write machine-readable results here");

  minimakv::app::StressCmdOptions so;
  auto* stress = app.add_subcommand("stress", "randomized model-based simulation of the paged KV store");
  stress->add_option("--ops", so.ops, "operations to run")->check(CLI::Range(uint64_t{1}, uint64_t{1000000000}));
  stress->add_option("--seed", so.seed, "random seed");
  stress->add_flag("--json", so.json, "machine-readable output");

  minimakv::app::AttnBenchOptions ab;
  auto* attn = app.add_subcommand("attn-bench", "decode attention: dense BF16 vs FP8-only vs mixed FP8/TQ3");
  attn->add_option("--contexts", ab.contexts, "context lengths in tokens")->check(CLI::Range(1, 1 << 24));
  attn->add_option("--page-size", ab.page_size, "tokens per page")->check(CLI::Range(16, 4096));
  attn->add_option("--reps", ab.reps, "timed repetitions (after one warm-up)")->check(CLI::Range(3, 100000));
  attn->add_option("--fp8-fraction", ab.fp8_fraction, "share of FP8 pages in the mixed arm")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 1.0));
  attn->add_option("--error-max-context", ab.error_max_context, "largest context with an fp64 error check")
      ->check(CLI::Range(0, 1 << 24));
  attn->add_option("--seed", ab.seed, "random seed");
  attn->add_flag("--json", ab.json, "machine-readable output");

  std::string tok_model = model_dir;
  auto* tokc = app.add_subcommand("tokenize", "encode a JSON array of strings from stdin (tokenizer parity)");
  tokc->add_option("--model", tok_model, "model directory holding tokenizer.json");
  int tok_reps = 0;
  tokc->add_option("--reps", tok_reps, "also time this many encodings of each string (median seconds)")
      ->check(CLI::Range(0, 1000));

  minimakv::app::GenerateCmdOptions go;
  go.model = model_dir;
  auto* gen =
      app.add_subcommand("generate", "run a prompt through a model with the KV cache in bf16, fp8 or minima mode");
  gen->add_option("--model", go.model, "model directory (config.json, tokenizer.json, safetensors)");
  auto* prompt_opt = gen->add_option("--prompt", go.prompt, "prompt text");
  gen->add_option("--prompt-file", go.prompt_file, "read the prompt from this file");
  gen->add_option("--prompt-tokens", go.prompt_tokens, "cut or cyclically repeat the prompt to this many tokens")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24));
  gen->add_option("--batch", go.batch, "decode this many prompts together, each starting further into the text")
      ->check(CLI::Range(1, 4096));
  gen->add_option("--also", go.batch_prompts, "further prompts, decoded together with the first (batched decode)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  gen->add_option("--kv", go.kv, "bf16 (dense control), fp8 or minima")
      ->check(CLI::IsMember({"bf16", "fp8", "minima"}));
  gen->add_option("--device", go.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  gen->add_option("--weights", go.weights,
                  "weight matrices: auto (BF16 on cuda, fp32 on cpu), bf16, or fp32 (debugging)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  gen->add_flag("--dummy-weights", go.dummy_weights,
                "random weights from --model's config.json alone (benchmarks at real geometry; bench/configs/)");
  gen->add_option("--dummy-seed", go.dummy_seed, "seed of the dummy weights");
  go.fallback_tokenizer = model_dir + "/tokenizer.json";
  gen->add_option("--max-tokens", go.gen.max_new_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  gen->add_option("--page-size", go.gen.tokens_per_page, "tokens per KV page")->check(CLI::Range(16, 4096));
  gen->add_option("--prefill-chunk", go.gen.prefill_chunk, "prompt tokens per prefill chunk")
      ->check(CLI::Range(1, 1 << 20));
  gen->add_option("--recent-window", go.gen.controller.recent_window, "Recent pages (minima)")
      ->check(CLI::Range(1u, 1u << 20));
  gen->add_option("--anchor-budget", go.gen.controller.anchor_budget, "scored Anchor pages (minima)")
      ->check(CLI::Range(0u, 1u << 20));
  gen->add_option("--sinks", go.gen.controller.sink_pages, "sink pages kept as Anchors (minima)")
      ->check(CLI::Range(0u, 1u << 20));
  gen->add_option("--checkpoint-interval", go.gen.checkpoint_interval, "decode tokens between retier checkpoints")
      ->check(CLI::Range(0, 1 << 20));
  gen->add_option("--protected-layers", go.gen.protected_layers, "layers kept FP8 in every tier (minima)")
      ->check(CLI::Range(0, 1 << 18));
  gen->add_option("--temperature", go.gen.temperature, "0 for greedy")->check(kFinite)->check(CLI::Range(0.0, 100.0));
  gen->add_option("--top-p", go.gen.top_p, "nucleus mass")->check(kFinite)->check(CLI::Range(0.0, 1.0));
  gen->add_option("--seed", go.gen.seed, "sampling seed");
  gen->add_flag("--json", go.json, "machine-readable output");
  gen->add_flag("--ignore-eos", go.ignore_eos, "generate --max-tokens tokens even past an end-of-sequence token");
  gen->add_flag("--prompt-logits", go.prompt_logits, "with --json: include the logits after the prompt");

  gen->add_flag("--scoring", go.gen.controller.scoring, "feed attention page scores to the controller (minima)");

  minimakv::app::EvalCmdOptions eo;
  eo.model = model_dir;
  eo.data = data_dir;
  auto* ev = app.add_subcommand("eval", "RULER-NIAH, KL and KV memory of bf16 / fp8 / minima arms on identical inputs");
  ev->add_option("what", eo.what, "niah, kl, memory, all, or merge (NIAH runs of --inputs into one report)")
      ->check(CLI::IsMember({"niah", "kl", "memory", "all", "merge"}));
  ev->add_option("--inputs", eo.inputs, "merge: --json files of NIAH runs (e.g. shards by task)")->delimiter(',');
  ev->add_option("--model", eo.model, "model directory");
  ev->add_option("--data", eo.data, "directory made by scripts/data/extract_corpus.py (essay, evaluation words)");
  ev->add_option("--tasks", eo.tasks, "RULER NIAH tasks (default: all eight)")->delimiter(',');
  ev->add_option("--lengths", eo.lengths, "lengths in model tokens, prompt plus generation budget")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 24));
  ev->add_option("--examples", eo.examples, "examples per task and length")->check(CLI::Range(1, 100000));
  ev->add_option("--first-example", eo.first_example, "index of the first example (split one protocol into runs)")
      ->check(CLI::Range(0, 100000));
  ev->add_option("--arms", eo.arms, "arms: bf16, fp8, minima, minima-scored, minima-aggr, minima-reuse")
      ->delimiter(',');
  ev->add_option("--seed", eo.seed, "example and bootstrap seed");
  ev->add_option("--page-size", eo.page_size, "tokens per KV page")->check(CLI::Range(16, 4096));
  ev->add_option("--prefill-chunk", eo.prefill_chunk, "prompt tokens per prefill chunk")
      ->check(CLI::Range(16, 1 << 20));
  ev->add_option("--gen-budget", eo.gen_budget, "answer tokens reserved inside each length")
      ->check(CLI::Range(1, 4096));
  ev->add_option("--threads", eo.threads, "CPU threads (default: all)")->check(CLI::Range(0, 4096));
  ev->add_option("--device", eo.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  ev->add_option("--kl-lengths", eo.kl_lengths, "KL window lengths")->delimiter(',')->check(CLI::Range(1, 1 << 24));
  ev->add_option("--kl-windows", eo.kl_windows, "KL windows per length")->check(CLI::Range(1, 100000));
  ev->add_option("--kl-score-tokens", eo.kl_score_tokens, "scored positions at the end of each window")
      ->check(CLI::Range(0, 1 << 24));
  ev->add_option("--memory-tokens", eo.memory_tokens, "live-token counts for the memory table")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  ev->add_flag("--dry-run", eo.dry_run, "generate the NIAH examples and print their lengths; run no model");
  ev->add_flag("--quick", eo.quick, "CPU smoke run: 1K tokens, 1 example per task, bf16 vs minima");
  ev->add_option("--json", eo.json, "write machine-readable results here");
  ev->add_option("--markdown", eo.markdown, "write the Markdown report here");

  CLI11_PARSE(app, argc, argv);
  try {
    if (codec->parsed()) return minimakv::app::run_codec_report(cr);
    if (kvs->parsed()) return minimakv::app::run_kv_stats(ks);
    if (stress->parsed()) return minimakv::app::run_stress_cmd(so);
    if (attn->parsed()) return minimakv::app::run_attn_bench(ab);
    if (tokc->parsed()) return minimakv::app::run_tokenize(tok_model, tok_reps);
    if (gen->parsed()) {
      go.prompt_given = prompt_opt->count() > 0;
      return minimakv::app::run_generate(go);
    }
    if (ev->parsed()) return minimakv::app::run_eval(eo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minimakv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
