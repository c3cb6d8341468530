// eval() and exec() of every node: Python's arithmetic and comparison rules, Jinja2's scoping.
#include "interpreter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace minimakv::jinja::detail {

namespace {

using K = Value::Kind;

[[noreturn]] void type_error(const std::string& what) {
  throw Error("TypeError", what);
}

void no_undefined(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
}

bool both_int(const Value& a, const Value& b) {
  return (a.kind() == K::kInt || a.kind() == K::kBool) && (b.kind() == K::kInt || b.kind() == K::kBool);
}

int64_t checked(long double v) {
  if (v > static_cast<long double>(std::numeric_limits<int64_t>::max()) ||
      v < static_cast<long double>(std::numeric_limits<int64_t>::min()))
    throw Error("LimitError", "integer result outside 64 bits");
  return static_cast<int64_t>(v);
}

Value repeat(const Value& seq, int64_t n, Context& c) {
  if (n <= 0)
    return seq.is_string() ? Value(std::string()) : seq.kind() == K::kTuple ? Value::tuple({}) : Value::list({});
  if (seq.is_string()) {
    c.produce(seq.str().size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  c.produce(seq.items().size() * static_cast<size_t>(n) * 8);
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == K::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value arith(const std::string& op, const Value& a, const Value& b, Context& c) {
  if (op == "~") {
    std::string s = a.to_str() + b.to_str();
    c.produce(s.size());
    return Value(std::move(s));
  }
  if (op == "%" && a.is_string()) return percent_format(a.str(), b);
  no_undefined(a, b);
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (nums)
      return both_int(a, b) ? Value(checked(static_cast<long double>(a.as_int()) + b.as_int()))
                            : Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      c.produce(a.str().size() + b.str().size());
      return Value(a.str() + b.str());
    }
    if (a.is_plain_sequence() && b.is_plain_sequence() && a.kind() == b.kind()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      c.produce(out.size() * 8);
      return a.kind() == K::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
  } else if (op == "-") {
    if (nums)
      return both_int(a, b) ? Value(checked(static_cast<long double>(a.as_int()) - b.as_int()))
                            : Value(a.as_float() - b.as_float());
  } else if (op == "*") {
    if (nums)
      return both_int(a, b) ? Value(checked(static_cast<long double>(a.as_int()) * b.as_int()))
                            : Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_plain_sequence()) && both_int(b, b)) return repeat(a, b.as_int(), c);
    if ((b.is_string() || b.is_plain_sequence()) && both_int(a, a)) return repeat(b, a.as_int(), c);
  } else if (op == "/") {
    if (nums) {
      if (b.as_float() == 0) throw Error("ZeroDivisionError", "division by zero");
      return Value(a.as_float() / b.as_float());
    }
  } else if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return percent_format(a.str(), b);
    if (nums) {
      if (b.as_float() == 0) throw Error("ZeroDivisionError", "integer division or modulo by zero");
      if (both_int(a, b)) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (x == std::numeric_limits<int64_t>::min() && y == -1)
          throw Error("LimitError", "integer result outside 64 bits");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return op == "//" ? Value(q) : Value(r);
      }
      // CPython's float divmod: the floor of the exact quotient, from fmod (7 // 0.1 is 69.0)
      const double x = a.as_float(), y = b.as_float();
      double mod = std::fmod(x, y), div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      double floordiv;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return op == "//" ? Value(floordiv) : Value(mod);
    }
  } else if (op == "**") {
    if (nums) {
      if (both_int(a, b) && b.as_int() >= 0) {  // exact, by squaring; overflow is a LimitError
        int64_t result = 1, base = a.as_int(), e = b.as_int();
        bool overflow = false;
        while (e > 0 && !overflow) {
          if (e & 1) overflow = __builtin_mul_overflow(result, base, &result);
          e >>= 1;
          if (e > 0) overflow = overflow || __builtin_mul_overflow(base, base, &base);
        }
        if (overflow && !(a.as_int() == 0 || a.as_int() == 1 || a.as_int() == -1))
          throw Error("LimitError", "integer result outside 64 bits");
        if (overflow) result = a.as_int() == -1 ? ((b.as_int() & 1) ? -1 : 1) : a.as_int();
        return Value(result);
      }
      if (a.as_float() == 0 && b.as_float() < 0)
        throw Error("ZeroDivisionError", "0.0 cannot be raised to a negative power");
      const double r = std::pow(a.as_float(), b.as_float());
      if (std::isinf(r) && std::isfinite(a.as_float()) && std::isfinite(b.as_float()))
        throw Error("OverflowError", "(34, 'Numerical result out of range')");
      return Value(r);
    }
  }
  type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(const Value& hay, const Value& needle) {
  if (hay.is_undefined()) return false;  // Jinja2's Undefined iterates as empty
  if (hay.is_string()) {
    if (!needle.is_string()) type_error("'in <string>' requires string as left operand, not " + needle.type_name());
    return hay.str().find(needle.str()) != std::string::npos;
  }
  if (hay.is_sequence()) {
    const bool hashed = hay.flavor() == Value::Flavor::kDictKeys || hay.flavor() == Value::Flavor::kDictItems;
    if (hashed && ((needle.kind() == K::kList && needle.is_plain_sequence()) || needle.kind() == K::kDict))
      type_error("unhashable type: '" + needle.type_name() + "'");
    for (const Value& x : hay.iterate())  // iterate(): a failed generator raises here, as in Jinja2
      if (equal(x, needle)) return true;
    return false;
  }
  if (hay.is_mapping()) {
    if ((needle.kind() == K::kList && needle.is_plain_sequence()) || needle.kind() == K::kDict)
      type_error("unhashable type: '" + needle.type_name() + "'");
    return hay.dict().find(needle) != nullptr;
  }
  type_error("argument of type '" + hay.type_name() + "' is not iterable");
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  no_undefined(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || (equal(a, b) && !less(b, a));
  return less(b, a) || (equal(a, b) && !less(a, b));  // >=
}

CallArgs eval_args(Context& c, const std::vector<ExprPtr>& args, const std::vector<Kwarg>& kwargs) {
  CallArgs out;
  for (const auto& a : args) out.positional.push_back(a->eval(c));
  for (const auto& k : kwargs) out.keyword.emplace_back(k.name, k.value->eval(c));
  return out;
}

// Binds `item` to the loop's or set's target names.
void bind_targets(Context& c, const std::vector<std::string>& names, bool unpack, const Value& item) {
  if (!unpack) {
    c.assign(names[0], item);
    return;
  }
  const List parts = item.iterate();
  if (parts.size() != names.size())
    throw Error("ValueError", parts.size() < names.size()
                                  ? "not enough values to unpack (expected " + std::to_string(names.size()) + ", got " +
                                        std::to_string(parts.size()) + ")"
                                  : "too many values to unpack (expected " + std::to_string(names.size()) + ")");
  for (size_t i = 0; i < names.size(); ++i) c.assign(names[i], parts[i]);
}

void bind_locals(Context& c, const FrameLocals& names) {
  for (const auto& n : names) c.assign(n, Value::undefined("'" + n + "' is undefined"));
}

// A scope for the lifetime of a block (one loop iteration, a macro call, a with block).
struct ScopeGuard {
  ScopeGuard(Context& ctx, Scope* parent) : c(ctx), saved(ctx.scope) {
    s.parent = parent;
    c.scope = &s;
  }
  ~ScopeGuard() {
    if (s.alive) *s.alive = false;
    c.scope = saved;
  }
  Context& c;
  Scope s;
  Scope* saved;
};

}  // namespace

