#include "phrasing.h"

#include <fstream>
#include <stdexcept>
#include <vector>

#include "minimakv/eval/niah.h"

namespace minimakv::eval {

namespace detail {

std::string fill_frame(std::string_view frame, FrameVars vars) {
  std::string out;
  out.reserve(frame.size() + 64);
  for (size_t i = 0; i < frame.size();) {
    if (frame[i] != '{') {
      out += frame[i++];
      continue;
    }
    const size_t close = frame.find('}', i);
    if (close == std::string_view::npos)
      throw std::invalid_argument("phrasing part '" + std::string(frame) + "': unclosed '{'");
    const std::string_view name = frame.substr(i + 1, close - i - 1);
    bool found = false;
    for (const auto& [k, v] : vars)
      if (k == name) {
        out += v;
        found = true;
        break;
      }
    if (!found)
      throw std::invalid_argument("phrasing part '" + std::string(frame) + "': unknown placeholder {" +
                                  std::string(name) + "}");
    i = close + 1;
  }
  return out;
}

}  // namespace detail

namespace {

std::vector<std::string> read_parts(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path + " (run scripts/data/extract_corpus.py)");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  if (out.empty()) throw std::runtime_error(path + " is empty");
  return out;
}

// Fills every part with marker values: an unknown placeholder throws, a required one must show.
void check_parts(const std::string& path, const std::vector<std::string>& parts, detail::FrameVars vars,
                 std::initializer_list<std::string_view> required) {
  for (const auto& p : parts) {
    try {
      (void)detail::fill_frame(p, vars);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
    for (const auto r : required)
      if (p.find("{" + std::string(r) + "}") == std::string::npos)
        throw std::runtime_error(path + ": part '" + p + "' lacks {" + std::string(r) + "}");
  }
}

}  // namespace

PhrasingParts load_phrasing_parts(const std::string& dir, const std::string& side) {
  const auto path = [&](const char* cat) { return dir + "/" + side + "_" + cat + ".txt"; };
  PhrasingParts p;
  for (const auto& n : read_parts(path("nouns"))) {
    const size_t bar = n.find('|');
    if (bar == std::string::npos || bar == 0 || bar + 1 == n.size() || n.find('|', bar + 1) != std::string::npos)
      throw std::runtime_error(path("nouns") + ": noun '" + n + "' is not 'singular|plural'");
    p.nouns.emplace_back(n.substr(0, bar), n.substr(bar + 1));
  }
  p.verbs = read_parts(path("verbs"));
  p.needles = read_parts(path("needles"));
  p.questions = read_parts(path("questions"));
  p.prefixes = read_parts(path("prefixes"));
  p.intros = read_parts(path("intros"));
  const detail::FrameVars needle = {{"key", "k"}, {"value", "v"}, {"noun", "n"}, {"verb", "is"}};
  const detail::FrameVars asked = {{"query", "q"}, {"nq", "n"}, {"be", "is"}};
  check_parts(path("verbs"), p.verbs, {}, {});
  check_parts(path("needles"), p.needles, needle, {"key", "value"});
  check_parts(path("questions"), p.questions, asked, {"query"});
  check_parts(path("prefixes"), p.prefixes, asked, {});
  check_parts(path("intros"), p.intros, {}, {});
  return p;
}

}  // namespace minimakv::eval
