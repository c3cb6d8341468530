// The identity of a model directory's contents, so that runs made on different machines (the same
// files under different paths) can be recognised as runs of one model, and runs of different files
// under one path cannot.
//
// Owns: which files make a model's identity and how they are hashed. XXH3-64 over, in this order,
// config.json, kv_profile.json (it decides the default minima arm), tokenizer.json and
// tokenizer_config.json (they decide the prompts), and every *.safetensors file by name; each file
// present contributes its name, its size and its bytes, an absent optional file contributes its name
// and a marker. The directory's own path never enters. Not a cryptographic hash: it tells runs apart,
// it does not authenticate files.
#pragma once

#include <string>

namespace minimakv::model {

// 16 lowercase hex digits. Throws ConfigError when the directory or config.json cannot be read.
std::string checkpoint_digest(const std::string& dir);

}  // namespace minimakv::model
