// The minimakv command line: one binary, one subcommand per job. Each command registers itself
// (command.h) with its options; main adds them all, parses, and runs the one given.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "command.h"

int main(int argc, char** argv) {
  CLI::App app{"minimakv: a paged KV cache with FP8 and TQ3 pages for long-context LLM inference"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, std::function<int()>>> jobs;
  for (const auto& c : minimakv::app::commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    jobs.emplace_back(sub, c.declare(*sub));
  }
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, job] : jobs)
      if (sub->parsed()) return job();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minimakv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
