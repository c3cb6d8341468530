#include "command.h"

#include <algorithm>
#include <cmath>
#include <exception>

namespace minimakv::app {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace

Registration::Registration(Command c) {
  registry().push_back(std::move(c));
}

std::vector<Command> commands() {
  std::vector<Command> out = registry();
  std::stable_sort(out.begin(), out.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
  return out;
}

const CLI::Validator& finite() {
  static const CLI::Validator v(
      [](std::string& s) {
        try {
          size_t used = 0;
          const double x = std::stod(s, &used);
          if (used == s.size() && std::isfinite(x)) return std::string();
        } catch (const std::exception&) {
        }
        return std::string("must be a finite number, got '") + s + "'";
      },
      "FINITE");
  return v;
}

}  // namespace minimakv::app
