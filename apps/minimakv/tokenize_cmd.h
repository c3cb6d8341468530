// `minimakv tokenize`: encode strings with a model's tokenizer.json (used by the parity scripts).
#pragma once

#include <string>

namespace minimakv::app {

// Reads a JSON array of strings from stdin; prints {"ids": [[...], ...], "roundtrip": [true, ...]}, and
// with reps > 0 also "seconds": the median in-process time of `reps` encodings of each string.
int run_tokenize(const std::string& model_dir, int reps = 0);

}  // namespace minimakv::app
