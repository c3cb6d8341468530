#include "minimakv/serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "minimakv/serve/api_request.h"

namespace minimakv::serve {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("chat template: cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string token_string(const nlohmann::json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, std::string bos, std::string eos,
                                       const std::string& name) {
  ChatTemplate t;
  try {
    t.tmpl_ = jinja::Template::parse(source);
  } catch (const jinja::Error& e) {
    throw std::invalid_argument("chat template " + name + ": line " + std::to_string(e.line) + ": " + e.what());
  }
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  t.origin_ = name;
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& path) {
  const std::string text = read_file(path);
  if (std::filesystem::path(path).extension() != ".json") return from_source(text, "", "", path);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("chat template: " + path + " is not valid JSON: " + e.what());
  }
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) throw std::invalid_argument("chat template: " + path + " has no chat_template");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const auto& e : *it)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        source = e["template"].get<std::string>();
    if (source.empty()) throw std::invalid_argument("chat template: " + path + " lists no \"default\" template");
  } else {
    throw std::invalid_argument("chat template: chat_template in " + path +
                                " must be a string or a list of named templates");
  }
  return from_source(source, token_string(cfg, "bos_token"), token_string(cfg, "eos_token"), path);
}

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("chat template: " + path + " is not valid JSON: " + e.what());
  }
  if (!cfg.contains("chat_template") || cfg["chat_template"].is_null()) return std::nullopt;
  return load(path);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const {
  jinja::Dict vars;
  for (const auto& [k, v] : kwargs.items()) vars.set(jinja::Value(k), jinja::from_json(v));
  vars.set(jinja::Value("messages"), jinja::from_json(messages));
  if (!tools.is_null()) vars.set(jinja::Value("tools"), jinja::from_json(tools));
  vars.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  vars.set(jinja::Value("bos_token"), jinja::Value(bos_));
  vars.set(jinja::Value("eos_token"), jinja::Value(eos_));
  try {
    return tmpl_.render(vars);
  } catch (const jinja::Error& e) {
    throw ApiError(400, "invalid_request_error",
                   "the chat template refused the conversation (" + e.kind + "): " + e.what(), "messages");
  }
}

}  // namespace minimakv::serve
