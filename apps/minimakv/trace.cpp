#include "trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

namespace minimakv::app {

std::vector<TraceEntry> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("trace: cannot read " + path);
  std::vector<TraceEntry> out;
  std::string line;
  for (size_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(no) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(where + "not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw std::invalid_argument(where + "a line must be a JSON object");
    auto number = [&](const char* key, double lo, double hi) {
      if (!j.contains(key) || !j[key].is_number())
        throw std::invalid_argument(where + "'" + key + "' must be a number");
      const double v = j[key].get<double>();
      if (!std::isfinite(v) || v < lo || v > hi)
        throw std::invalid_argument(where + "'" + key + "' must be in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
      return v;
    };
    auto integer = [&](const char* key, double lo, double hi) {
      const double v = number(key, lo, hi);
      if (v != std::floor(v)) throw std::invalid_argument(where + "'" + key + "' must be an integer");
      return v;
    };
    TraceEntry e;
    e.arrival = number("arrival", 0, 1e7);
    e.output_tokens = static_cast<int>(integer("output_tokens", 0, 1 << 20));
    const bool text = j.contains("prompt"), cut = j.contains("prompt_tokens");
    if (text == cut) throw std::invalid_argument(where + "give exactly one of 'prompt' and 'prompt_tokens'");
    if (text) {
      if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
        throw std::invalid_argument(where + "'prompt' must be a non-empty string");
      e.prompt = j["prompt"].get<std::string>();
    } else {
      e.prompt_tokens = static_cast<size_t>(integer("prompt_tokens", 1, 1 << 24));
      if (j.contains("offset")) e.offset = static_cast<size_t>(integer("offset", 0, 1e12));
      if (j.contains("source")) {
        if (!j["source"].is_string()) throw std::invalid_argument(where + "'source' must be a string");
        e.source = j["source"].get<std::string>();
      }
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) throw std::invalid_argument("trace: " + path + " holds no request");
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceEntry& a, const TraceEntry& b) { return a.arrival < b.arrival; });
  return out;
}

std::vector<TraceEntry> make_trace(const TraceShape& s) {
  if (s.prompt_min < 1 || s.prompt_min > s.prompt_max)
    throw std::invalid_argument("make-trace: bad prompt length range");
  if (s.output_min < 0 || s.output_min > s.output_max)
    throw std::invalid_argument("make-trace: bad output length range");
  if (!std::isfinite(s.rate) || s.rate < 0) throw std::invalid_argument("make-trace: the rate must be >= 0");
  std::mt19937_64 rng(s.seed);
  std::exponential_distribution<double> gap(s.rate > 0 ? s.rate : 1.0);
  std::uniform_int_distribution<size_t> plen(s.prompt_min, s.prompt_max), offset(0, 1000000);
  std::uniform_int_distribution<int> olen(s.output_min, s.output_max);
  std::vector<TraceEntry> out;
  double t = 0;
  for (size_t i = 0; i < s.requests; ++i) {
    TraceEntry e;
    if (s.rate > 0 && i > 0) t += gap(rng);
    e.arrival = t;
    e.prompt_tokens = plen(rng);
    e.output_tokens = olen(rng);
    e.offset = offset(rng);
    e.source = s.source;
    out.push_back(e);
  }
  return out;
}

std::string to_jsonl(const std::vector<TraceEntry>& trace) {
  std::string out;
  for (const auto& e : trace) {
    nlohmann::json j;
    j["arrival"] = std::round(e.arrival * 1e6) / 1e6;
    if (e.prompt) {
      j["prompt"] = *e.prompt;
    } else {
      j["prompt_tokens"] = e.prompt_tokens;
      j["offset"] = e.offset;
      if (!e.source.empty()) j["source"] = e.source;
    }
    j["output_tokens"] = e.output_tokens;
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace minimakv::app
