// Template source to tokens, with Jinja2's whitespace rules.
//
// Owns: tokenisation. Newlines are normalised to "\n" and one trailing newline dropped (Jinja2's
// keep_trailing_newline=False); `{%- -%}` strip whitespace around a tag; with lstrip_blocks, spaces
// and tabs between a line's start and a block or comment tag go (unless `{%+`); with trim_blocks, the
// first newline after a block or comment tag goes (unless `+%}`). `{% raw %}` bodies become text.
// Inside a tag, the end marker counts only outside brackets, so `{{ {'a': {'b': 1}} }}` lexes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace minimakv::jinja::detail {

enum class Tok { kText, kPrintBegin, kPrintEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // text, name, operator, string value (unescaped) or number spelling
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws jinja::Error("TemplateSyntaxError") for an unterminated tag, string or raw block.
std::vector<Token> tokenize(std::string_view source, const LexOptions& opt);

}  // namespace minimakv::jinja::detail
