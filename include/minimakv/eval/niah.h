// RULER's synthetic tasks, generated in C++ from the held-out essay and evaluation word lists.
//
// Owns: the eight RULER NIAH task definitions and RULER's variable tracking (vt), common words (cwe) and
// frequent words (fwe) extraction, the same eight NIAH shapes phrased from held-out parts (heldout_*: needles,
// questions and answer prefixes the model never trained on), the deterministic example generator and the
// string_match_all scorer. Invariants: the
// same (seed, task, length, index) gives a byte-identical prompt on every machine (own SplitMix64 stream, no std
// distributions); a prompt plus its generation budget never exceeds the target length in model tokens; needle depths
// spread over the context (a low-discrepancy sequence over example indices). The data (data/corpus/essay.txt and
// data/words/eval_*.txt, data/phrasings/eval_*.txt) comes from scripts/data/extract_corpus.py; the model never
// trained on it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/model/tokenizer.h"

namespace minimakv::eval {

enum class Haystack { kNoise, kEssay, kNeedles };
enum class ValueKind { kNumbers, kWords, kUuids };
// Retrieval (the eight NIAH tasks), multi-hop tracing (vt) and aggregation (cwe, fwe).
enum class TaskFamily { kNiah, kVariableTracking, kCommonWords, kFrequentWords };
// How a retrieval task is worded: RULER's template, or composed from the held-out phrasing parts.
enum class Phrasing { kRuler, kHeldOut };

// RULER's defaults for the tracing and aggregation tasks.
struct AggregationSpec {
  int chains = 1, hops = 4;                                // vt: chains of hops + 1 variables each
  int common_words = 10, common_freq = 30, rare_freq = 3;  // cwe
  double zipf_alpha = 2.0;                                 // fwe: word frequencies ~ 1 / rank^alpha
  int top_words = 3;                                       // fwe: how many of the most frequent to name
};

struct TaskSpec {
  std::string name;
  Haystack haystack;
  ValueKind key_kind, value_kind;
  int keys, values_per_key, queries;
  TaskFamily family = TaskFamily::kNiah;
  AggregationSpec aggregation{};
  Phrasing phrasing = Phrasing::kRuler;
};

// niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery (RULER's definitions): the
// default task set of the evaluation.
const std::vector<TaskSpec>& ruler_niah_tasks();
// Those eight, then variable tracking (vt), common words (cwe) and frequent words (fwe) extraction.
const std::vector<TaskSpec>& ruler_tasks();
// The eight NIAH shapes worded from the held-out phrasing parts: heldout_single_1 .. heldout_multiquery.
const std::vector<TaskSpec>& heldout_phrasing_tasks();
// ruler_tasks(), then heldout_phrasing_tasks().
const std::vector<TaskSpec>& all_tasks();
// Any of all_tasks(); throws std::invalid_argument naming the valid tasks.
const TaskSpec& task_by_name(std::string_view name);

// One side of the retrieval prompts' parts (scripts/data/phrasing_parts.py). Needles use {key}, {value},
// {noun} (singular) and {verb}; questions and prefixes {query}, {nq} (the noun, plural for several values)
// and {be}. Nouns are (singular, plural).
struct PhrasingParts {
  std::vector<std::pair<std::string, std::string>> nouns;
  std::vector<std::string> verbs, needles, questions, prefixes, intros;
  bool empty() const { return needles.empty(); }
};
// Reads <dir>/<side>_{nouns,verbs,needles,questions,prefixes,intros}.txt. Throws std::runtime_error naming
// the file when one is missing or empty, and the part when it names a placeholder its category does not
// have, a needle lacks {key} or {value}, a question lacks {query}, or a noun is not "singular|plural".
PhrasingParts load_phrasing_parts(const std::string& dir, const std::string& side);

struct NiahData {
  std::vector<std::string> essay_sentences;
  std::vector<std::string> adjectives, nouns;
  PhrasingParts heldout_phrasing;  // empty when <dir>/phrasings/ is missing: then heldout_* tasks throw
};
// Loads <dir>/corpus/essay.txt, <dir>/words/eval_{adjectives,nouns}.txt and, when present, the held-out
// phrasing parts <dir>/phrasings/eval_*.txt; a clear error when the essay or words are missing.
NiahData load_niah_data(const std::string& data_dir);

// The first `tokens` model tokens of held-out essay text from sentence `first_sentence` on (wrapping
// around the essay); throws std::runtime_error when the text is too short.
std::vector<int32_t> essay_window(const NiahData& data, const model::Tokenizer& tok, size_t first_sentence, int tokens);

struct Example {
  std::string task;
  int length = 0;  // target in model tokens: prompt + generation budget
  int index = 0;
  std::string prompt;                 // ends with the answer prefix
  std::vector<std::string> expected;  // the values the answer must contain
  std::vector<double> depths;         // of the needles, as a fraction of the context
  std::vector<int32_t> ids;           // the prompt's tokens
};

class NiahGenerator {
 public:
  NiahGenerator(const NiahData& data, const model::Tokenizer& tok, uint64_t seed);
  // gen_budget tokens are reserved for the answer. Throws when the length cannot hold the template.
  Example make(const TaskSpec& task, int length, int gen_budget, int index) const;

 private:
  const NiahData& data_;
  const model::Tokenizer& tok_;
  uint64_t seed_;
};

// RULER's string_match_all: the fraction of expected values contained in the lowercased output.
double string_match_all(std::string_view output, const std::vector<std::string>& expected);

// Deterministic 64-bit stream (SplitMix64) with unbiased bounded draws.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0
  double unit();               // uniform in [0, 1)

 private:
  uint64_t s_;
};

}  // namespace minimakv::eval
