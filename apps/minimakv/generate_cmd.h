// `minimakv generate`: run a prompt through the embedded (or any Qwen3/Llama) model on the CPU or a GPU.
#pragma once

#include <string>
#include <vector>

#include "minimakv/engine/generate.h"

namespace minimakv::app {

struct GenerateCmdOptions {
  std::string model = "models/minima-qwen3-23m";
  std::string prompt;
  bool prompt_given = false;  // --prompt was on the command line (possibly as "")
  std::string prompt_file;    // alternative to prompt
  size_t prompt_tokens = 0;   // > 0: cut or cyclically repeat the prompt's tokens to exactly this many
  int batch = 1;              // > 1: this many prompts decoded together, each starting further into the text
  std::vector<std::string> batch_prompts;  // further prompts: all are decoded together (batched decode)
  std::string kv = "minima";
  std::string device = "cpu";
  bool json = false;
  bool ignore_eos = false;     // benchmarks: always generate max_new_tokens
  bool prompt_logits = false;  // include the logits after the prompt in the JSON (parity checks)
  engine::GenerateOptions gen;
  std::vector<std::string> tq4_layers;  // --tq4-layers: layers, or "none"; unset: the model's KV profile
  bool prefill_chunk_given = false;  // --prefill-chunk was on the command line; else the engine picks it
  std::string weights = "auto";      // auto | bf16 | fp32 (engine::LoadOptions::Weights)
  bool dummy_weights = false;        // --model names a directory with config.json alone
  uint64_t dummy_seed = 0;
  std::string fallback_tokenizer;  // tokenizer.json for a model directory without one
};

int run_generate(GenerateCmdOptions opt);

}  // namespace minimakv::app
