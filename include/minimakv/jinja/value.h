// The values a chat template computes with: Python's data model as Jinja2 exposes it.
//
// Owns: Value (undefined, none, bool, int, float, str, list, tuple, dict, callable, namespace) and the
// Python semantics templates rely on: truthiness, equality across int/float/bool, ordering, str() and
// repr() (Python's float repr included), json.dumps as transformers' `tojson` calls it, and conversion
// from and to JSON request bodies (object key order kept).
// Invariants: lists, tuples and dicts are immutable once built (templates render in Jinja2's immutable
// sandbox), so copies share them; a namespace is the one mutable container (`{% set ns.x = ... %}`),
// shared by reference like Python's. Strings are UTF-8; length and indexing count code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace minimakv::jinja {

// A template that cannot be parsed (line is 1-based) or a render that fails: both carry Jinja2's kind
// of error ("TemplateSyntaxError", "UndefinedError", "TypeError", "TemplateError" for raise_exception,
// "SecurityError", "LimitError") so callers and tests can tell them apart.
struct Error : std::runtime_error {
  Error(std::string error_kind, const std::string& message, int at_line = 0)
      : std::runtime_error(message), kind(std::move(error_kind)), line(at_line) {}
  std::string kind;
  int line;
};

class Value;
using List = std::vector<Value>;

class Dict;
struct CallArgs;
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kCallable,
    kNamespace
  };
  // What Python object a kList stands for. Jinja2's select/map/unique/items return generators and
  // reverse an iterator (always true, no len(), not subscriptable, printed as an object); dict's
  // items()/keys()/values() return views (no subscript, printed as "dict_items([...])").
  enum class Flavor : uint8_t { kList, kGenerator, kIterator, kDictItems, kDictKeys, kDictValues };

  Value() = default;                              // undefined
  static Value undefined(std::string hint = {});  // hint: what was looked up, for the error message
  static Value none();
  Value(bool b);  // NOLINT: implicit conversions mirror Python literals
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items);
  static Value lazy(List items, Flavor f);  // a kList of another flavor
  // A generator whose iteration raises `e`: Jinja2's generator filters fail only once consumed.
  static Value failed_generator(const Error& e);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value callable(std::string name, Function fn);
  static Value namespace_(Dict initial);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  Flavor flavor() const { return flavor_; }
  bool is_plain_sequence() const { return is_sequence() && flavor_ == Flavor::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }              // kBool
  int64_t as_int() const;                          // kInt or kBool
  double as_float() const;                         // any number
  const std::string& str() const { return *s_; }   // kString
  const List& items() const { return *list_; }     // kList / kTuple
  const Dict& dict() const { return *dict_; }      // kDict / kNamespace
  Dict& namespace_dict() const { return *dict_; }  // kNamespace: the one mutable container
  Dict& loop_dict() const { return *dict_; }       // the interpreter's `loop`, advanced in place as Jinja2's is
  const std::string& undefined_hint() const { return s_ ? *s_ : empty_; }
  // The error using an undefined raises: UndefinedError with its hint, or SecurityError for the
  // sandbox's refusal of a mutating method (which Jinja2 also hands out as an undefined).
  [[noreturn]] void raise_undefined() const;
  Value call(const CallArgs& args) const;  // kCallable; TypeError otherwise
  const std::string& callable_name() const { return *s_; }

  bool truthy() const;
  // Python's str() and repr(); str() of undefined is "" (Jinja2's default Undefined).
  std::string to_str() const;
  std::string repr() const;
  std::string type_name() const;  // Python's type name, for messages

  // Code points (strings), items (sequences, dicts); TypeError otherwise.
  size_t length() const;
  // Iteration as Python does it: a string's characters, a sequence's items, a dict's keys; undefined
  // iterates as empty. TypeError for anything else.
  List iterate() const;

 private:
  Kind kind_ = Kind::kUndefined;
  Flavor flavor_ = Flavor::kList;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // string, undefined hint, callable name
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
  std::shared_ptr<const Error> err_;  // failed_generator
  static const std::string empty_;
};

// Insertion-ordered mapping. Keys are Values (strings nearly always); string keys are also indexed.
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(Value key, Value v);      // replaces an existing key in place
  void set_at(size_t pos, Value v);  // the value of the pos-th key
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // string keys
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, or the positional at `pos`, or nullptr.
  const Value* get(size_t pos, std::string_view name) const;
  // TypeError when more positionals than `max_positional` or a keyword outside `names` was given.
  void check(std::string_view fn, size_t max_positional, std::initializer_list<std::string_view> names) const;
};



// Python ==, with 1 == 1.0 == True; containers element-wise; undefined equals only undefined.
bool equal(const Value& a, const Value& b);
// Python <: numbers, strings (code point order), sequences lexicographically; TypeError otherwise.
bool less(const Value& a, const Value& b);

// Python float repr: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string float_repr(double v);

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
struct JsonStyle {
  std::optional<int> indent;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key); Python's defaults if unset
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});

Value from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers shared by the builtins.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
bool is_python_space(char32_t c);

}  // namespace minimakv::jinja
