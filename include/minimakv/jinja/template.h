// A compact Jinja2 for chat templates: the subset that the templates of Qwen3, Llama 3, Mistral and
// Gemma use, with the semantics of transformers' template environment (Jinja2's immutable sandbox,
// trim_blocks and lstrip_blocks on, loop controls, `tojson` as json.dumps with ensure_ascii off,
// `raise_exception` and `strftime_now`, the `{% generation %}` tag).
//
// Owns: parsing a template once and rendering it any number of times, concurrently.
// Supported: text, `{{ }}`, `{# #}`, whitespace control (`-`, `+`), `{% raw %}`; if/elif/else; for
// (unpacking, `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/
// nextitem/cycle, break, continue); set (names, tuples, namespace attributes, blocks with filters);
// macro (defaults, keyword arguments); filter blocks; with; literals, arithmetic, comparison chains,
// `in`, `~`, conditional expressions, slices; the filters, tests and str/dict methods listed in
// docs/architecture.md. Not supported (a syntax error naming the tag): include, import, extends,
// block, call blocks, recursive loops.
// Limits: every render is bounded in output bytes, evaluation steps, macro call depth and range()
// length (as the sandbox bounds range), so a hostile template fails with a LimitError, never hangs or
// exhausts memory; parsing bounds nesting depth.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "minimakv/jinja/value.h"

namespace minimakv::jinja {

namespace detail {
struct Stmt;
}

struct Limits {
  size_t max_output_bytes = 8u << 20;  // every byte produced, nested macro and block outputs included
  size_t max_steps = 5'000'000;        // statements and expressions evaluated (about 2 s at most)
  int max_call_depth = 64;             // nested macro calls
  size_t max_range = 100'000;          // items of one range(), as Jinja2's sandbox allows
};

struct Options {
  bool trim_blocks = true;  // transformers' chat template environment
  bool lstrip_blocks = true;
};

class Template {
 public:
  // Throws Error (kind "TemplateSyntaxError", with the line) when the source does not parse.
  static Template parse(std::string_view source, const Options& opt = {});
  // `vars` are the template's globals (messages, add_generation_prompt, bos_token, ...); builtins
  // (range, namespace, dict, raise_exception, strftime_now) are added beneath them. Throws Error.
  std::string render(const Dict& vars, const Limits& limits = {}) const;

 private:
  struct Body;
  std::shared_ptr<const Body> body_;
};

}  // namespace minimakv::jinja
