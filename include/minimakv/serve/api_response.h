// OpenAI-compatible response bodies and stream chunks, for /v1/completions and /v1/chat/completions.
//
// Owns: the JSON shapes (OpenAI's field names and nesting, so the official client parses them):
// completion and chat objects, their streaming chunks, the usage block, log-probabilities in each
// endpoint's format, and the model list. Pure functions; strings are valid UTF-8 on the way in.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace minimakv::serve {

// One generated token's log-probability, as text.
struct TokenInfo {
  std::string text;  // the token's own text (U+FFFD for a partial character)
  std::string raw;   // the token's bytes
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first, texts and raw bytes alike
  std::vector<std::string> top_raw;
  size_t text_offset = 0;  // bytes of the choice's text before this token
};

struct Usage {
  size_t prompt_tokens = 0, completion_tokens = 0;
};

nlohmann::json usage_json(const Usage& u);
// /v1/completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
nlohmann::json completion_logprobs(const std::vector<TokenInfo>& tokens);
// /v1/chat/completions: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
nlohmann::json chat_logprobs(const std::vector<TokenInfo>& tokens);

// One choice of a completion (text) or chat (message) response, or a chunk's delta for one choice.
nlohmann::json completion_choice(size_t index, const std::string& text, const nlohmann::json& logprobs,
                                 const std::optional<std::string>& finish_reason);
nlohmann::json chat_choice(size_t index, const std::string& content, const nlohmann::json& logprobs,
                           const std::optional<std::string>& finish_reason);
nlohmann::json chat_delta(size_t index, const std::optional<std::string>& role,
                          const std::optional<std::string>& content, const nlohmann::json& logprobs,
                          const std::optional<std::string>& finish_reason);

// The envelope: {"id", "object", "created", "model", "choices"[, "usage"]}.
nlohmann::json response_object(const std::string& id, const char* object, int64_t created, const std::string& model,
                               nlohmann::json choices, const std::optional<Usage>& usage);

nlohmann::json model_list(const std::string& model, int64_t created, size_t max_model_len);

std::string sse(const nlohmann::json& chunk);  // "data: {...}\n\n"
std::string dump(const nlohmann::json& j);     // compact, invalid UTF-8 replaced
std::string new_id(const char* prefix);        // prefix + 24 random hex digits

}  // namespace minimakv::serve