// printf-style `str % args` for the conversions templates use (%s %r %d %i %f %%, width/precision).
Value percent_format(const std::string& fmt, const Value& args) {
  const List items = args.kind() == K::kTuple ? args.items() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw Error("ValueError", "incomplete format");
    size_t j = i;
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.' || fmt[j] == '-')) ++j;
    if (j >= fmt.size()) throw Error("ValueError", "incomplete format");
    const std::string spec = fmt.substr(i, j - i);
    const char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) type_error("not enough arguments for format string");
    const Value& v = items[next++];
    char buf[128];
    if (conv == 's' || conv == 'r') {
      const std::string text = conv == 's' ? v.to_str() : v.repr();
      const bool left = !spec.empty() && spec[0] == '-';
      const size_t width = spec.empty() ? 0 : static_cast<size_t>(std::atoi(spec.c_str() + (left ? 1 : 0)));
      const size_t pad = width > text.size() ? std::min<size_t>(width - text.size(), 1 << 16) : 0;
      out += left ? text + std::string(pad, ' ') : std::string(pad, ' ') + text;
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number()) type_error("%d format: a number is required, not " + v.type_name());
      std::snprintf(
          buf, sizeof buf, ("%" + spec + "lld").c_str(),
          static_cast<long long>(v.kind() == K::kFloat ? std::trunc(v.as_float()) : static_cast<double>(v.as_int())));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      if (!v.is_number()) type_error("must be real number, not " + v.type_name());
      std::snprintf(buf, sizeof buf, ("%" + spec + conv).c_str(), v.as_float());
      out += buf;
    } else {
      throw Error("ValueError", std::string("unsupported format character '") + conv + "'");
    }
  }
  // Python: leftover arguments are an error, except a lone list, dict or undefined (taken as a mapping)
  if (next < items.size() && (args.kind() == K::kTuple || !((args.kind() == K::kList && args.is_plain_sequence()) ||
                                                            args.kind() == K::kDict || args.is_undefined())))
    type_error("not all arguments converted during string formatting");
  return Value(std::move(out));
}

