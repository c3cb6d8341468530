// libFuzzer target for the chat-template engine: any input is a template (parsed, then rendered over a
// small conversation with tight limits). It must render or fail with jinja::Error; a crash, a
// sanitizer report, another exception, a hang or output past the byte limit is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "minimakv/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minimakv::jinja;
  static const Value vars = from_json(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }}"},
          {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
          "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  Limits lim;
  lim.max_output_bytes = 1 << 16;
  lim.max_steps = 200'000;
  lim.max_range = 10'000;
  try {
    const Template t = Template::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    const std::string out = t.render(vars.dict(), lim);
    if (out.size() > lim.max_output_bytes) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
