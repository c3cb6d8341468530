// A model's chat template, as transformers applies it: messages (and tools) rendered to the prompt text.
//
// Owns: the parsed template and the special-token strings it is rendered with. Loaded from a
// tokenizer_config.json ("chat_template" as a string, or a list of named templates of which
// "default" is taken; bos_token / eos_token as strings or {"content": ...}), or from a template file.
// render() passes messages, tools (when given), add_generation_prompt, bos_token and eos_token, and
// the request's chat_template_kwargs (which cannot replace those). A template's own refusal
// (raise_exception) and any render error become ApiError 400 with the template's message: they come
// from the conversation a client sent. Thread-safe: render() only reads.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "minimakv/jinja/template.h"

namespace minimakv::serve {

class ChatTemplate {
 public:
  // The template in `path` (a tokenizer_config.json or a plain template file). Throws
  // std::invalid_argument naming the file when it cannot be read or parsed.
  static ChatTemplate load(const std::string& path);
  // tokenizer_config.json of `dir`, if it exists and holds a chat_template.
  static std::optional<ChatTemplate> from_model_dir(const std::string& dir);
  static ChatTemplate from_source(const std::string& source, std::string bos, std::string eos, const std::string& name);

  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const;
  const std::string& origin() const { return origin_; }

 private:
  jinja::Template tmpl_;
  std::string bos_, eos_, origin_;
};

}  // namespace minimakv::serve
