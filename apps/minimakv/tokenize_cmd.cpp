#include "tokenize_cmd.h"

#include <fmt/core.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "minimakv/model/tokenizer.h"

namespace minimakv::app {

int run_tokenize(const std::string& model_dir) {
  const auto tok = model::Tokenizer::load(model_dir + "/tokenizer.json");
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const auto texts = nlohmann::json::parse(input);
  if (!texts.is_array()) throw std::invalid_argument("tokenize: stdin must hold a JSON array of strings");
  nlohmann::json out;
  out["ids"] = nlohmann::json::array();
  out["roundtrip"] = nlohmann::json::array();
  for (const auto& t : texts) {
    const std::string s = t.get<std::string>();
    const auto ids = tok.encode(s);
    out["ids"].push_back(ids);
    out["roundtrip"].push_back(tok.decode(ids) == s);
  }
  fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

}  // namespace minimakv::app
