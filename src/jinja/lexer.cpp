#include "lexer.h"

#include <cctype>

#include "minimakv/jinja/value.h"

namespace minimakv::jinja::detail {

namespace {

[[noreturn]] void syntax(const std::string& what, int line) {
  throw Error("TemplateSyntaxError", what, line);
}

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string normalise_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  const auto c = static_cast<char32_t>(cp);
  out += encode_utf8(std::u32string_view(&c, 1));
}

// Python's unicode-escape decoding of a string literal's body; unknown escapes stay as written.
std::string unescape(std::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k])))
          syntax("truncated \\x, \\u or \\U escape", line);
        const char h = s[i + k];
        v = v * 16 +
            static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      i += n;
      return v;
    };
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        append_utf8(out, hex(2));
        break;
      case 'u':
        append_utf8(out, hex(4));
        break;
      case 'U': {
        const uint32_t v = hex(8);
        if (v > 0x10ffff) syntax("\\U escape out of range", line);
        append_utf8(out, v);
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(s[++i] - '0');
          append_utf8(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : s_(std::move(src)), opt_(opt) {}

  std::vector<Token> run() {
    while (p_ < s_.size()) {
      const size_t q = next_tag(p_);
      std::string text = s_.substr(p_, q - p_);
      const int text_line = line_;
      count_lines(p_, q);
      if (q == s_.size()) {
        emit_text(std::move(text), text_line);
        p_ = q;
        break;
      }
      const char kind = s_[q + 1];  // '{', '%' or '#'
      const char mod = q + 2 < s_.size() ? s_[q + 2] : '\0';
      const bool line_start = p_ == 0 || s_[p_ - 1] == '\n';
      if (mod == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+' && opt_.lstrip_blocks) {
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || line_start) {
          bool blank = true;
          for (size_t k = from; k < text.size(); ++k)
            blank = blank && (text[k] == ' ' || text[k] == '\t' || text[k] == '\f' || text[k] == '\v');
          if (blank) text.resize(from);
        }
      }
      emit_text(std::move(text), text_line);
      p_ = q + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#')
        comment();
      else if (kind == '%' && is_raw(p_))
        raw();
      else
        tag(kind == '{' ? Tok::kPrintBegin : Tok::kBlockBegin);
    }
    out_.push_back({Tok::kEof, "", line_});
    return std::move(out_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  void count_lines(size_t a, size_t b) {
    for (size_t i = a; i < b; ++i) line_ += s_[i] == '\n';
  }

  void emit_text(std::string t, int line) {
    if (strip_next_) {
      size_t k = 0;
      while (k < t.size() && is_ws(t[k])) ++k;
      t.erase(0, k);
      strip_next_ = false;
    }
    if (!t.empty()) out_.push_back({Tok::kText, std::move(t), line});
  }

  // After a tag's end marker: '-' strips the next text's leading whitespace; trim_blocks drops one
  // newline after a block or comment unless '+'.
  void after_end(char mod, bool block) {
    if (mod == '-')
      strip_next_ = true;
    else if (block && mod != '+' && opt_.trim_blocks && p_ < s_.size() && s_[p_] == '\n') {
      ++p_;
      ++line_;
    }
  }

  void comment() {
    const size_t e = s_.find("#}", p_);
    if (e == std::string::npos) syntax("missing end of comment tag", line_);
    const char mod = e > p_ && (s_[e - 1] == '-' || s_[e - 1] == '+') ? s_[e - 1] : '\0';
    count_lines(p_, e);
    p_ = e + 2;
    after_end(mod, true);
  }

  // `{% raw %}` (the tag's start already consumed): is the next word "raw" and then the tag's end?
  bool is_raw(size_t at) const {
    size_t i = at;
    while (i < s_.size() && is_ws(s_[i])) ++i;
    if (s_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < s_.size() && is_ws(s_[i])) ++i;
    if (i < s_.size() && s_[i] == '-') ++i;  // Jinja2 takes "{% raw +%}" for an unknown tag "raw"
    return s_.compare(i, 2, "%}") == 0;
  }

  void raw() {
    size_t e = s_.find("%}", p_);
    const char open_mod = s_[e - 1] == '-' || s_[e - 1] == '+' ? s_[e - 1] : '\0';
    count_lines(p_, e);
    p_ = e + 2;
    after_end(open_mod, true);
    // find {% endraw %} (with optional modifiers)
    for (size_t i = p_; i + 1 < s_.size(); ++i) {
      if (s_[i] != '{' || s_[i + 1] != '%') continue;
      size_t k = i + 2;
      const char lmod = k < s_.size() && (s_[k] == '-' || s_[k] == '+') ? s_[k] : '\0';
      if (lmod) ++k;
      while (k < s_.size() && is_ws(s_[k])) ++k;
      if (s_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < s_.size() && is_ws(s_[k])) ++k;
      char rmod = '\0';
      if (k < s_.size() && (s_[k] == '-' || s_[k] == '+')) rmod = s_[k++];
      if (s_.compare(k, 2, "%}") != 0) continue;
      std::string body = s_.substr(p_, i - p_);
      if (lmod == '-')
        while (!body.empty() && is_ws(body.back())) body.pop_back();
      const int body_line = line_;
      count_lines(p_, k + 2);
      if (strip_next_)
        emit_text(std::move(body), body_line);
      else if (!body.empty())
        out_.push_back({Tok::kText, std::move(body), body_line});
      p_ = k + 2;
      after_end(rmod, true);
      return;
    }
    syntax("missing {% endraw %}", line_);
  }

  void tag(Tok begin) {
    out_.push_back({begin, "", line_});
    const bool print = begin == Tok::kPrintBegin;
    const char close = print ? '}' : '%';
    std::vector<char> brackets;
    bool prev_dot = false;
    while (true) {
      while (p_ < s_.size() && is_ws(s_[p_])) line_ += s_[p_++] == '\n';
      if (p_ >= s_.size())
        syntax(print ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'",
               line_);
      const char c = s_[p_];
      // end marker, outside brackets: "}}" / "%}" with an optional '-' or '+' before it
      if (brackets.empty()) {
        const char mod = (c == '-' || c == '+') ? c : '\0';
        const size_t at = p_ + (mod ? 1 : 0);
        if (at + 1 < s_.size() && s_[at] == close && s_[at + 1] == '}') {
          p_ = at + 2;
          out_.push_back({print ? Tok::kPrintEnd : Tok::kBlockEnd, "", line_});
          after_end(mod, !print);
          return;
        }
      }
      const int line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p_;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        out_.push_back({Tok::kName, s_.substr(p_, e - p_), line});
        p_ = e;
        prev_dot = false;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        number(line, prev_dot);
        prev_dot = false;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = p_ + 1;
        while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
        if (e >= s_.size()) syntax("unexpected end of string", line);
        out_.push_back({Tok::kString, unescape(std::string_view(s_).substr(p_ + 1, e - p_ - 1), line), line});
        count_lines(p_, e);
        p_ = e + 1;
        prev_dot = false;
        continue;
      }
      static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op;
      for (const char* t : two)
        if (s_.compare(p_, 2, t) == 0) op = t;
      if (op.empty()) {
        if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
          syntax(std::string("unexpected char '") + c + "'", line);
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") brackets.push_back(op[0]);
      if (op == ")" || op == "]" || op == "}") {
        const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
        if (brackets.empty() || brackets.back() != want) syntax("unexpected '" + op + "'", line);
        brackets.pop_back();
      }
      out_.push_back({Tok::kOp, op, line});
      p_ += op.size();
      prev_dot = op == ".";
    }
  }

  void number(int line, bool after_dot) {
    size_t e = p_;
    auto digits = [&] {
      while (e < s_.size() &&
             (std::isdigit(static_cast<unsigned char>(s_[e])) ||
              (s_[e] == '_' && e + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e + 1])))))
        ++e;
    };
    digits();
    bool is_float = false;
    if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        e = k;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = p_; k < e; ++k)
      if (s_[k] != '_') text += s_[k];
    out_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line});
    p_ = e;
  }

  std::string s_;
  LexOptions opt_;
  size_t p_ = 0;
  int line_ = 1;
  bool strip_next_ = false;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opt) {
  return Lexer(normalise_newlines(source), opt).run();
}

}  // namespace minimakv::jinja::detail
