// Request traces for `minimakv replay` and `minimakv make-trace`: one JSON object per line.
//
// Owns: the trace format. A line is {"arrival": seconds >= 0, "output_tokens": n >= 0, and either
// "prompt": "text" or "prompt_tokens": n >= 1 with optional "source" (a text file; default the
// essay corpus) and "offset" (first token of the cut; the text's tokens repeat cyclically)}.
// Lines are sorted by arrival when read; a malformed line is an error naming its number and field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace minimakv::app {

struct TraceEntry {
  double arrival = 0;
  std::optional<std::string> prompt;  // text, or
  size_t prompt_tokens = 0;           // a cut of `source`
  std::string source;                 // empty: the essay corpus
  size_t offset = 0;
  int output_tokens = 0;
};

std::vector<TraceEntry> read_trace(const std::string& path);

struct TraceShape {
  size_t requests = 16;
  double rate = 0;  // requests per second, Poisson; 0: all arrive at once
  size_t prompt_min = 512, prompt_max = 512;
  int output_min = 32, output_max = 32;
  uint64_t seed = 0;
  std::string source;
};

// Poisson arrivals (exponential gaps), lengths uniform in [min, max], offsets uniform in the first
// million tokens: deterministic for a seed.
std::vector<TraceEntry> make_trace(const TraceShape& shape);
std::string to_jsonl(const std::vector<TraceEntry>& trace);

}  // namespace minimakv::app
