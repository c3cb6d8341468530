// The flags of the commands that load a model and run it through the scheduler (replay, serve), and
// what they share once parsed: the model, the KV pools sized from the envelope, the scheduler's
// options and the envelope's measured capacity per mode.
//   KV:     --kv, --page-size, --prefill-chunk, --recent-window, --checkpoint-interval, --scoring
//   model:  --model, --device, --weights, --dummy-weights, --dummy-seed
//   memory: --kv-memory ("40GiB", or "90%" of the GPU memory free once the weights are loaded),
//           --reference-tokens (the request length the minima pools are split for)
//   loop:   --admission, --max-step-tokens, --max-running
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minimakv/engine/capacity.h"
#include "minimakv/engine/model.h"
#include "minimakv/engine/options.h"
#include "minimakv/engine/scheduler.h"

namespace minimakv::app {

void add_kv_options(CLI::App& sub, engine::KvOptions& kv);

// Where minima's Stale pages go for this model and these options, for logs: "TQ3 in every layer" or
// "TQ4 in layers 0, 7 (the model's kv_profile.json), TQ3 elsewhere"; empty for bf16 and fp8.
std::string stale_layout(const model::ModelConfig& cfg, const engine::KvOptions& kv);

// --tq4-layers (generate, serve, replay): layer numbers or "none", parsed by engine::parse_tq4_layers
// after the command line is read; left empty, the model's kv_profile.json decides.
void add_tq4_layers_option(CLI::App& sub, std::vector<std::string>& pieces);

// A parsed --kv-memory: a byte count, or a share of free device memory. parse() throws
// std::invalid_argument (naming `command`) before anything is loaded, so bad flags fail fast.
struct KvMemory {
  static KvMemory parse(const std::string& spec, const std::string& command);
  size_t bytes_for(const engine::Model& model) const;  // the share needs a GPU backend
  std::string spec, command;
  double percent = 0;  // > 0: a share
  size_t bytes = 0;
};

struct EngineSetup {
  std::unique_ptr<engine::Model> model;
  size_t envelope = 0, reference_tokens = 0;
  engine::SchedulerOptions scheduler;
  cache::StoreConfig pools;
  std::vector<engine::CapacityRow> capacity;  // bf16, fp8 and minima at the envelope, requests of reference_tokens
};

struct EngineFlags {
  std::string model, kv = "minima", device = "cpu", weights = "auto", kv_memory, admission = "preempt";
  std::string fallback_tokenizer;
  bool dummy_weights = false;
  uint64_t dummy_seed = 0;
  unsigned cpu_threads = 0;
  size_t reference_tokens = 0, max_step_tokens = 2048, max_running = 256;
  engine::KvOptions kv_opt;
  std::vector<std::string> tq4_layers;  // --tq4-layers (engine::parse_tq4_layers); empty: the model's profile

  EngineFlags();  // the embedded model and its tokenizer as defaults
  void add_to(CLI::App& sub, const std::string& kv_memory_help, const std::string& reference_help);
  // Parses and checks the flags without loading anything (std::invalid_argument naming `command`).
  void check(const std::string& command);
  // Loads the model and sizes the pools; default_reference gives the reference length when
  // --reference-tokens is not set.
  EngineSetup load(const std::function<size_t(const engine::Model&)>& default_reference) const;

 private:
  KvMemory memory_;
  engine::Admission admission_ = engine::Admission::kPreempt;
};

}  // namespace minimakv::app
