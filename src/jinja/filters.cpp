// Jinja2's builtin filters and tests (the ones chat templates use), with transformers' `tojson`.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "interpreter.h"
#include "strings.h"

namespace minimakv::jinja::detail {

namespace {

using K = Value::Kind;

[[noreturn]] void type_error(const std::string& what) {
  throw Error("TypeError", what);
}

const Value* arg(const CallArgs& a, size_t pos, std::string_view name) {
  return a.get(pos, name);
}
bool flag(const CallArgs& a, size_t pos, std::string_view name, bool dflt = false) {
  const Value* v = a.get(pos, name);
  return v ? v->truthy() : dflt;
}

// Jinja2's attribute getter for sort/map/selectattr: "a.b.0" walks attributes, integers index.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    // Python's int has no bound: an index past int64 is past every list's end, as INT64_MAX is.
    int64_t index = 0;
    if (digits && std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc())
      index = std::numeric_limits<int64_t>::max();
    v = digits ? get_item(v, Value(index)) : get_item(v, Value(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.str())) : v;
}

// select/reject/selectattr/rejectattr: args after the attribute are the test's name and arguments.
Value select_items(Context& c, const Value& input, const CallArgs& a, bool by_attr, bool keep_if) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) type_error("selectattr/rejectattr need an attribute");
    attr = a.positional[next++].to_str();
  }
  std::string test;
  if (next < a.positional.size()) test = a.positional[next++].to_str();
  CallArgs targs;
  targs.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
  targs.keyword = a.keyword;
  List out;
  if (!input.truthy()) return Value::lazy({}, Value::Flavor::kGenerator);  // Jinja2 selects nothing from a falsy value
  for (const Value& x : input.iterate()) {
    c.tick();
    const Value v = by_attr ? attribute_path(x, attr) : x;
    const bool t = test.empty() ? v.truthy() : apply_test(c, test, v, targs);
    if (t == keep_if) out.push_back(x);
  }
  return Value::lazy(std::move(out), Value::Flavor::kGenerator);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& dflt, int base) {
  if (v.kind() == K::kInt || v.kind() == K::kBool) return Value(v.as_int());
  if (v.kind() == K::kFloat)
    return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(std::trunc(v.as_float()))) : dflt;
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), nullptr, true, true);
    try {
      size_t used = 0;
      const long long x = std::stoll(t, &used, base);
      if (used == t.size()) return Value(static_cast<int64_t>(x));
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double f = std::stod(t, &used);
      if (used == t.size() && std::isfinite(f)) return Value(static_cast<int64_t>(std::trunc(f)));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value to_float(const Value& v, const Value& dflt) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), nullptr, true, true);
    try {
      size_t used = 0;
      const double f = std::stod(t, &used);
      if (used == t.size()) return Value(f);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

std::string do_indent(const std::string& s0, const Value* width, bool first, bool blank) {
  const std::string ind =
      width && width->is_string()
          ? width->str()
          : std::string(width ? static_cast<size_t>(std::max<int64_t>(0, width->as_int())) : 4, ' ');
  const std::vector<std::string> lines = py_splitlines(s0 + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  return first ? ind + rv : rv;
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) type_error("round: a number is required, not " + v.type_name());
  if (method != "common" && method != "ceil" && method != "floor")
    throw Error("FilterArgumentError", "method must be common, ceil or floor");
  if (method == "common") {
    // Python's round(): an int stays an int; a float rounds its exact binary value to `precision`
    // decimals, ties to even (printf's correctly rounded conversion does the same)
    if (v.kind() != K::kFloat) {
      if (precision >= 0) return Value(v.as_int());
      int64_t p = 1;
      for (int64_t k = 0; k < -precision && p < INT64_MAX / 10; ++k) p *= 10;
      const int64_t x = v.as_int(), q = x / p, r = x % p;
      int64_t down = r < 0 ? q - 1 : q;
      const int64_t rem = x - down * p;
      if (2 * rem > p || (2 * rem == p && (down & 1))) ++down;
      return Value(down * p);
    }
    const double x = v.as_float();
    if (!std::isfinite(x)) return v;
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
      return Value(std::strtod(buf, nullptr));
    }
    const double p = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / p) * p);
  }
  const double p = std::pow(10.0, static_cast<double>(precision));
  return Value(method == "ceil" ? std::ceil(v.as_float() * p) / p : std::floor(v.as_float() * p) / p);
}

}  // namespace

