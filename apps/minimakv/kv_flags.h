// The KV flags the commands that run a scheduler share (replay, serve): page size, prefill chunk,
// Recent window, checkpoint interval, scoring, and the KV memory envelope ("40GiB", or "90%" of the
// GPU memory free once the weights are loaded).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

#include "minimakv/engine/model.h"
#include "minimakv/engine/options.h"

namespace minimakv::app {

void add_kv_options(CLI::App& sub, engine::KvOptions& kv);

// A parsed --kv-memory: a byte count, or a share of free device memory. parse() throws
// std::invalid_argument (naming `command`) before anything is loaded, so bad flags fail fast.
struct KvMemory {
  static KvMemory parse(const std::string& spec, const std::string& command);
  size_t bytes_for(const engine::Model& model) const;  // the share needs a GPU backend
  std::string spec, command;
  double percent = 0;  // > 0: a share
  size_t bytes = 0;
};

}  // namespace minimakv::app
