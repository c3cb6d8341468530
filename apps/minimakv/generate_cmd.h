// `minimakv generate`: run a prompt through the embedded (or any Qwen3/Llama) model on the CPU.
#pragma once

#include <string>
#include <vector>

#include "minimakv/engine/generate.h"

namespace minimakv::app {

struct GenerateCmdOptions {
  std::string model = "models/minima-qwen3-23m";
  std::string prompt;
  std::vector<std::string> batch_prompts;  // further prompts: all are decoded together (batched decode)
  std::string kv = "minima";
  std::string device = "cpu";
  bool json = false;
  bool prompt_logits = false;  // include the logits after the prompt in the JSON (parity checks)
  engine::GenerateOptions gen;
};

int run_generate(GenerateCmdOptions opt);

}  // namespace minimakv::app
