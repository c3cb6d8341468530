// The subcommands of the minimakv CLI.
//
// Owns: the registry. Each command's file declares its own options on a CLI11 subcommand and registers
// itself with a static Registration (name, one line of help, its place in --help); main() adds every
// registered command, parses, and runs the one given. The declare function returns the job to run once
// the command line has been parsed (the options it bound live in that job's closure).
// Invariant: registration happens during static initialisation of the executable's own objects, before
// main(); the registry is a function-local static, so the order of those initialisers does not matter.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace minimakv::app {

struct Command {
  std::string name, help;
  int order = 0;  // position in --help, ascending
  std::function<std::function<int()>(CLI::App& sub)> declare;
};

// Every registered command, in `order`.
std::vector<Command> commands();

struct Registration {
  explicit Registration(Command c);
};

// CLI::Range lets NaN through (every comparison with NaN is false): real-valued options are checked
// finite first, so "--temperature nan" is an error, not a silently degenerate sampler.
const CLI::Validator& finite();

}  // namespace minimakv::app
