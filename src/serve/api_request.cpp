#include "minimakv/serve/api_request.h"

#include <cmath>

namespace minimakv::serve {

namespace {

using J = nlohmann::ordered_json;

// JSON nested deeper than this is refused while parsing: the template engine and the response
// builders recurse over request values.
constexpr int kMaxJsonDepth = 64;

[[noreturn]] void bad(const std::string& message, const std::string& param = {}) {
  throw ApiError(400, "invalid_request_error", message, param);
}

[[noreturn]] void unsupported(const std::string& what, const std::string& param) {
  bad(what + " is not supported by this server", param);
}

J parse_body(std::string_view body) {
  if (body.empty()) bad("the request body is empty; send a JSON object");
  J j;
  try {
    j = J::parse(body, [](int depth, J::parse_event_t, J&) {
      if (depth > kMaxJsonDepth)
        throw ApiError(400, "invalid_request_error", "the request JSON nests deeper than 64 levels");
      return true;
    });
  } catch (const J::exception& e) {
    bad(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("the request body must be a JSON object");
  return j;
}

const J* field(const J& o, const char* k) {
  const auto it = o.find(k);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const J& o, const char* k, double lo, double hi) {
  const J* v = field(o, k);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(std::string("'") + k + "' must be a number", k);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", k);
  return x;
}

std::optional<int64_t> integer(const J& o, const char* k, int64_t lo, int64_t hi) {
  const J* v = field(o, k);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad(std::string("'") + k + "' is out of range", k);
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    bad(std::string("'") + k + "' must be an integer", k);
  }
  if (x < lo || x > hi)
    bad(std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", k);
  return x;
}

std::optional<bool> boolean(const J& o, const char* k) {
  const J* v = field(o, k);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(std::string("'") + k + "' must be true or false", k);
  return v->get<bool>();
}

std::optional<std::string> string(const J& o, const char* k) {
  const J* v = field(o, k);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(std::string("'") + k + "' must be a string", k);
  return v->get<std::string>();
}

std::vector<int32_t> token_ids(const J& v, const char* k) {
  if (!v.is_array()) bad(std::string("'") + k + "' must be an array of token ids", k);
  std::vector<int32_t> out;
  for (const auto& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad(std::string("'") + k + "' must hold non-negative integer token ids", k);
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

// Sampling and stopping, shared by both endpoints.
GenerationParams generation(const J& o, const RequestLimits& lim) {
  GenerationParams g;
  if (auto v = integer(o, "max_tokens", 0, 1 << 24)) g.max_tokens = static_cast<int>(*v);
  if (auto v = number(o, "temperature", 0.0, 2.0)) g.temperature = static_cast<float>(*v);
  if (auto v = number(o, "top_p", 0.0, 1.0)) {
    if (*v <= 0.0) bad("'top_p' must be in (0, 1]", "top_p");
    g.top_p = static_cast<float>(*v);
  }
  if (auto v = integer(o, "top_k", -1, 1 << 30)) g.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (auto v = number(o, "presence_penalty", -2.0, 2.0)) g.presence_penalty = static_cast<float>(*v);
  if (auto v = number(o, "frequency_penalty", -2.0, 2.0)) g.frequency_penalty = static_cast<float>(*v);
  if (auto v = integer(o, "seed", INT64_MIN, INT64_MAX)) g.seed = static_cast<uint64_t>(*v);
  if (auto v = integer(o, "n", 1, lim.max_n)) g.n = static_cast<int>(*v);
  if (auto v = integer(o, "best_of", 1, lim.max_n); v && *v != g.n) unsupported("'best_of' other than n", "best_of");
  if (const J* s = field(o, "stop")) {
    if (s->is_string()) {
      g.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > static_cast<size_t>(lim.max_stop_strings))
        bad("'stop' takes at most " + std::to_string(lim.max_stop_strings) + " strings", "stop");
      for (const auto& x : *s) {
        if (!x.is_string()) bad("'stop' must be a string or an array of strings", "stop");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& x : g.stop)
      if (x.empty()) bad("'stop' strings must not be empty", "stop");
  }
  if (const J* s = field(o, "stop_token_ids")) g.stop_token_ids = token_ids(*s, "stop_token_ids");
  if (auto v = boolean(o, "ignore_eos")) g.ignore_eos = *v;
  if (auto v = boolean(o, "include_stop_str_in_output")) g.include_stop_str_in_output = *v;
  if (auto v = boolean(o, "skip_special_tokens")) g.skip_special_tokens = *v;
  if (auto v = boolean(o, "stream")) g.stream = *v;
  if (const J* so = field(o, "stream_options")) {
    if (!so->is_object()) bad("'stream_options' must be an object", "stream_options");
    if (!g.stream) bad("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (auto v = boolean(*so, "include_usage")) g.include_usage = *v;
  }
  if (const J* lb = field(o, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
    unsupported("'logit_bias'", "logit_bias");
  if (const J* rf = field(o, "response_format")) {
    if (!rf->is_object() || rf->value("type", std::string()) != "text")
      unsupported("a response_format other than text", "response_format");
  }
  if (auto u = field(o, "user"); u && !u->is_string()) bad("'user' must be a string", "user");
  return g;
}

std::string model_of(const J& o) {
  return string(o, "model").value_or("");
}

// A chat message's content as the templates see it: a string (text parts joined by "\n"), or null.
J content_of(const J& m, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) return nullptr;
  if (it->is_string()) return *it;
  if (!it->is_array()) bad("'" + where + "' must be a string, an array of content parts or null", where);
  std::string text;
  bool first = true;
  for (const auto& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad("each part of '" + where + "' must be an object with a 'type'", where);
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad("this model reads text only; '" + where + "' has a part of type '" + type + "'", where);
    if (!part.contains("text") || !part["text"].is_string())
      bad("a text part of '" + where + "' needs a string 'text'", where);
    text += (first ? "" : "\n") + part["text"].get<std::string>();
    first = false;
  }
  return text;
}

}  // namespace

std::string ApiError::body() const {
  nlohmann::json e;
  e["message"] = what();
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = status;
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& lim) {
  const J o = parse_body(body);
  CompletionRequest r;
  r.model = model_of(o);
  const J* p = field(o, "prompt");
  if (!p) bad("'prompt' is required", "prompt");
  auto text_prompt = [&](const J& s) {
    const auto& t = s.get_ref<const std::string&>();
    if (t.empty()) bad("'prompt' must not be empty", "prompt");
    if (t.size() > lim.max_prompt_chars)
      bad("'prompt' is " + std::to_string(t.size()) + " bytes, more than the server's limit of " +
              std::to_string(lim.max_prompt_chars),
          "prompt");
    r.prompts.emplace_back(t);
  };
  if (p->is_string()) {
    text_prompt(*p);
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    r.prompts.emplace_back(token_ids(*p, "prompt"));
  } else if (p->is_array() && !p->empty()) {
    if (p->size() > static_cast<size_t>(lim.max_n))
      bad("'prompt' takes at most " + std::to_string(lim.max_n) + " prompts", "prompt");
    for (const auto& x : *p) {
      if (x.is_string())
        text_prompt(x);
      else if (x.is_array() && !x.empty())
        r.prompts.emplace_back(token_ids(x, "prompt"));
      else
        bad("'prompt' must be a string, an array of token ids, or an array of those", "prompt");
    }
  } else {
    bad("'prompt' must be a non-empty string, an array of token ids, or an array of those", "prompt");
  }
  r.gen = generation(o, lim);
  if (auto v = boolean(o, "echo")) r.echo = *v;
  if (const J* lp = field(o, "logprobs")) {
    if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > 20)
      bad("'logprobs' must be an integer in [0, 20]", "logprobs");
    r.gen.logprobs = static_cast<int>(lp->get<int64_t>());
  }
  if (r.echo && r.gen.logprobs >= 0) unsupported("'echo' together with 'logprobs' (prompt log-probabilities)", "echo");
  if (auto s = string(o, "suffix"); s && !s->empty()) unsupported("'suffix'", "suffix");
  if (r.prompts.size() * static_cast<size_t>(r.gen.n) > static_cast<size_t>(lim.max_n))
    bad("prompts x n must be at most " + std::to_string(lim.max_n), "n");
  return r;
}

ChatRequest parse_chat_request(std::string_view body, const RequestLimits& lim) {
  const J o = parse_body(body);
  ChatRequest r;
  r.model = model_of(o);
  const J* ms = field(o, "messages");
  if (!ms || !ms->is_array() || ms->empty()) bad("'messages' must be a non-empty array", "messages");
  if (ms->size() > lim.max_messages)
    bad("'messages' holds more than " + std::to_string(lim.max_messages) + " messages", "messages");
  r.messages = J::array();
  size_t chars = 0;
  for (size_t i = 0; i < ms->size(); ++i) {
    const J& m = (*ms)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad("'" + where + "' must be an object", where);
    const auto role = string(m, "role");
    if (!role) bad("'" + where + ".role' is required", where + ".role");
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool")
      bad("'" + where + ".role' must be system, developer, user, assistant or tool, not '" + *role + "'",
          where + ".role");
    J out = m;
    out["content"] = content_of(m, i);
    if (out["content"].is_string()) chars += out["content"].get_ref<const std::string&>().size();
    if (out["content"].is_null() && *role != "assistant")
      bad("'" + where + ".content' is required for role " + *role, where + ".content");
    for (const char* k : {"name", "tool_call_id", "reasoning_content"})
      if (m.contains(k) && !m[k].is_null() && !m[k].is_string())
        bad("'" + where + "." + k + "' must be a string", where + "." + k);
    if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].is_array())
      bad("'" + where + ".tool_calls' must be an array", where + ".tool_calls");
    r.messages.push_back(std::move(out));
  }
  if (chars > lim.max_prompt_chars)
    bad("the messages hold " + std::to_string(chars) + " bytes of text, more than the server's limit of " +
            std::to_string(lim.max_prompt_chars),
        "messages");
  if (const J* t = field(o, "tools")) {
    if (!t->is_array()) bad("'tools' must be an array", "tools");
    for (const auto& x : *t)
      if (!x.is_object()) bad("each of 'tools' must be an object", "tools");
    r.tools = *t;
  }
  if (const J* tc = field(o, "tool_choice")) {
    if (!tc->is_string() || (tc->get<std::string>() != "none" && tc->get<std::string>() != "auto"))
      unsupported("a tool_choice other than \"none\" or \"auto\" (constrained decoding)", "tool_choice");
  }
  if (field(o, "functions") || field(o, "function_call"))
    unsupported("the deprecated 'functions' API; use 'tools'", "functions");
  if (const J* k = field(o, "chat_template_kwargs")) {
    if (!k->is_object()) bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = *k;
  }
  if (auto v = boolean(o, "add_generation_prompt")) r.add_generation_prompt = *v;
  r.gen = generation(o, lim);
  if (auto v = integer(o, "max_completion_tokens", 0, 1 << 24)) r.gen.max_tokens = static_cast<int>(*v);
  const bool lp = boolean(o, "logprobs").value_or(false);
  const auto top = integer(o, "top_logprobs", 0, 20);
  if (top && !lp) bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  r.gen.logprobs = lp ? static_cast<int>(top.value_or(0)) : -1;
  return r;
}

}  // namespace minimakv::serve
