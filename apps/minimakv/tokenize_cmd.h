// `minimakv tokenize`: encode strings with a model's tokenizer.json (used by the parity scripts).
#pragma once

#include <string>

namespace minimakv::app {

// Reads a JSON array of strings from stdin; prints {"ids": [[...], ...], "roundtrip": [true, ...]}.
int run_tokenize(const std::string& model_dir);

}  // namespace minimakv::app
