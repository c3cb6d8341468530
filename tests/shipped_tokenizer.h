// The shipped model's tokenizer, loaded once, for tests that count or encode model tokens. Needs
// MINIMAKV_SOURCE_DIR (the test target's compile definition).
#pragma once

#include <string>

#include "minimakv/model/tokenizer.h"

namespace minimakv::testing {

inline const model::Tokenizer& shipped_tokenizer() {
  static const model::Tokenizer tok =
      model::Tokenizer::load(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m/tokenizer.json");
  return tok;
}

}  // namespace minimakv::testing
