// A short single-needle prompt for the shipped model and generation options with small pages and
// chunks (2-page Recent window), so a ~300-token prompt exercises every tier. Shared by the CPU and the
// GPU engine tests.
#pragma once

#include <string>

#include "minimakv/engine/generate.h"

namespace minimakv::testing {

inline std::string needle_prompt(const std::string& value) {
  std::string hay;
  for (int i = 0; i < 14; ++i)
    hay += "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
  return "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
         "about the number afterwards.\nOne of the special magic numbers for vivid-lantern is: " +
         value + ".\n" + hay +
         "What is the special magic number for vivid-lantern mentioned in the provided text? The special magic "
         "number for vivid-lantern mentioned in the provided text is";
}

inline engine::GenerateOptions needle_options(cache::KvMode mode) {
  engine::GenerateOptions o;
  o.mode = mode;
  o.tokens_per_page = 32;
  o.prefill_chunk = 128;
  o.max_new_tokens = 10;
  o.controller.recent_window = 2;
  o.controller.anchor_budget = 0;
  o.controller.sink_pages = 1;
  return o;
}

}  // namespace minimakv::testing
