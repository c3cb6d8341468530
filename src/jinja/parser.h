// The parser's state and grammar (statements in parse_statements.cpp, expressions in
// parse_expressions.cpp). Recursive descent over the lexer's tokens with Jinja2's precedence (lowest
// first): conditional expression, or, and, not, comparison, + -, ~, * / // %, ** (left-associative,
// as Jinja2 parses it), unary - +, then primaries with their postfixes (. [] ()) and filters and tests.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "ast.h"
#include "lexer.h"

namespace minimakv::jinja::detail {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}
  Body parse_template() {
    std::string end;
    return parse_body({}, end);
  }

 private:
  // ---- tokens
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  [[noreturn]] void fail(const std::string& what) const { throw Error("TemplateSyntaxError", what, cur().line); }
  void expect_op(const char* op);
  std::string expect_name();
  void expect_block_end();
  static std::string describe(const Token& t);

  // Bounds the recursion of nested expressions and blocks, so a hostile template cannot exhaust the
  // stack ("((((...", "{% if %}{% if %}...").
  struct Nest {
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail("nesting deeper than " + std::to_string(kMaxDepth));
    }
    ~Nest() { --p.depth_; }
    Parser& p;
  };
  static constexpr int kMaxDepth = 200;

  // ---- statements
  // Parses until one of `ends` (a block tag name) or the end of the template (only when ends is
  // empty). `end` receives the tag found; its block is left for the caller to finish.
  Body parse_body(std::initializer_list<const char*> ends, std::string& end);
  StmtPtr parse_statement();
  StmtPtr parse_if(int line);
  void parse_targets(std::vector<std::string>& names, bool& unpack);
  StmtPtr parse_for(int line);
  StmtPtr parse_set(int line);
  StmtPtr parse_macro(int line);
  StmtPtr parse_filter_block(int line);
  StmtPtr parse_with(int line);

  // ---- expressions
  // Comma-separated expressions become a tuple ("{{ a, b }}", "for x in a, b").
  ExprPtr parse_tuple(bool with_condexpr);
  bool starts_expression() const;
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  // The integer literal token at the cursor (consumed); TemplateSyntaxError when it overflows int64.
  ExprPtr parse_int_literal();
  void parse_call_args(std::vector<ExprPtr>& args, std::vector<Kwarg>& kwargs);
  ExprPtr parse_postfix(ExprPtr e);
  // obj[i], obj[a:b:c], or obj[i, j] (a tuple key, as Jinja2 allows)
  ExprPtr parse_subscript(int line, ExprPtr obj);
  std::unique_ptr<FilterExpr> parse_filter(ExprPtr value);
  ExprPtr parse_filter_expr(ExprPtr e);
  template <typename Next>
  ExprPtr binary_level(std::initializer_list<const char*> ops, Next next) {
    ExprPtr e = (this->*next)();
    while (cur().type == Tok::kOp &&
           std::any_of(ops.begin(), ops.end(), [&](const char* o) { return cur().text == o; })) {
      const int line = cur().line;
      std::string op = t_[i_++].text;
      e = std::make_unique<Binary>(line, op, std::move(e), (this->*next)());
    }
    return e;
  }
  ExprPtr parse_math1() { return binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // loops enclosing the statement being parsed (break/continue need one)
};

}  // namespace minimakv::jinja::detail
