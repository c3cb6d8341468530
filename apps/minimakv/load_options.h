// How the CLI's model flags (--weights, --dummy-weights, --dummy-seed, the fallback tokenizer) become
// engine::LoadOptions: one mapping for every command that loads a model.
#pragma once

#include <cstdint>
#include <string>

#include "minimakv/engine/model.h"

namespace minimakv::app {

// weights: "auto", "bf16" or "fp32" (the commands' CLI11 checks restrict it to these).
inline engine::LoadOptions load_options(const std::string& weights, bool dummy, uint64_t dummy_seed,
                                        const std::string& fallback_tokenizer) {
  engine::LoadOptions load;
  using W = engine::LoadOptions::Weights;
  load.weights = weights == "bf16" ? W::kBf16 : weights == "fp32" ? W::kFp32 : W::kAuto;
  load.dummy = dummy;
  load.dummy_seed = dummy_seed;
  load.fallback_tokenizer = fallback_tokenizer;
  return load;
}

}  // namespace minimakv::app
