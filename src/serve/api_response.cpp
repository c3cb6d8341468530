#include "minimakv/serve/api_response.h"

#include <mutex>
#include <random>

namespace minimakv::serve {

namespace {

using J = nlohmann::json;

J bytes_of(const std::string& raw) {
  J b = J::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string dump(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

std::string sse(const J& chunk) {
  return "data: " + dump(chunk) + "\n\n";
}

std::string new_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(mu);
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

J usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

J completion_logprobs(const std::vector<TokenInfo>& tokens) {
  J out = {{"tokens", J::array()},
           {"token_logprobs", J::array()},
           {"top_logprobs", J::array()},
           {"text_offset", J::array()}};
  for (const auto& t : tokens) {
    out["tokens"].push_back(t.text);
    out["token_logprobs"].push_back(t.logprob);
    J top = J::object();
    for (const auto& [text, lp] : t.top)
      if (!top.contains(text)) top[text] = lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(t.text_offset);
  }
  return out;
}

J chat_logprobs(const std::vector<TokenInfo>& tokens) {
  J content = J::array();
  for (const auto& t : tokens) {
    J top = J::array();
    for (size_t i = 0; i < t.top.size(); ++i)
      top.push_back({{"token", t.top[i].first},
                     {"logprob", t.top[i].second},
                     {"bytes", bytes_of(i < t.top_raw.size() ? t.top_raw[i] : t.top[i].first)}});
    content.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.raw)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

J completion_choice(size_t index, const std::string& text, const J& logprobs,
                    const std::optional<std::string>& finish) {
  return {
      {"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish ? J(*finish) : J(nullptr)}};
}

J chat_choice(size_t index, const std::string& content, const J& logprobs, const std::optional<std::string>& finish) {
  return {{"index", index},
          {"message", {{"role", "assistant"}, {"content", content}}},
          {"logprobs", logprobs},
          {"finish_reason", finish ? J(*finish) : J(nullptr)}};
}

J chat_delta(size_t index, const std::optional<std::string>& role, const std::optional<std::string>& content,
             const J& logprobs, const std::optional<std::string>& finish) {
  J delta = J::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  return {
      {"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish ? J(*finish) : J(nullptr)}};
}

J response_object(const std::string& id, const char* object, int64_t created, const std::string& model, J choices,
                  const std::optional<Usage>& usage) {
  J out = {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
  if (usage) out["usage"] = usage_json(*usage);
  return out;
}

J model_list(const std::string& model, int64_t created, size_t max_model_len) {
  return {{"object", "list"},
          {"data", J::array({{{"id", model},
                              {"object", "model"},
                              {"created", created},
                              {"owned_by", "minimakv"},
                              {"max_model_len", max_model_len}}})}};
}

}  // namespace minimakv::serve
