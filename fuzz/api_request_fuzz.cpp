// libFuzzer target for the server's request parsers: any body must either parse into a request within
// the limits or be refused with ApiError (a 4xx status, a message, an error type). A crash, a sanitizer
// report, any other exception or a hang is a bug. The first byte picks the endpoint (even:
// /v1/completions, odd: /v1/chat/completions).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "minimakv/serve/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minimakv::serve;
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  RequestLimits lim;
  lim.max_prompt_chars = 4096;
  try {
    if (data[0] & 1) {
      const ChatRequest r = parse_chat_request(body, lim);
      if (r.messages.empty() || !r.messages.is_array() || r.gen.n < 1 || r.gen.n > lim.max_n) __builtin_trap();
      for (const auto& m : r.messages)
        if (!m["content"].is_null() && !m["content"].is_string()) __builtin_trap();
    } else {
      const CompletionRequest r = parse_completion_request(body, lim);
      if (r.prompts.empty() || r.prompts.size() * static_cast<size_t>(r.gen.n) > static_cast<size_t>(lim.max_n))
        __builtin_trap();
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 499 || e.type.empty() || std::string_view(e.what()).empty()) __builtin_trap();
    (void)e.body();
  }
  return 0;
}
