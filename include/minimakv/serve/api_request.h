// OpenAI-compatible request bodies: /v1/completions and /v1/chat/completions.
//
// Owns: parsing a request body into what the server runs, and every refusal of a bad one. Parsing is
// a pure function of the body and the server's limits (so it is fuzzed): a body that is not JSON, a
// known field of the wrong type or out of range, an unsupported feature asked for, or a body over a
// limit throws ApiError (status 4xx, OpenAI's error type, the offending field in `param`); nothing
// else is thrown. Unknown fields are ignored, as OpenAI's and vLLM's servers do.
// Defaults follow OpenAI: temperature 1, top_p 1, n 1, max_tokens 16 for completions and "the rest
// of the context" for chat. vLLM's extensions are accepted: top_k, ignore_eos, stop_token_ids,
// include_stop_str_in_output, skip_special_tokens, chat_template_kwargs, add_generation_prompt.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace minimakv::serve {

// An error answer: HTTP status, OpenAI's error type ("invalid_request_error", "authentication_error",
// "not_found_error", "server_error"), a message and the request field it concerns (may be empty).
struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_type, const std::string& message, std::string field = {})
      : std::runtime_error(message), status(http_status), type(std::move(error_type)), param(std::move(field)) {}
  int status;
  std::string type;
  std::string param;
  std::string body() const;  // {"error": {"message", "type", "param", "code"}}
};

struct RequestLimits {
  size_t max_prompt_chars = 4u << 20;  // a text prompt longer than this is refused unread
  int max_n = 16;                      // choices per request
  int max_stop_strings = 16;
  size_t max_messages = 4096;
};

// What both endpoints share: sampling and how the output ends.
struct GenerationParams {
  std::optional<int> max_tokens;  // unset: the endpoint's default
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false, include_stop_str_in_output = false, skip_special_tokens = true;
  int logprobs = -1;  // alternatives per token; -1: no log-probabilities
  bool stream = false, include_usage = false;
};

using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  std::string model;  // empty: the served model
  std::vector<Prompt> prompts;
  bool echo = false;
  GenerationParams gen;
};

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;  // validated: roles, contents as strings (text parts joined by "\n")
  nlohmann::ordered_json tools;     // null when absent
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  GenerationParams gen;
};

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits = {});
ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits = {});

}  // namespace minimakv::serve
