#include "default_paths.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

namespace minimakv::app {

namespace {

namespace fs = std::filesystem;

// The first candidate folder holding `marker`, else `name` relative to the working directory.
std::string find_folder(const std::string& name, const std::string& marker) {
  std::vector<fs::path> candidates;
  if (const char* home = std::getenv("MINIMAKV_HOME"); home && *home) candidates.push_back(fs::path(home) / name);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 6 && !dir.empty(); ++up) {
      candidates.push_back(dir / name);
      candidates.push_back(dir / "share" / "minimakv" / name);
      if (dir == dir.root_path()) break;
      dir = dir.parent_path();
    }
  }
  for (const auto& c : candidates)
    if (fs::exists(c / marker, ec)) return c.lexically_normal().string();
  return name;
}

}  // namespace

std::string default_model_dir() {
  return find_folder("models/minima-qwen3-23m", "config.json");
}

std::string default_data_dir() {
  return find_folder("data", "corpus/essay.txt");
}

}  // namespace minimakv::app
