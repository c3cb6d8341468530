// Expressions, with Jinja2's precedence and its quirks (no conditional expression at the top of an
// `if`, tests taking one bare argument, `x[]` as an empty-tuple key).
#include <charconv>
#include <cstdlib>

#include "parser.h"

namespace minimakv::jinja::detail {

// Comma-separated expressions become a tuple ("{{ a, b }}", "for x in a, b").
ExprPtr Parser::parse_tuple(bool with_condexpr) {
  const int line = cur().line;
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto t = std::make_unique<ListLit>(line, true);
  t->items.push_back(std::move(first));
  while (is_op(",")) {
    ++i_;
    if (!starts_expression()) break;
    t->items.push_back(parse_expression(with_condexpr));
  }
  return t;
}

bool Parser::starts_expression() const {
  const Token& k = cur();
  if (k.type == Tok::kName) return k.text != "in" && k.text != "if" && k.text != "else" && k.text != "recursive";
  if (k.type == Tok::kString || k.type == Tok::kInt || k.type == Tok::kFloat) return true;
  return k.type == Tok::kOp && (k.text == "(" || k.text == "[" || k.text == "{" || k.text == "-" || k.text == "+");
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  Nest nest(*this);
  if (!with_condexpr) return parse_or();
  ExprPtr e = parse_or();
  while (is_name("if")) {
    const int line = cur().line;
    ++i_;
    ExprPtr cond = parse_or();
    ExprPtr otherwise;
    if (is_name("else")) {
      ++i_;
      otherwise = parse_expression(true);
    }
    e = std::make_unique<CondExpr>(line, std::move(e), std::move(cond), std::move(otherwise));
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    const int line = cur().line;
    ++i_;
    e = std::make_unique<Binary>(line, "or", std::move(e), parse_and());
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    const int line = cur().line;
    ++i_;
    e = std::make_unique<Binary>(line, "and", std::move(e), parse_not());
  }
  return e;
}

ExprPtr Parser::parse_not() {
  Nest nest(*this);
  if (is_name("not")) {
    const int line = cur().line;
    ++i_;
    return std::make_unique<Unary>(line, "not", parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr e = parse_math1();
  std::unique_ptr<Compare> cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      ++i_;
    } else if (is_name("in")) {
      op = "in";
      ++i_;
    } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
      op = "notin";
      i_ += 2;
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<Compare>(line, std::move(e));
    cmp->rest.emplace_back(op, parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(e);
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nest nest(*this);
  const int line = cur().line;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    std::string op = t_[i_++].text;
    e = std::make_unique<Unary>(line, op, parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& k = cur();
  const int line = k.line;
  switch (k.type) {
    case Tok::kName: {
      ++i_;
      if (k.text == "true" || k.text == "True") return std::make_unique<Literal>(line, Value(true));
      if (k.text == "false" || k.text == "False") return std::make_unique<Literal>(line, Value(false));
      if (k.text == "none" || k.text == "None") return std::make_unique<Literal>(line, Value::none());
      return std::make_unique<Name>(line, k.text);
    }
    case Tok::kString: {
      std::string s;
      while (cur().type == Tok::kString) s += t_[i_++].text;  // adjacent literals concatenate
      return std::make_unique<Literal>(line, Value(std::move(s)));
    }
    case Tok::kInt:
      return parse_int_literal();
    case Tok::kFloat: {
      ++i_;
      return std::make_unique<Literal>(line, Value(std::strtod(k.text.c_str(), nullptr)));
    }
    case Tok::kOp: {
      if (k.text == "(") {
        ++i_;
        if (is_op(")")) {
          ++i_;
          return std::make_unique<ListLit>(line, true);
        }
        ExprPtr first = parse_expression(true);
        if (is_op(")")) {
          ++i_;
          return first;
        }
        auto t = std::make_unique<ListLit>(line, true);
        t->items.push_back(std::move(first));
        while (is_op(",")) {
          ++i_;
          if (is_op(")")) break;
          t->items.push_back(parse_expression(true));
        }
        expect_op(")");
        return t;
      }
      if (k.text == "[") {
        ++i_;
        auto l = std::make_unique<ListLit>(line, false);
        while (!is_op("]")) {
          if (!l->items.empty()) expect_op(",");
          if (is_op("]")) break;
          l->items.push_back(parse_expression(true));
        }
        expect_op("]");
        return l;
      }
      if (k.text == "{") {
        ++i_;
        auto d = std::make_unique<DictLit>(line);
        while (!is_op("}")) {
          if (!d->items.empty()) expect_op(",");
          if (is_op("}")) break;
          ExprPtr key = parse_expression(true);
          expect_op(":");
          d->items.emplace_back(std::move(key), parse_expression(true));
        }
        expect_op("}");
        return d;
      }
      break;
    }
    default:
      break;
  }
  fail("unexpected " + describe(k));
}

void Parser::parse_call_args(std::vector<ExprPtr>& args, std::vector<Kwarg>& kwargs) {
  expect_op("(");
  while (!is_op(")")) {
    if (!args.empty() || !kwargs.empty()) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
      std::string n = expect_name();
      ++i_;
      kwargs.push_back({std::move(n), parse_expression(true)});
    } else {
      if (!kwargs.empty()) fail("positional argument follows keyword argument");
      args.push_back(parse_expression(true));
    }
  }
  expect_op(")");
}

ExprPtr Parser::parse_int_literal() {
  const auto& k = t_[i_++];
  int64_t v = 0;
  const auto r = std::from_chars(k.text.data(), k.text.data() + k.text.size(), v);
  if (r.ec != std::errc()) throw Error("TemplateSyntaxError", "integer literal out of range", k.line);
  return std::make_unique<Literal>(k.line, Value(v));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    const int line = cur().line;
    if (is_op(".")) {
      ++i_;
      if (cur().type == Tok::kName) {
        e = std::make_unique<GetAttr>(line, std::move(e), t_[i_++].text);
      } else if (cur().type == Tok::kInt) {
        e = std::make_unique<GetItem>(line, std::move(e), parse_int_literal());
      } else {
        fail("expected a name after '.', got " + describe(cur()));
      }
    } else if (is_op("[")) {
      ++i_;
      e = parse_subscript(line, std::move(e));
    } else if (is_op("(")) {
      auto c = std::make_unique<Call>(line, std::move(e));
      parse_call_args(c->args, c->kwargs);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

// obj[i], obj[a:b:c], or obj[i, j] (a tuple key, as Jinja2 allows)
ExprPtr Parser::parse_subscript(int line, ExprPtr obj) {
  std::vector<ExprPtr> keys;
  while (true) {
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]") && !is_op(",")) {
      if (is_op(":")) {
        if (++colons > 2) fail("too many ':' in a slice");
        ++i_;
        continue;
      }
      if (parts[colons]) fail("expected ']', ',' or ':'");
      parts[colons] = parse_expression(true);
    }
    if (colons == 0) {
      if (!parts[0]) break;  // x[] indexes with the empty tuple, as Jinja2 parses it
      keys.push_back(std::move(parts[0]));
    } else {
      if (!keys.empty() || is_op(",")) fail("slices inside a tuple subscript are not supported");
      expect_op("]");
      auto s = std::make_unique<Slice>(line, std::move(obj));
      s->start = std::move(parts[0]);
      s->stop = std::move(parts[1]);
      s->step = std::move(parts[2]);
      return s;
    }
    if (is_op(",")) {
      ++i_;
      if (is_op("]")) break;
      continue;
    }
    break;
  }
  expect_op("]");
  if (keys.size() == 1) return std::make_unique<GetItem>(line, std::move(obj), std::move(keys[0]));
  auto t = std::make_unique<ListLit>(line, true);
  t->items = std::move(keys);
  return std::make_unique<GetItem>(line, std::move(obj), std::move(t));
}

std::unique_ptr<FilterExpr> Parser::parse_filter(ExprPtr value) {
  const int line = cur().line;
  std::string name = expect_name();
  while (is_op(".")) {  // dotted filter names
    ++i_;
    name += "." + expect_name();
  }
  auto f = std::make_unique<FilterExpr>(line, std::move(value), std::move(name));
  if (is_op("(")) parse_call_args(f->args, f->kwargs);
  return f;
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      ++i_;
      e = parse_filter(std::move(e));
    } else if (is_name("is")) {
      const int line = cur().line;
      ++i_;
      bool neg = false;
      if (is_name("not")) {
        neg = true;
        ++i_;
      }
      std::string name = expect_name();
      auto t = std::make_unique<TestExpr>(line, std::move(e), std::move(name), neg);
      if (is_op("(")) {
        parse_call_args(t->args, t->kwargs);
      } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                  cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
        t->args.push_back(parse_postfix(parse_primary()));
      }
      e = std::move(t);
    } else if (is_op("(")) {
      auto c = std::make_unique<Call>(cur().line, std::move(e));
      parse_call_args(c->args, c->kwargs);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

}  // namespace minimakv::jinja::detail
