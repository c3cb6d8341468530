// The architectures the engine runs, one source file each. A new one adds its file and a line to all().
#pragma once

#include <array>

#include "minimakv/engine/architecture.h"

namespace minimakv::engine::arch {

const Architecture& qwen3();  // qwen3.cpp
const Architecture& llama();  // llama.cpp

inline std::array<const Architecture*, 2> all() {
  return {&qwen3(), &llama()};
}

}  // namespace minimakv::engine::arch
