// The state of one render and the builtins the interpreter dispatches to.
//
// Owns: scopes (a for-loop iteration and a macro call each open one; `if` does not, as in Jinja2),
// the render's budgets (steps, bytes produced, call depth) and loop-control flow.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ast.h"
#include "minimakv/jinja/template.h"

namespace minimakv::jinja::detail {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
  // False once the scope is gone: a macro defined in it (which may have escaped into a namespace)
  // then resolves its free names from the template's top level instead. Made on first use.
  std::shared_ptr<bool> alive;
  const std::shared_ptr<bool>& liveness() {
    if (!alive) alive = std::make_shared<bool>(true);
    return alive;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

struct Context {
  const Dict* globals = nullptr;
  Limits limits;
  Scope* root = nullptr;   // the template's top level: what macros see
  Scope* scope = nullptr;  // innermost
  size_t steps = 0, produced = 0;
  int call_depth = 0;
  Flow flow = Flow::kNormal;

  void tick() {
    if (++steps > limits.max_steps)
      throw Error("LimitError", "template evaluation exceeded " + std::to_string(limits.max_steps) + " steps");
  }
  void produce(size_t bytes) {
    produced += bytes;
    if (produced > limits.max_output_bytes)
      throw Error("LimitError", "template output exceeded " + std::to_string(limits.max_output_bytes) + " bytes");
  }
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { scope->vars[name] = std::move(v); }
  void exec_body(const Body& body, std::string& out);
};

// Jinja2's getattr (obj.name: attribute first, then item) and getitem (obj[key]: item first, then
// attribute). Undefined results carry the message a later use raises.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value make_slice(Context& c, const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(Context& c, const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(Context& c, const std::string& name, const Value& input, const CallArgs& args);
// range, namespace, dict, raise_exception, strftime_now, or undefined.
Value builtin_global(Context& c, const std::string& name);

// Python's `str % args` (args a tuple, or one value) for %s %r %d %i %f %e %g %% with width/precision.
Value percent_format(const std::string& fmt, const Value& args);

// Raises the UndefinedError an undefined value carries (its use in arithmetic, a call, a lookup).
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace minimakv::jinja::detail
