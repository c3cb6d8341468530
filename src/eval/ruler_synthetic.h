// RULER's tracing and aggregation tasks (internal to eval/): the example makers NiahGenerator::make
// dispatches to for TaskFamily::kVariableTracking, kCommonWords and kFrequentWords.
//
// Each one draws from the example's own SplitMix stream (so a (seed, task, length, index) gives the same
// bytes everywhere), fills the context to the target length in model tokens minus the generation budget,
// and ends the prompt with the answer prefix. Expected answers are computed from what was generated, not
// assumed: cwe and fwe count the words that are actually in the list.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "minimakv/eval/niah.h"
#include "minimakv/model/tokenizer.h"

namespace minimakv::eval::detail {

// The noise haystack line of RULER's tasks (niah_single_1, vt).
inline constexpr std::string_view kNoiseLine =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

// Fisher-Yates on the example's own stream.
template <typename T>
void shuffle(std::vector<T>& v, SplitMix& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// vt: "VAR X = v", then hops lines "VAR Y = VAR X", hidden in order in the noise haystack; the answer is
// every variable of the chain that ends holding the queried value.
Example make_variable_tracking(const TaskSpec& t, const model::Tokenizer& tok, SplitMix& rng, int length,
                               int gen_budget);
// cwe: a numbered list where common_words words appear common_freq times each and as many others as fit
// rare_freq times each, shuffled; the answer is the common words. Short contexts lower common_freq (to no
// less than rare_freq + 2) so the common words fill at most half of the list.
Example make_common_words(const TaskSpec& t, const NiahData& data, const model::Tokenizer& tok, SplitMix& rng,
                          int length, int gen_budget);
// fwe: coded words (random letter strings) drawn with probability ~ 1 / rank^alpha; the answer is the
// top_words most frequent, redrawn until they are strictly more frequent than the next.
Example make_frequent_words(const TaskSpec& t, const model::Tokenizer& tok, SplitMix& rng, int length, int gen_budget);

}  // namespace minimakv::eval::detail
