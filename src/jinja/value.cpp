#include "minimakv/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace minimakv::jinja {

const std::string Value::empty_;

// ---- Dict

const Value* Dict::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.str());
  for (const auto& [k, v] : items_)
    if (!k.is_string() && equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value v) {
  if (key.is_string()) {
    const auto it = index_.find(key.str());
    if (it != index_.end()) {
      items_[it->second].second = std::move(v);
      return;
    }
    index_.emplace(key.str(), items_.size());
  } else {
    for (auto& [k, old] : items_)
      if (!k.is_string() && equal(k, key)) {
        old = std::move(v);
        return;
      }
  }
  items_.emplace_back(std::move(key), std::move(v));
}

void Dict::set_at(size_t pos, Value v) {
  items_[pos].second = std::move(v);
}

// ---- CallArgs

const Value* CallArgs::get(size_t pos, std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return pos < positional.size() ? &positional[pos] : nullptr;
}

void CallArgs::check(std::string_view fn, size_t max_positional, std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional)
    throw Error("TypeError", std::string(fn) + "() takes at most " + std::to_string(max_positional) +
                                 " positional arguments (" + std::to_string(positional.size()) + " given)");
  for (const auto& [k, v] : keyword)
    if (std::find(names.begin(), names.end(), k) == names.end())
      throw Error("TypeError", std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
}

// ---- Value construction

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
Value::Value(double v) : kind_(Kind::kFloat), f_(v) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::lazy(List items, Flavor f) {
  Value v = list(std::move(items));
  v.flavor_ = f;
  return v;
}

Value Value::failed_generator(const Error& e) {
  Value v = lazy({}, Flavor::kGenerator);
  v.err_ = std::make_shared<const Error>(e);
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::namespace_(Dict initial) {
  Value v = dict(std::move(initial));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

int64_t Value::as_int() const {
  return i_;
}

double Value::as_float() const {
  return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_);
}

void Value::raise_undefined() const {
  const std::string& h = undefined_hint();
  const bool unsafe = h.rfind("access to attribute", 0) == 0;
  throw Error(unsafe ? "SecurityError" : "UndefinedError", h.empty() ? "value is undefined" : h);
}

Value Value::call(const CallArgs& args) const {
  if (kind_ != Kind::kCallable) {
    if (is_undefined()) raise_undefined();
    throw Error("TypeError", "'" + type_name() + "' object is not callable");
  }
  return (*fn_)(args);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      if (flavor_ == Flavor::kGenerator || flavor_ == Flavor::kIterator) return true;
      return !list_->empty();
    case Kind::kTuple:
      return !list_->empty();
    case Kind::kDict:
      return dict_->size() != 0;
    case Kind::kCallable:
    case Kind::kNamespace:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (flavor_) {
        case Flavor::kGenerator:
          return "generator";
        case Flavor::kIterator:
          return "list_reverseiterator";
        case Flavor::kDictItems:
          return "dict_items";
        case Flavor::kDictKeys:
          return "dict_keys";
        case Flavor::kDictValues:
          return "dict_values";
        default:
          return "list";
      }
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
    case Kind::kNamespace:
      return "Namespace";
  }
  return "?";
}

// ---- text

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // d[.ddd]e±XX, shortest round-trip digits
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {  // Python: repr uses exponent notation outside [1e-4, 1e16)
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const auto point = static_cast<size_t>(exp) + 1;
    if (digits.size() <= point)
      out = digits + std::string(point - digits.size(), '0') + ".0";
    else
      out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return neg ? "-" + out : out;
}

namespace {

// Python's str.isprintable() is false for controls, separators other than the space, and format
// characters: repr() escapes those. (Unassigned code points, which Python also escapes, are printed.)
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) ||
      c == 0x3000 || c == 0xfeff || (c >= 0xd800 && c <= 0xdfff))
    return false;
  return true;
}