[[noreturn]] void fail_undefined(const Value& v) {
  v.raise_undefined();
}

Value Context::lookup(const std::string& name) const {
  for (const Scope* s = scope; s; s = s->parent) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = globals->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

void Context::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    tick();
    s->exec(*this, out);
    if (flow != Flow::kNormal) return;
  }
}

// ---- expressions

Value Literal::eval(Context& c) const {
  c.tick();
  return value;
}

Value Name::eval(Context& c) const {
  c.tick();
  Value v = c.lookup(name);
  if (v.is_undefined()) {
    Value b = builtin_global(c, name);
    if (!b.is_undefined()) return b;
  }
  return v;
}

Value GetAttr::eval(Context& c) const {
  c.tick();
  return get_attr(obj->eval(c), name);
}

Value GetItem::eval(Context& c) const {
  c.tick();
  Value o = obj->eval(c);
  return get_item(o, index->eval(c));
}

Value Slice::eval(Context& c) const {
  c.tick();
  Value o = obj->eval(c);
  return make_slice(c, o, start ? start->eval(c) : Value::none(), stop ? stop->eval(c) : Value::none(),
                    step ? step->eval(c) : Value::none());
}

Value Call::eval(Context& c) const {
  c.tick();
  Value f = fn->eval(c);
  return f.call(eval_args(c, args, kwargs));
}

Value FilterExpr::apply(Context& c, Value input) const {
  return apply_filter(c, name, input, eval_args(c, args, kwargs));
}

Value FilterExpr::eval(Context& c) const {
  c.tick();
  return apply(c, value->eval(c));
}

Value TestExpr::eval(Context& c) const {
  c.tick();
  const Value v = value->eval(c);
  const bool r = apply_test(c, name, v, eval_args(c, args, kwargs));
  return Value(negated ? !r : r);
}

Value Unary::eval(Context& c) const {
  c.tick();
  Value v = operand->eval(c);
  if (op == "not") return Value(!v.truthy());
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) type_error("bad operand type for unary " + op + ": '" + v.type_name() + "'");
  if (op == "+") return v.kind() == K::kBool ? Value(v.as_int()) : v;
  if (v.kind() == K::kFloat) return Value(-v.as_float());
  return Value(checked(-static_cast<long double>(v.as_int())));
}

Value Binary::eval(Context& c) const {
  c.tick();
  if (op == "and") {
    Value a = lhs->eval(c);
    return a.truthy() ? rhs->eval(c) : a;
  }
  if (op == "or") {
    Value a = lhs->eval(c);
    return a.truthy() ? a : rhs->eval(c);
  }
  Value a = lhs->eval(c);
  return arith(op, a, rhs->eval(c), c);
}

