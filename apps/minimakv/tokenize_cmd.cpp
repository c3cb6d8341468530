#include "tokenize_cmd.h"

#include <fmt/core.h>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "command.h"
#include "default_paths.h"
#include "minimakv/model/tokenizer.h"

namespace minimakv::app {

int run_tokenize(const std::string& model_dir, int reps) {
  const auto tok = model::Tokenizer::load(model_dir + "/tokenizer.json");
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::json texts;
  try {
    texts = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("tokenize: stdin is not valid JSON: ") + e.what());
  }
  if (!texts.is_array()) throw std::invalid_argument("tokenize: stdin must hold a JSON array of strings");
  nlohmann::json out;
  out["ids"] = nlohmann::json::array();
  out["roundtrip"] = nlohmann::json::array();
  for (const auto& t : texts) {
    if (!t.is_string()) throw std::invalid_argument("tokenize: stdin must hold a JSON array of strings");
    const std::string s = t.get<std::string>();
    const auto ids = tok.encode(s);
    out["ids"].push_back(ids);
    out["roundtrip"].push_back(tok.decode(ids) == s);
    if (reps > 0) {  // median wall time of `reps` further encodings of this string
      std::vector<double> secs;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto again = tok.encode(s);
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (again != ids) throw std::logic_error("tokenize: encoding is not deterministic");
      }
      std::sort(secs.begin(), secs.end());
      out["seconds"].push_back(secs[secs.size() / 2]);
    }
  }
  fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

namespace {
const Registration kCommand({"tokenize", "encode a JSON array of strings from stdin (tokenizer parity)", 50,
                             [](CLI::App& sub) {
                               auto model = std::make_shared<std::string>(default_model_dir());
                               auto reps = std::make_shared<int>(0);
                               sub.add_option("--model", *model, "model directory holding tokenizer.json");
                               sub.add_option("--reps", *reps,
                                              "also time this many encodings of each string (median seconds)")
                                   ->check(CLI::Range(0, 1000));
                               return std::function<int()>([=] { return run_tokenize(*model, *reps); });
                             }});
}  // namespace

}  // namespace minimakv::app