std::string string_repr(const std::string& s) {
  // Python picks single quotes unless the text has a single quote and no double quote.
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char32_t q = has_single && !has_double ? '"' : '\'';
  std::string out(1, static_cast<char>(q));
  for (char32_t c : decode_utf8(s)) {
    char b[16];
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (!printable(c)) {
      std::snprintf(b, sizeof b, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else
      out += encode_utf8(std::u32string_view(&c, 1));
  }
  out += static_cast<char>(q);
  return out;
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kString:
      return string_repr(*s_);
    case Kind::kList:
    case Kind::kTuple: {
      if (flavor_ == Flavor::kGenerator || flavor_ == Flavor::kIterator) return "<" + type_name() + " object>";
      if (flavor_ != Flavor::kList) return type_name() + "(" + Value::list(*list_).repr() + ")";
      std::string out = kind_ == Kind::kList ? "[" : "(";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (kind_ == Kind::kTuple && list_->size() == 1) out += ",";
      return out + (kind_ == Kind::kList ? "]" : ")");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items()) {
        out += (first ? "" : ", ") + k.repr() + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    default:
      return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return float_repr(f_);
    case Kind::kString:
      return *s_;
    case Kind::kCallable:
      return "<function " + *s_ + ">";
    default:
      return repr();
  }
}

size_t Value::length() const {
  switch (kind_) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return decode_utf8(*s_).size();
    case Kind::kList:
    case Kind::kTuple:
      if (flavor_ == Flavor::kGenerator || flavor_ == Flavor::kIterator)
        throw Error("TypeError", "object of type '" + type_name() + "' has no len()");
      return list_->size();
    case Kind::kDict:
    case Kind::kNamespace:
      return dict_->size();
    default:
      throw Error("TypeError", "object of type '" + type_name() + "' has no len()");
  }
}

List Value::iterate() const {
  if (err_) throw *err_;
  switch (kind_) {
    case Kind::kUndefined:
      return {};
    case Kind::kString: {
      List out;
      for (char32_t c : decode_utf8(*s_)) out.emplace_back(encode_utf8(std::u32string_view(&c, 1)));
      return out;
    }
    case Kind::kList:
    case Kind::kTuple:
      return *list_;
    case Kind::kDict: {
      List out;
      for (const auto& [k, v] : dict_->items()) out.push_back(k);
      return out;
    }
    default:
      throw Error("TypeError", "'" + type_name() + "' object is not iterable");
  }
}

// ---- comparison

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.is_sequence() && b.is_sequence()) {
    if (a.flavor() != Value::Flavor::kList || b.flavor() != Value::Flavor::kList) return &a.items() == &b.items();
    if (a.kind() != b.kind() || a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i)
      if (!equal(a.items()[i], b.items()[i])) return false;
    return true;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* o = b.dict().find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.dict() == &b.dict();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return decode_utf8(a.str()) < decode_utf8(b.str());
  if (a.is_plain_sequence() && b.is_plain_sequence() && b.kind() == a.kind()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw Error("TypeError",
              "'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// ---- JSON

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  const std::u32string cps = ensure_ascii ? decode_utf8(s) : std::u32string();
  auto esc = [&](uint32_t c) {
    char b[16];
    std::snprintf(b, sizeof b, "\\u%04x", c);
    out += b;
  };
  auto one = [&](char32_t c, std::string_view raw) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      default:
        break;
    }
    if (c < 0x20)
      esc(c);
    else if (ensure_ascii && c > 0x7e) {
      if (c > 0xffff) {
        const uint32_t v = c - 0x10000;
        esc(0xd800 + (v >> 10));
        esc(0xdc00 + (v & 0x3ff));
      } else
        esc(c);
    } else
      out += raw;
  };
  if (ensure_ascii) {
    for (char32_t c : cps) one(c, encode_utf8(std::u32string_view(&c, 1)));
  } else {
    for (size_t i = 0; i < s.size(); ++i) one(static_cast<unsigned char>(s[i]), std::string_view(&s[i], 1));
  }
  out += '"';
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.str();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return float_repr(k.as_float());
    default:
      throw Error("TypeError", "keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

void json_value(const Value& v, const JsonStyle& st, const std::string& item_sep, const std::string& key_sep, int depth,
                std::string& out) {
  using K = Value::Kind;
  if (depth > 256) throw Error("LimitError", "tojson: nesting deeper than 256");
  auto newline = [&](int d) {
    if (!st.indent) return;
    out += '\n';
    out.append(static_cast<size_t>(*st.indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.kind()) {
    case K::kNone:
      out += "null";
      return;
    case K::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case K::kInt:
      out += std::to_string(v.as_int());
      return;
    case K::kFloat: {
      const double f = v.as_float();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : float_repr(f);
      return;
    }
    case K::kString:
      json_string(v.str(), st.ensure_ascii, out);
      return;
    case K::kList:
    case K::kTuple: {
      if (v.flavor() != Value::Flavor::kList)
        throw Error("TypeError", "Object of type " + v.type_name() + " is not JSON serializable");
      const auto& xs = v.items();
      if (xs.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(xs[i], st, item_sep, key_sep, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case K::kDict: {
      std::vector<std::pair<std::string, const Value*>> kv;
      for (const auto& [k, x] : v.dict().items()) kv.emplace_back(json_key(k), &x);
      if (st.sort_keys)
        std::stable_sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (kv.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < kv.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(kv[i].first, st.ensure_ascii, out);
        out += key_sep;
        json_value(*kv[i].second, st, item_sep, key_sep, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw Error("TypeError", "Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  // Python's defaults: (', ', ': '), or (',', ': ') once an indent is given
  std::string item = style.indent ? "," : ", ", key = ": ";
  if (style.separators) std::tie(item, key) = *style.separators;
  std::string out;
  json_value(v, style, item, key, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<double>(u)) : Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List xs;
      xs.reserve(j.size());
      for (const auto& x : j) xs.push_back(from_json(x));
      return Value::list(std::move(xs));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.set(Value(k), from_json(x));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

// ---- UTF-8

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) {  // invalid byte: kept as U+FFFD, as Python's "replace"
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : c & (0x7f >> n);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d >> 6) != 2) ok = false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80)
      out += static_cast<char>(c);
    else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace minimakv::jinja