Value Compare::eval(Context& c) const {
  c.tick();
  Value a = first->eval(c);
  for (const auto& [op, e] : rest) {
    Value b = e->eval(c);
    if (!compare(op, a, b)) return Value(false);
    a = std::move(b);
  }
  return Value(true);
}

Value CondExpr::eval(Context& c) const {
  c.tick();
  if (cond->eval(c).truthy()) return then->eval(c);
  return otherwise ? otherwise->eval(c) : Value::undefined("the conditional expression has no else branch");
}

Value ListLit::eval(Context& c) const {
  c.tick();
  List xs;
  xs.reserve(items.size());
  for (const auto& e : items) xs.push_back(e->eval(c));
  return tuple ? Value::tuple(std::move(xs)) : Value::list(std::move(xs));
}

Value DictLit::eval(Context& c) const {
  c.tick();
  Dict d;
  for (const auto& [k, v] : items) {
    Value key = k->eval(c);
    if ((key.kind() == K::kList && key.is_plain_sequence()) || key.kind() == K::kDict)
      type_error("unhashable type: '" + key.type_name() + "'");
    d.set(std::move(key), v->eval(c));
  }
  return Value::dict(std::move(d));
}

// ---- statements

void TextStmt::exec(Context& c, std::string& out) const {
  c.produce(text.size());
  out += text;
}

void PrintStmt::exec(Context& c, std::string& out) const {
  const std::string s = expr->eval(c).to_str();
  c.produce(s.size());
  out += s;
}

void IfStmt::exec(Context& c, std::string& out) const {
  for (const auto& [cond, body] : branches)
    if (cond->eval(c).truthy()) {
      c.exec_body(body, out);
      return;
    }
  c.exec_body(otherwise, out);
}

