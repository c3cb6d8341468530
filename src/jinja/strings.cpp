#include "strings.h"

#include <algorithm>
#include <cctype>

namespace minimakv::jinja::detail {

namespace {

bool ascii_alpha(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char32_t up(char32_t c);
char32_t low(char32_t c);
// Python's "cased" letters approximated: ASCII letters and every non-ASCII letter-ish code point above
// U+00BF (so title() does not break words at accented letters).
bool cased(char32_t c) {
  return ascii_alpha(c) || (c >= 0xc0 && !is_python_space(c));
}
// Case pairs of ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what chat text mostly holds);
// other scripts keep their case.
char32_t up(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    const bool pair_even = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177);  // upper at even code points
    if (pair_even) return (c & 1) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c : c - 1;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
char32_t low(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x138 && c != 0x149 && c != 0x17f) {
    const bool pair_even = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177);
    if (pair_even) return (c & 1) ? c : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_python_space(c); };
  size_t a = 0, b = cps.size();
  if (left)
    while (a < b && strip_it(cps[a])) ++a;
  if (right)
    while (b > a && strip_it(cps[b - 1])) --b;
  return encode_utf8(std::u32string_view(cps).substr(a, b - a));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t limit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw Error("ValueError", "empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string::npos) break;
        out.push_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.push_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string::npos) break;
      out.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // whitespace runs; leading and trailing whitespace never makes empty pieces
  const std::u32string cps = decode_utf8(s);
  if (!from_right) {
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (limit >= 0 && static_cast<int64_t>(out.size()) == limit) {
        size_t e = cps.size();
        while (e > i && is_python_space(cps[e - 1])) --e;
        out.push_back(encode_utf8(std::u32string_view(cps).substr(i, e - i)));
        return out;
      }
      size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  size_t i = cps.size();
  while (i > 0) {
    while (i > 0 && is_python_space(cps[i - 1])) --i;
    if (i == 0) break;
    if (limit >= 0 && static_cast<int64_t>(out.size()) == limit) {
      size_t b = 0;
      while (b < i && is_python_space(cps[b])) ++b;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(b, i - b)));
      break;
    }
    size_t j = i;
    while (j > 0 && !is_python_space(cps[j - 1])) --j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(j, i - j)));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  const std::u32string cps = decode_utf8(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    size_t end = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) out.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return out;
}

std::string py_upper(std::string s) {
  std::u32string out;
  for (char32_t c : decode_utf8(s)) {
    if (c == 0xdf)
      out += U"SS";  // the one-to-many mapping chat text meets most
    else
      out += up(c);
  }
  return encode_utf8(out);
}

std::string py_lower(std::string s) {
  std::u32string cps = decode_utf8(s);
  for (char32_t& c : cps) c = low(c);
  return encode_utf8(cps);
}

std::string py_title(const std::string& s) {
  std::u32string cps = decode_utf8(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    const bool is_c = cased(c);
    c = is_c ? (prev_cased ? low(c) : up(c)) : c;
    prev_cased = is_c;
  }
  return encode_utf8(cps);
}

std::string py_capitalize(const std::string& s) {
  std::u32string cps = decode_utf8(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? up(cps[i]) : low(cps[i]);
  return encode_utf8(cps);
}

std::string jinja_title(const std::string& s) {
  // Jinja2's do_title: split keeping the separators "([-\s({\[<]+)", then each piece's first character
  // upper and the rest lower.
  const std::u32string cps = decode_utf8(s);
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
  };
  std::u32string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) out += sep ? cps[k] : (k == i ? up(cps[k]) : low(cps[k]));
    i = j;
  }
  return encode_utf8(out);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (old.empty()) {  // Python inserts repl between every code point (and at both ends)
    const std::u32string cps = decode_utf8(s);
    std::string out;
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) out += encode_utf8(std::u32string_view(&cps[i], 1));
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(decode_utf8(s).size()) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(decode_utf8(std::string_view(s).substr(0, hit)).size());
}

bool py_is(const std::string& s, const std::string& what) {
  const std::u32string cps = decode_utf8(s);
  if (cps.empty()) return false;
  if (what == "islower" || what == "isupper") {  // every cased character in that case, and at least one
    bool any = false;
    for (char32_t c : cps) {
      const bool lower = up(c) != c || c == 0xdf, upper = low(c) != c;
      if (!lower && !upper) continue;
      any = true;
      if ((what == "islower") != lower) return false;
    }
    return any;
  }
  for (char32_t c : cps) {
    const bool digit = c >= '0' && c <= '9';
    const bool ok = what == "isdigit"   ? digit
                    : what == "isalpha" ? ascii_alpha(c)
                    : what == "isalnum" ? ascii_alpha(c) || digit
                                        : is_python_space(c);
    if (!ok) return false;
  }
  return true;
}

std::string py_format(const std::string& s, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw Error("ValueError", "Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t e = s.find('}', i);
    if (e == std::string::npos) throw Error("ValueError", "Single '{' encountered in format string");
    const std::string field = s.substr(i + 1, e - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      throw Error("ValueError", "format specs and field lookups are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const size_t k = std::stoul(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      for (const auto& [name, val] : args.keyword)
        if (name == field) v = &val;
      if (!v) throw Error("KeyError", "'" + field + "'");
    }
    if (!v) throw Error("IndexError", "Replacement index out of range for positional args tuple");
    out += v->to_str();
    i = e;
  }
  return out;
}

}  // namespace minimakv::jinja::detail
