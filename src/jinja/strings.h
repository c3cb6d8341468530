// Python's str methods over UTF-8, as chat templates call them. Whitespace is Python's (Unicode)
// whitespace; case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other
// scripts keep their case; Python's one-to-many mappings such as "ß".upper() == "SS" are not made).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/jinja/value.h"

namespace minimakv::jinja::detail {

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
// sep null: runs of whitespace; limit < 0: no limit. ValueError for an empty separator.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t limit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_upper(std::string s);
std::string py_lower(std::string s);
std::string py_title(const std::string& s);       // str.title()
std::string py_capitalize(const std::string& s);  // str.capitalize()
std::string jinja_title(const std::string& s);    // the `title` filter (splits on "-", whitespace and opening brackets)
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
int64_t py_count(const std::string& s, const std::string& sub);
int64_t py_find(const std::string& s, const std::string& sub, bool from_right);  // code-point index or -1
bool py_is(const std::string& s, const std::string& what);                       // isdigit, isalpha, ...
// str.format with "{}", "{0}", "{name}" fields and "{{"/"}}"; format specs are refused.
std::string py_format(const std::string& s, const CallArgs& args);

}  // namespace minimakv::jinja::detail