void ForStmt::exec(Context& c, std::string& out) const {
  const Value it = iter->eval(c);
  List items = it.iterate();
  if (filter) {  // the filter sees the target names, not `loop`
    List kept;
    for (const Value& x : items) {
      ScopeGuard g(c, c.scope);
      bind_targets(c, targets, unpack, x);
      if (filter->eval(c).truthy()) kept.push_back(x);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard g(c, c.scope);
    bind_locals(c, else_locals);
    c.exec_body(otherwise, out);
    return;
  }
  const auto n = static_cast<int64_t>(items.size());
  bool completed = false;
  // One `loop` object per loop, advanced in place (as Jinja2's LoopContext is).
  enum Field : size_t { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrev, kNext, kCycle };
  Dict fields;
  for (const char* f : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem", "cycle"})
    fields.set(Value(f), Value());
  fields.set(Value("length"), Value(n));
  fields.set(Value("depth"), Value(int64_t{1}));
  fields.set(Value("depth0"), Value(int64_t{0}));
  const Value loop = Value::dict(std::move(fields));
  Dict& lf = loop.loop_dict();
  auto position = std::make_shared<int64_t>(0);
  lf.set_at(kCycle, Value::callable("cycle", [position](const CallArgs& a) {
              if (a.positional.empty()) type_error("no items for cycling given");
              return a.positional[static_cast<size_t>(*position) % a.positional.size()];
            }));
  for (int64_t i = 0; i < n; ++i) {
    c.tick();
    ScopeGuard g(c, c.scope);
    bind_locals(c, body_locals);
    bind_targets(c, targets, unpack, items[static_cast<size_t>(i)]);
    *position = i;
    lf.set_at(kIndex, Value(i + 1));
    lf.set_at(kIndex0, Value(i));
    lf.set_at(kRevindex, Value(n - i));
    lf.set_at(kRevindex0, Value(n - i - 1));
    lf.set_at(kFirst, Value(i == 0));
    lf.set_at(kLast, Value(i == n - 1));
    lf.set_at(kPrev, i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    lf.set_at(kNext, i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    c.assign("loop", loop);
    c.exec_body(body, out);
    if (c.flow == Flow::kBreak) {
      c.flow = Flow::kNormal;
      break;
    }
    completed = completed || c.flow == Flow::kNormal;
    c.flow = Flow::kNormal;
  }
  // Jinja2 marks an iteration done at the end of its body, so `else` also runs when every iteration
  // left early (a break in the first, or continue in all).
  if (!completed) {
    ScopeGuard g(c, c.scope);
    bind_locals(c, else_locals);
    c.exec_body(otherwise, out);
  }
}

void SetStmt::exec(Context& c, std::string& out) const {
  (void)out;
  Value v;
  if (value) {
    v = value->eval(c);
  } else {
    std::string body_out;
    {
      ScopeGuard g(c, c.scope);
      bind_locals(c, body_locals);
      c.exec_body(body, body_out);
    }
    v = Value(std::move(body_out));
    for (const auto& f : filters) v = f->apply(c, v);
  }
  if (!attr.empty()) {
    const Value ns = c.lookup(targets[0]);
    if (ns.kind() != K::kNamespace)
      throw Error("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    ns.namespace_dict().set(Value(attr), std::move(v));
    return;
  }
  bind_targets(c, targets, unpack, v);
}

void MacroStmt::exec(Context& c, std::string& out) const {
  (void)out;
  Context* ctx = &c;
  const MacroStmt* self = this;
  Scope* defining = c.scope;  // Jinja2: a macro's free names resolve in the frame that defined it
  std::shared_ptr<bool> alive = c.scope->liveness();
  c.assign(name, Value::callable(name, [ctx, self, defining, alive](const CallArgs& a) {
             Context& cc = *ctx;
             if (++cc.call_depth > cc.limits.max_call_depth) {
               --cc.call_depth;
               throw Error("LimitError", "macro calls nested deeper than " + std::to_string(cc.limits.max_call_depth));
             }
             struct Depth {
               Context& c;
               ~Depth() { --c.call_depth; }
             } depth{cc};
             if (a.positional.size() > self->params.size())
               type_error("macro '" + self->name + "' takes not more than " + std::to_string(self->params.size()) +
                          " argument(s)");
             for (const auto& [k, v] : a.keyword)
               if (std::find(self->params.begin(), self->params.end(), k) == self->params.end())
                 type_error("macro '" + self->name + "' takes no keyword argument '" + k + "'");
             ScopeGuard g(cc, *alive ? defining : cc.root);
             bind_locals(cc, self->body_locals);
             const Flow saved = cc.flow;
             for (size_t i = 0; i < self->params.size(); ++i) {
               const Value* given = a.get(i, self->params[i]);
               if (given)
                 cc.assign(self->params[i], *given);
               else if (self->defaults[i])
                 cc.assign(self->params[i], self->defaults[i]->eval(cc));
               else
                 cc.assign(self->params[i], Value::undefined("parameter '" + self->params[i] + "' was not provided"));
             }
             std::string body_out;
             cc.exec_body(self->body, body_out);
             cc.flow = saved;
             return Value(std::move(body_out));
           }));
}

void FilterBlockStmt::exec(Context& c, std::string& out) const {
  std::string body_out;
  {
    ScopeGuard g(c, c.scope);
    bind_locals(c, body_locals);
    c.exec_body(body, body_out);
  }
  Value v(std::move(body_out));
  for (const auto& f : filters) v = f->apply(c, v);
  const std::string s = v.to_str();
  c.produce(s.size());
  out += s;
}

void WithStmt::exec(Context& c, std::string& out) const {
  std::vector<Value> vals;
  for (const auto& [n, e] : assignments) vals.push_back(e->eval(c));
  ScopeGuard g(c, c.scope);
  bind_locals(c, body_locals);
  for (size_t i = 0; i < vals.size(); ++i) c.assign(assignments[i].first, vals[i]);
  c.exec_body(body, out);
}

void BlockStmt::exec(Context& c, std::string& out) const {
  ScopeGuard g(c, c.scope);
  bind_locals(c, body_locals);
  c.exec_body(body, out);
}

void LoopControlStmt::exec(Context& c, std::string& out) const {
  (void)out;
  c.flow = is_break ? Flow::kBreak : Flow::kContinue;
}

}  // namespace minimakv::jinja::detail