Value eager_filter(Context& c, const std::string& name, const Value& in, const CallArgs& a);

// Jinja2's select, reject, selectattr, rejectattr, map, unique, items and batch are generators: a
// bad input raises only when the result is consumed, so their failures travel inside the result.
Value apply_filter(Context& c, const std::string& name, const Value& in, const CallArgs& a) {
  static const char* const generators[] = {"select", "reject", "selectattr", "rejectattr",
                                           "map",    "unique", "items",      "batch"};
  if (std::find_if(std::begin(generators), std::end(generators), [&](const char* g) { return name == g; }) ==
      std::end(generators))
    return eager_filter(c, name, in, a);
  try {
    return eager_filter(c, name, in, a);
  } catch (const Error& e) {
    if (e.kind == "LimitError") throw;
    return Value::failed_generator(e);
  }
}

Value eager_filter(Context& c, const std::string& name, const Value& in, const CallArgs& a) {
  c.tick();
  if (name == "safe" || name == "string") return name == "safe" && in.is_string() ? in : Value(in.to_str());
  if (name == "trim") {
    const Value* chars = arg(a, 0, "chars");
    return Value(py_strip(in.to_str(), chars && !chars->is_none() ? &chars->str() : nullptr, true, true));
  }
  if (name == "length" || name == "count") return Value(static_cast<int64_t>(in.length()));
  if (name == "tojson") {
    a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle st;
    st.ensure_ascii = flag(a, 0, "ensure_ascii");
    if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none())
      st.indent = static_cast<int>(std::clamp<int64_t>(ind->as_int(), 0, 64));
    if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
      const List p = sep->iterate();
      if (p.size() != 2) type_error("separators must be a pair");
      st.separators = std::make_pair(p[0].to_str(), p[1].to_str());
    }
    st.sort_keys = flag(a, 3, "sort_keys");
    std::string s = to_json(in, st);
    c.produce(s.size());
    return Value(std::move(s));
  }
  if (name == "upper") return Value(py_upper(in.to_str()));
  if (name == "lower") return Value(py_lower(in.to_str()));
  if (name == "title") return Value(jinja_title(in.to_str()));
  if (name == "capitalize") return Value(py_capitalize(in.to_str()));
  if (name == "replace") {
    const Value* old = arg(a, 0, "old");
    const Value* rep = arg(a, 1, "new");
    const Value* cnt = arg(a, 2, "count");
    if (!old || !rep) type_error("replace() needs old and new");
    std::string s = py_replace(in.to_str(), old->to_str(), rep->to_str(), cnt && !cnt->is_none() ? cnt->as_int() : -1);
    c.produce(s.size());
    return Value(std::move(s));
  }
  if (name == "default" || name == "d") {
    const Value* dv = arg(a, 0, "default_value");
    const bool boolean = flag(a, 1, "boolean");
    if (in.is_undefined() || (boolean && !in.truthy())) return dv ? *dv : Value(std::string());
    return in;
  }
  if (name == "join") {
    const Value* sep = arg(a, 0, "d");
    const Value* attr = arg(a, 1, "attribute");
    const std::string d = sep ? sep->to_str() : "";
    std::string out;
    bool first = true;
    for (const Value& x : in.iterate()) {
      out += (first ? "" : d) + (attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x).to_str();
      first = false;
      c.produce(0);
    }
    c.produce(out.size());
    return Value(std::move(out));
  }
  if (name == "first") {
    const List xs = in.iterate();
    return xs.empty() ? Value::undefined("No first item, sequence was empty.") : xs.front();
  }
  if (name == "last") {
    if (in.is_undefined()) return Value::undefined("No last item, sequence was empty.");
    if (in.is_sequence() && (in.flavor() == Value::Flavor::kGenerator || in.flavor() == Value::Flavor::kIterator))
      type_error("'" + in.type_name() + "' object is not reversible");
    const List xs = in.iterate();
    return xs.empty() ? Value::undefined("No last item, sequence was empty.") : xs.back();
  }
  if (name == "list") return Value::list(in.iterate());
  if (name == "reverse") {
    if (in.is_string()) {
      std::u32string cps = decode_utf8(in.str());
      std::reverse(cps.begin(), cps.end());
      return Value(encode_utf8(cps));
    }
    List xs = in.iterate();
    std::reverse(xs.begin(), xs.end());
    // reversed() of a list, tuple or dict is an iterator; anything else Jinja2 copies into a list
    const bool iter = in.is_plain_sequence() || in.kind() == K::kDict || in.is_undefined();
    return iter ? Value::lazy(std::move(xs), Value::Flavor::kIterator) : Value::list(std::move(xs));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::lazy({}, Value::Flavor::kGenerator);
    if (!in.is_mapping()) type_error("can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, v] : in.dict().items()) out.push_back(Value::tuple({k, v}));
    return Value::lazy(std::move(out), Value::Flavor::kGenerator);
  }
  if (name == "dictsort") {
    if (!in.is_mapping()) type_error("dictsort needs a mapping");
    const bool cs = flag(a, 0, "case_sensitive");
    const Value* by = arg(a, 1, "by");
    const bool by_value = by && by->to_str() == "value";
    const bool rev = flag(a, 2, "reverse");
    List out;
    for (const auto& [k, v] : in.dict().items()) out.push_back(Value::tuple({k, v}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      const size_t i = by_value ? 1 : 0;
      return rev ? less(sort_key(y.items()[i], cs), sort_key(x.items()[i], cs))
                 : less(sort_key(x.items()[i], cs), sort_key(y.items()[i], cs));
    });
    return Value::list(std::move(out));
  }
  if (name == "sort") {
    const bool rev = flag(a, 0, "reverse"), cs = flag(a, 1, "case_sensitive");
    const Value* attr = arg(a, 2, "attribute");
    List xs = in.iterate();
    auto key = [&](const Value& x) {
      return sort_key(attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x, cs);
    };
    std::stable_sort(xs.begin(), xs.end(),
                     [&](const Value& x, const Value& y) { return rev ? less(key(y), key(x)) : less(key(x), key(y)); });
    return Value::list(std::move(xs));
  }
  if (name == "unique") {
    const bool cs = flag(a, 0, "case_sensitive");
    const Value* attr = arg(a, 1, "attribute");
    List out, seen;
    for (const Value& x : in.iterate()) {
      c.tick();
      const Value k = sort_key(attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::lazy(std::move(out), Value::Flavor::kGenerator);
  }
  if (name == "min" || name == "max") {
    const bool cs = flag(a, 0, "case_sensitive");
    const Value* attr = arg(a, 1, "attribute");
    const List xs = in.iterate();
    if (xs.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& x) {
      return sort_key(attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x, cs);
    };
    size_t best = 0;
    for (size_t i = 1; i < xs.size(); ++i)
      if (name == "min" ? less(key(xs[i]), key(xs[best])) : less(key(xs[best]), key(xs[i]))) best = i;
    return xs[best];
  }
  if (name == "sum") {
    const Value* attr = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value acc = start ? *start : Value(int64_t{0});
    for (const Value& x : in.iterate()) {
      const Value v = attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x;
      if (!acc.is_number() || !v.is_number())
        type_error("unsupported operand type(s) for +: '" + acc.type_name() + "' and '" + v.type_name() + "'");
      const bool ints = acc.kind() != K::kFloat && v.kind() != K::kFloat;
      acc = ints ? Value(acc.as_int() + v.as_int()) : Value(acc.as_float() + v.as_float());
    }
    return acc;
  }
  if (name == "map") {
    List out;
    if (!in.truthy())
      return Value::lazy({}, Value::Flavor::kGenerator);  // as Jinja2: nothing to map over a falsy value
    const Value* attr = nullptr;
    for (const auto& [k, v] : a.keyword)
      if (k == "attribute") attr = &v;
    if (attr) {
      const Value* dflt = nullptr;
      for (const auto& [k, v] : a.keyword)
        if (k == "default") dflt = &v;
      for (const Value& x : in.iterate()) {
        Value v = attribute_path(x, attr->to_str());
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      }
      return Value::lazy(std::move(out), Value::Flavor::kGenerator);
    }
    if (a.positional.empty()) type_error("map requires a filter argument");
    const std::string f = a.positional[0].to_str();
    CallArgs fargs;
    fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
    fargs.keyword = a.keyword;
    for (const Value& x : in.iterate()) out.push_back(apply_filter(c, f, x, fargs));
    return Value::lazy(std::move(out), Value::Flavor::kGenerator);
  }
  if (name == "select") return select_items(c, in, a, false, true);
  if (name == "reject") return select_items(c, in, a, false, false);
  if (name == "selectattr") return select_items(c, in, a, true, true);
  if (name == "rejectattr") return select_items(c, in, a, true, false);
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (!n) type_error("attr() needs a name");
    return get_attr(in, n->to_str());
  }
  if (name == "abs") {
    if (!in.is_number()) type_error("bad operand type for abs(): '" + in.type_name() + "'");
    return in.kind() == K::kFloat ? Value(std::fabs(in.as_float()))
                                  : Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  if (name == "int") {
    if (in.is_undefined()) fail_undefined(in);  // int(Undefined) raises, before the default applies
    const Value* d = arg(a, 0, "default");
    const Value* base = arg(a, 1, "base");
    return to_int(in, d ? *d : Value(int64_t{0}), base ? static_cast<int>(base->as_int()) : 10);
  }
  if (name == "float") {
    if (in.is_undefined()) fail_undefined(in);
    const Value* d = arg(a, 0, "default");
    return to_float(in, d ? *d : Value(0.0));
  }
  if (name == "round") {
    const Value* p = arg(a, 0, "precision");
    const Value* m = arg(a, 1, "method");
    return round_value(in, p ? p->as_int() : 0, m ? m->to_str() : "common");
  }
  if (name == "escape" || name == "e" || name == "forceescape") return Value(html_escape(in.to_str()));
  if (name == "indent") {
    if (!in.is_string()) type_error("indent: a string is required, not " + in.type_name());
    std::string s = do_indent(in.to_str(), arg(a, 0, "width"), flag(a, 1, "first"), flag(a, 2, "blank"));
    c.produce(s.size());
    return Value(std::move(s));
  }
  if (name == "center") {
    const Value* w = arg(a, 0, "width");
    const std::string s = in.to_str();
    const size_t width = static_cast<size_t>(std::clamp<int64_t>(w ? w->as_int() : 80, 0, 1 << 20));
    const size_t n = decode_utf8(s).size();
    if (width <= n) return Value(s);
    const size_t total = width - n, left = total / 2 + (total & width & 1);
    return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t ch : decode_utf8(in.to_str())) {
      const bool w =
          (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch >= 0xc0;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "format") {  // `"%s, %s" | format(a, b)` is `"%s, %s" % (a, b)`
    if (!a.keyword.empty()) throw Error("FilterArgumentError", "format: keyword arguments are not supported");
    return percent_format(in.to_str(), Value::tuple(a.positional));
  }
  if (name == "batch") {
    const Value* n = arg(a, 0, "linecount");
    const Value* fill = arg(a, 1, "fill_with");
    const int64_t k = n ? n->as_int() : 1;
    if (k <= 0) throw Error("FilterArgumentError", "batch size must be positive");
    List out, cur;
    for (const Value& x : in.iterate()) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == k) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < k) cur.push_back(*fill);
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::lazy(std::move(out), Value::Flavor::kGenerator);
  }
  throw Error("TemplateAssertionError", "No filter named '" + name + "'.");
}

bool apply_test(Context& c, const std::string& name, const Value& v, const CallArgs& a) {
  c.tick();
  {  // Python's arity: these tests take the value alone, the others one argument more
    static const char* const unary[] = {"defined", "undefined", "none",   "boolean", "true",     "false",    "integer",
                                        "float",   "number",    "string", "mapping", "iterable", "sequence", "callable",
                                        "escaped", "odd",       "even",   "lower",   "upper"};
    const bool is_unary = std::any_of(std::begin(unary), std::end(unary), [&](const char* u) { return name == u; });
    const size_t given = a.positional.size() + a.keyword.size();
    if (is_unary && given != 0)
      type_error("test_" + name + "() takes 1 positional argument but " + std::to_string(given + 1) + " were given");
    if (!is_unary && given > 1)
      type_error("test " + name + " takes 2 positional arguments but " + std::to_string(given + 1) + " were given");
  }
  auto other = [&]() -> const Value& {
    if (a.positional.empty()) type_error("test '" + name + "' needs an argument");
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == K::kDict;
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind() == K::kDict;
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_plain_sequence() || v.kind() == K::kDict;
  if (name == "callable") return v.is_callable() || v.is_undefined();  // Jinja2's Undefined defines __call__
  if (name == "escaped") return false;
  if (name == "odd" || name == "even" || name == "divisibleby") {  // value % 2 (or % n), Python's modulo
    if (v.is_undefined()) fail_undefined(v);
    const Value d = name == "divisibleby" ? other() : Value(int64_t{2});
    if (!v.is_number() || !d.is_number())
      type_error("unsupported operand type(s) for %: '" + v.type_name() + "' and '" + d.type_name() + "'");
    if (d.as_float() == 0) throw Error("ZeroDivisionError", "integer division or modulo by zero");
    double r;
    if (v.kind() == K::kFloat || d.kind() == K::kFloat) {
      r = std::fmod(v.as_float(), d.as_float());
      if (r != 0 && ((r < 0) != (d.as_float() < 0))) r += d.as_float();
    } else {
      int64_t q = v.as_int() % d.as_int();
      if (q != 0 && ((q < 0) != (d.as_int() < 0))) q += d.as_int();
      r = static_cast<double>(q);
    }
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other(), v);
  if (name == "le" || name == "<=") return !less(other(), v);
  if (name == "ge" || name == ">=") return !less(v, other());
  if (name == "in") {
    const Value& hay = other();
    if (hay.is_string()) return v.is_string() && hay.str().find(v.str()) != std::string::npos;
    if (hay.is_sequence())
      return std::any_of(hay.items().begin(), hay.items().end(), [&](const Value& x) { return equal(x, v); });
    if (hay.is_mapping()) return hay.dict().find(v) != nullptr;
    type_error("argument of type '" + hay.type_name() + "' is not iterable");
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind() == K::kBool) return v.as_bool() == o.as_bool();
    if (v.is_sequence()) return &v.items() == &o.items();
    if (v.is_mapping()) return &v.dict() == &o.dict();
    return false;
  }
  if (name == "lower" || name == "upper") return py_is(v.to_str(), name == "lower" ? "islower" : "isupper");
  throw Error("TemplateAssertionError", "No test named '" + name + "'.");
}

}  // namespace minimakv::jinja::detail
