// Attribute and item lookup as Jinja2's sandbox performs it, the str/dict/list methods templates call,
// slices, and the globals of transformers' template environment.
#include <algorithm>
#include <ctime>

#include "interpreter.h"
#include "strings.h"

namespace minimakv::jinja::detail {

namespace {

using K = Value::Kind;

[[noreturn]] void type_error(const std::string& what) {
  throw Error("TypeError", what);
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

const std::string& str_arg(const Value* v, const char* fn) {
  if (!v || !v->is_string())
    type_error(std::string(fn) + "() argument must be str, not " + (v ? v->type_name() : "nothing"));
  return v->str();
}

Value method(std::string name, Function fn) {
  return Value::callable(std::move(name), std::move(fn));
}

bool prefix_match(const std::string& s, const Value& p, bool at_end) {
  auto one = [&](const Value& x) {
    const std::string& t = str_arg(&x, at_end ? "endswith" : "startswith");
    return at_end ? s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0
                  : s.compare(0, t.size(), t) == 0;
  };
  if (p.kind() == K::kTuple) return std::any_of(p.items().begin(), p.items().end(), one);
  return one(p);
}

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.str();
  auto m = [&](Function f) { return method("str." + name, std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return m([s, left, right](const CallArgs& a) {
      a.check("strip", 1, {});
      const Value* chars = a.get(0, "");
      return Value(py_strip(s, chars && !chars->is_none() ? &str_arg(chars, "strip") : nullptr, left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return m([s, from_right](const CallArgs& a) {
      a.check("split", 2, {"sep", "maxsplit"});
      const Value* sep = a.get(0, "sep");
      const Value* maxs = a.get(1, "maxsplit");
      const int64_t limit = maxs ? maxs->as_int() : -1;
      List out;
      for (auto& piece : py_split(s, sep && !sep->is_none() ? &str_arg(sep, "split") : nullptr, limit, from_right))
        out.emplace_back(std::move(piece));
      return Value::list(std::move(out));
    });
  }
  if (name == "splitlines")
    return m([s](const CallArgs& a) {
      a.check("splitlines", 1, {"keepends"});
      const Value* keep = a.get(0, "keepends");
      List out;
      for (auto& line : py_splitlines(s, keep && keep->truthy())) out.emplace_back(std::move(line));
      return Value::list(std::move(out));
    });
  if (name == "startswith" || name == "endswith") {
    const bool at_end = name == "endswith";
    return m([s, at_end](const CallArgs& a) {
      a.check(at_end ? "endswith" : "startswith", 1, {});
      if (a.positional.empty()) type_error("startswith() takes at least 1 argument (0 given)");
      return Value(prefix_match(s, a.positional[0], at_end));
    });
  }
  if (name == "upper") return m([s](const CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower") return m([s](const CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return m([s](const CallArgs&) { return Value(py_title(s)); });
  if (name == "capitalize") return m([s](const CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "replace")
    return m([s](const CallArgs& a) {
      a.check("replace", 3, {});
      const Value* count = a.get(2, "");
      return Value(py_replace(s, str_arg(a.get(0, ""), "replace"), str_arg(a.get(1, ""), "replace"),
                              count ? count->as_int() : -1));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return m([s, name](const CallArgs& a) {
      a.check(name, 1, {});
      const std::string& sub = str_arg(a.get(0, ""), name.c_str());
      if (name == "count") return Value(py_count(s, sub));
      const bool rev = name[0] == 'r';
      const int64_t at = py_find(s, sub, rev);
      if (at < 0 && (name == "index" || name == "rindex")) throw Error("ValueError", "substring not found");
      return Value(at);
    });
  }
  if (name == "join")
    return m([s](const CallArgs& a) {
      a.check("join", 1, {});
      const Value* it = a.get(0, "");
      if (!it) type_error("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const Value& x : it->iterate()) {
        if (!x.is_string()) type_error("sequence item: expected str instance, " + x.type_name() + " found");
        out += (first ? "" : s) + x.str();
        first = false;
      }
      return Value(std::move(out));
    });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper")
    return m([s, name](const CallArgs&) { return Value(py_is(s, name)); });
  if (name == "format") return m([s](const CallArgs& a) { return Value(py_format(s, a)); });
  return no_attribute(obj, name);
}

Value dict_method(const Value& obj, const std::string& name) {
  auto m = [&](Function f) { return method("dict." + name, std::move(f)); };
  if (name == "items")
    return m([obj](const CallArgs&) {
      List out;
      for (const auto& [k, v] : obj.dict().items()) out.push_back(Value::tuple({k, v}));
      return Value::lazy(std::move(out), Value::Flavor::kDictItems);
    });
  if (name == "keys")
    return m([obj](const CallArgs&) {
      List out;
      for (const auto& [k, v] : obj.dict().items()) out.push_back(k);
      return Value::lazy(std::move(out), Value::Flavor::kDictKeys);
    });
  if (name == "values")
    return m([obj](const CallArgs&) {
      List out;
      for (const auto& [k, v] : obj.dict().items()) out.push_back(v);
      return Value::lazy(std::move(out), Value::Flavor::kDictValues);
    });
  if (name == "get")
    return m([obj](const CallArgs& a) {
      a.check("get", 2, {});
      const Value* key = a.get(0, "");
      if (!key) type_error("get expected at least 1 argument, got 0");
      const Value* hit = obj.dict().find(*key);
      const Value* dflt = a.get(1, "");
      return hit ? *hit : dflt ? *dflt : Value::none();
    });
  if (name == "copy") return m([obj](const CallArgs&) { return Value::dict(obj.dict()); });
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return unsafe(obj, name);
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  auto m = [&](Function f) { return method("list." + name, std::move(f)); };
  if (name == "index" || name == "count")
    return m([obj, name](const CallArgs& a) {
      a.check(name, 1, {});
      const Value* x = a.get(0, "");
      if (!x) type_error(name + "() takes exactly one argument (0 given)");
      int64_t n = 0;
      for (size_t i = 0; i < obj.items().size(); ++i)
        if (equal(obj.items()[i], *x)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      if (name == "index") throw Error("ValueError", x->repr() + " is not in list");
      return Value(n);
    });
  if (name == "copy" && obj.kind() == K::kList) return m([obj](const CallArgs&) { return Value::list(obj.items()); });
  if (obj.kind() == K::kList && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                 name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return unsafe(obj, name);
  return no_attribute(obj, name);
}

int64_t index_of(const Value& key) {
  if (key.kind() != K::kInt && key.kind() != K::kBool) type_error("indices must be integers, not " + key.type_name());
  return key.as_int();
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case K::kUndefined:
      fail_undefined(obj);
    case K::kDict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined() || !m.undefined_hint().empty()) return m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return no_attribute(obj, name);
    }
    case K::kNamespace: {
      if (const Value* v = obj.dict().find(name)) return *v;
      return no_attribute(obj, name);
    }
    case K::kString:
      return string_method(obj, name);
    case K::kList:
    case K::kTuple:
      return obj.is_plain_sequence() ? list_method(obj, name) : no_attribute(obj, name);
    default:
      return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case K::kUndefined:
      fail_undefined(obj);
    case K::kDict:
    case K::kNamespace: {
      if (const Value* v = obj.dict().find(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.str());
      return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
    }
    case K::kList:
    case K::kTuple:
    case K::kString: {
      if (obj.is_sequence() && !obj.is_plain_sequence())
        type_error("'" + obj.type_name() + "' object is not subscriptable");
      if (key.is_string()) return get_attr(obj, key.str());
      if (key.is_undefined()) fail_undefined(key);
      const int64_t i0 = index_of(key);
      if (obj.is_string()) {
        const std::u32string cps = decode_utf8(obj.str());
        const int64_t n = static_cast<int64_t>(cps.size()), i = i0 < 0 ? i0 + n : i0;
        if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + std::to_string(i0));
        return Value(encode_utf8(std::u32string_view(&cps[static_cast<size_t>(i)], 1)));
      }
      const int64_t n = static_cast<int64_t>(obj.items().size()), i = i0 < 0 ? i0 + n : i0;
      if (i < 0 || i >= n)
        return Value::undefined("'" + obj.type_name() + " object' has no element " + std::to_string(i0));
      return obj.items()[static_cast<size_t>(i)];
    }
    default:
      if (key.is_string()) return get_attr(obj, key.str());
      return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
  }
}

Value make_slice(Context& c, const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto opt = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_undefined()) fail_undefined(v);
    return index_of(v);
  };
  const auto st = opt(step).value_or(1);
  if (st == 0) throw Error("ValueError", "slice step cannot be zero");
  std::u32string cps;
  const bool is_str = obj.is_string();
  if (is_str)
    cps = decode_utf8(obj.str());
  else if (!obj.is_plain_sequence())
    type_error("'" + obj.type_name() + "' object is not subscriptable");
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.items().size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t a = clamp(opt(start), st > 0 ? 0 : n - 1), b = clamp(opt(stop), st > 0 ? n : -1);
  std::u32string s;
  List out;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
    c.tick();
    if (is_str)
      s += cps[static_cast<size_t>(i)];
    else
      out.push_back(obj.items()[static_cast<size_t>(i)]);
  }
  if (is_str) return Value(encode_utf8(s));
  return obj.kind() == K::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value builtin_global(Context& c, const std::string& name) {
  const Limits lim = c.limits;
  if (name == "range")
    return Value::callable("range", [lim](const CallArgs& a) {
      a.check("range", 3, {});
      if (a.positional.empty()) type_error("range expected at least 1 argument, got 0");
      for (const auto& v : a.positional)
        if (v.kind() != K::kInt && v.kind() != K::kBool)
          type_error("'" + v.type_name() + "' object cannot be interpreted as an integer");
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1)
        stop = a.positional[0].as_int();
      else {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() == 3) step = a.positional[2].as_int();
      }
      if (step == 0) throw Error("ValueError", "range() arg 3 must not be zero");
      const long double count =
          step > 0 ? std::max<long double>(0, std::ceil(static_cast<long double>(stop - start) / step))
                   : std::max<long double>(0, std::ceil(static_cast<long double>(start - stop) / -step));
      if (count > static_cast<long double>(lim.max_range))
        throw Error("LimitError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (" +
                                      std::to_string(lim.max_range) + ").");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value::list(std::move(out));
    });
  if (name == "namespace" || name == "dict")
    return Value::callable(name, [name](const CallArgs& a) {
      Dict d;
      if (a.positional.size() > 1) type_error(name + "() takes at most 1 positional argument");
      if (!a.positional.empty()) {
        const Value& init = a.positional[0];
        if (init.is_mapping())
          d = init.dict();
        else
          for (const Value& kv : init.iterate()) {
            const List p = kv.iterate();
            if (p.size() != 2)
              throw Error("ValueError", "dictionary update sequence element has length " + std::to_string(p.size()) +
                                            "; 2 is required");
            d.set(p[0], p[1]);
          }
      }
      for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
      return name == "namespace" ? Value::namespace_(std::move(d)) : Value::dict(std::move(d));
    });
  if (name == "raise_exception")
    return Value::callable("raise_exception", [](const CallArgs& a) -> Value {
      const Value* m = a.get(0, "message");
      throw Error("TemplateError", m ? m->to_str() : "raise_exception() was called");
    });
  if (name == "strftime_now")
    return Value::callable("strftime_now", [](const CallArgs& a) {
      const Value* f = a.get(0, "format");
      if (!f || !f->is_string()) type_error("strftime_now() takes a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      const size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  return Value::undefined();
}

}  // namespace minimakv::jinja::detail
