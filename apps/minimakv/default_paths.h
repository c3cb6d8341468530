// Where the CLI finds the embedded model and the evaluation data when no --model / --data is given.
//
// Owns: the search order, so that `minimakv eval` works from any working directory, not only the
// repository root. For each candidate folder name ("models/minima-qwen3-23m", "data"), in order:
// $MINIMAKV_HOME/<name>; the folders above the executable, nearest first, each as <dir>/<name> (a build
// tree inside the repository) and <dir>/share/minimakv/<name> (an installed prefix: bin/minimakv with
// share/minimakv beside it); finally <name> relative to the working directory, which is also what is
// returned when nothing is found, so the error names the path a user would expect.
#pragma once

#include <string>

namespace minimakv::app {

std::string default_model_dir();  // holds config.json
std::string default_data_dir();   // holds corpus/essay.txt

}  // namespace minimakv::app
