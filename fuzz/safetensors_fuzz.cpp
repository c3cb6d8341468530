// libFuzzer target for the checkpoint parsers: any input must either parse into a header whose every
// tensor lies inside the file, or be rejected with CheckpointError. A crash, a sanitizer report, any
// other exception or a hang is a bug. The first input byte selects the parser (even: a safetensors file
// image, odd: model.safetensors.index.json text), so one corpus covers both.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "minimakv/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minimakv::model;
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  try {
    if (data[0] & 1) {
      const auto map =
          parse_checkpoint_index(std::string_view(reinterpret_cast<const char*>(rest.data()), rest.size()), "fuzz");
      for (const auto& [tensor, shard] : map)
        if (shard.empty() || shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
          __builtin_trap();
    } else {
      const auto h = parse_safetensors(rest, "fuzz");
      if (h.data_offset > rest.size()) __builtin_trap();
      size_t expect = 0;
      for (const auto& t : h.tensors) {
        if (t.begin != expect || t.end < t.begin || h.data_offset + t.end > rest.size()) __builtin_trap();
        if (t.end - t.begin != t.numel() * dtype_size(t.dtype)) __builtin_trap();
        expect = t.end;
      }
    }
  } catch (const CheckpointError&) {
    // the documented way to reject a malformed input
  }
  return 0;
}
