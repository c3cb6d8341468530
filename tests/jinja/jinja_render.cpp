// Test tool: renders templates for the parity test against Python's jinja2 (jinja_parity_test.py).
// Reads JSON lines {"template": "...", "vars": {...}} on stdin and writes, per line, {"output": "..."} or
// {"error": "<kind>", "message": "..."}; a line that is not such an object is an error of the tool.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "minimakv/jinja/template.h"

int main() {
  using nlohmann::ordered_json;
  std::string line;
  while (std::getline(std::cin, line)) {
    const ordered_json in = ordered_json::parse(line);
    ordered_json out;
    try {
      const auto t = minimakv::jinja::Template::parse(in.at("template").get<std::string>());
      const minimakv::jinja::Value vars = minimakv::jinja::from_json(in.value("vars", ordered_json::object()));
      out["output"] = t.render(vars.dict());
    } catch (const minimakv::jinja::Error& e) {
      out["error"] = e.kind;
      out["message"] = e.what();
    }
    std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << '\n';
  }
  return 0;
}
