// Statements: the body of a template or block, and each tag's grammar.
#include "parser.h"

namespace minimakv::jinja::detail {

void Parser::expect_op(const char* op) {
  if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  ++i_;
}

std::string Parser::expect_name() {
  if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
  return t_[i_++].text;
}

void Parser::expect_block_end() {
  if (cur().type != Tok::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
  ++i_;
}

std::string Parser::describe(const Token& t) {
  switch (t.type) {
    case Tok::kEof:
      return "end of template";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kPrintEnd:
      return "end of print statement";
    case Tok::kString:
      return "a string";
    default:
      return "'" + t.text + "'";
  }
}

// Parses until one of `ends` (a block tag name) or the end of the template (only when ends is
// empty). `end` receives the tag found; its block is left for the caller to finish.
Body Parser::parse_body(std::initializer_list<const char*> ends, std::string& end) {
  Body body;
  while (true) {
    const Token& tk = cur();
    if (tk.type == Tok::kEof) {
      if (ends.size()) {
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("unexpected end of template, expected " + want);
      }
      return body;
    }
    if (tk.type == Tok::kText) {
      body.push_back(std::make_unique<TextStmt>(tk.line, tk.text));
      ++i_;
    } else if (tk.type == Tok::kPrintBegin) {
      const int line = tk.line;
      ++i_;
      auto e = parse_tuple(true);
      if (cur().type != Tok::kPrintEnd) fail("expected end of print statement, got " + describe(cur()));
      ++i_;
      body.push_back(std::make_unique<PrintStmt>(line, std::move(e)));
    } else if (tk.type == Tok::kBlockBegin) {
      const Token& name = peek();
      if (name.type != Tok::kName) {
        ++i_;
        fail("expected a statement name, got " + describe(name));
      }
      for (const char* e : ends)
        if (name.text == e) {
          end = e;
          i_ += 2;  // the caller reads the rest of this tag
          return body;
        }
      ++i_;
      body.push_back(parse_statement());
    } else {
      fail("unexpected " + describe(tk));
    }
  }
}

StmtPtr Parser::parse_statement() {
  Nest nest(*this);
  const int line = cur().line;
  const std::string kw = expect_name();
  if (kw == "if") return parse_if(line);
  if (kw == "for") return parse_for(line);
  if (kw == "set") return parse_set(line);
  if (kw == "macro") return parse_macro(line);
  if (kw == "filter") return parse_filter_block(line);
  if (kw == "with") return parse_with(line);
  if (kw == "generation") {
    auto s = std::make_unique<BlockStmt>(line);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endgeneration"}, end);
    expect_block_end();
    return s;
  }
  if (kw == "break" || kw == "continue") {
    if (loops_ == 0) fail("'" + kw + "' outside of a loop");
    expect_block_end();
    return std::make_unique<LoopControlStmt>(line, kw == "break");
  }
  if (kw == "include" || kw == "import" || kw == "from" || kw == "extends" || kw == "block" || kw == "call" ||
      kw == "do")
    throw Error("TemplateSyntaxError", "'" + kw + "' is not supported in chat templates", line);
  throw Error("TemplateSyntaxError", "unknown tag '" + kw + "'", line);
}

StmtPtr Parser::parse_if(int line) {
  auto s = std::make_unique<IfStmt>(line);
  ExprPtr cond = parse_tuple(false);  // Jinja2: no conditional expression at the top of an if
  expect_block_end();
  while (true) {
    std::string end;
    Body b = parse_body({"elif", "else", "endif"}, end);
    s->branches.emplace_back(std::move(cond), std::move(b));
    if (end == "elif") {
      cond = parse_tuple(false);
      expect_block_end();
      continue;
    }
    if (end == "else") {
      expect_block_end();
      std::string e2;
      s->otherwise = parse_body({"endif"}, e2);
    }
    expect_block_end();
    return s;
  }
}

void Parser::parse_targets(std::vector<std::string>& names, bool& unpack) {
  const bool paren = is_op("(");
  if (paren) ++i_;
  names.push_back(expect_name());
  while (is_op(",")) {
    ++i_;
    unpack = true;
    if (cur().type != Tok::kName) break;  // trailing comma
    names.push_back(expect_name());
  }
  if (paren) {
    unpack = true;
    expect_op(")");
  }
}

StmtPtr Parser::parse_for(int line) {
  auto s = std::make_unique<ForStmt>(line);
  parse_targets(s->targets, s->unpack);
  if (!is_name("in")) fail("expected 'in', got " + describe(cur()));
  ++i_;
  s->iter = parse_tuple(false);
  if (is_name("if")) {
    ++i_;
    s->filter = parse_expression(true);
  }
  if (is_name("recursive")) fail("recursive loops are not supported");
  expect_block_end();
  ++loops_;
  std::string end;
  s->body = parse_body({"endfor", "else"}, end);
  --loops_;
  if (end == "else") {
    expect_block_end();
    std::string e2;
    s->otherwise = parse_body({"endfor"}, e2);
  }
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_set(int line) {
  auto s = std::make_unique<SetStmt>(line);
  if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
    s->targets.push_back(expect_name());
    ++i_;
    s->attr = expect_name();
  } else {
    parse_targets(s->targets, s->unpack);
  }
  if (is_op("=")) {
    ++i_;
    s->value = parse_tuple(true);
    expect_block_end();
    return s;
  }
  if (!s->attr.empty() || s->unpack) fail("a block set takes one name");
  while (is_op("|")) {
    ++i_;
    s->filters.push_back(parse_filter(nullptr));
  }
  expect_block_end();
  std::string end;
  s->body = parse_body({"endset"}, end);
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_macro(int line) {
  auto s = std::make_unique<MacroStmt>(line);
  s->name = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    s->params.push_back(expect_name());
    if (is_op("=")) {
      ++i_;
      s->defaults.push_back(parse_expression(true));
    } else {
      if (!s->defaults.empty() && s->defaults.back()) fail("non-default argument follows default argument");
      s->defaults.push_back(nullptr);
    }
  }
  expect_op(")");
  expect_block_end();
  const int saved = loops_;
  loops_ = 0;
  std::string end;
  s->body = parse_body({"endmacro"}, end);
  loops_ = saved;
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_filter_block(int line) {
  auto s = std::make_unique<FilterBlockStmt>(line);
  s->filters.push_back(parse_filter(nullptr));
  while (is_op("|")) {
    ++i_;
    s->filters.push_back(parse_filter(nullptr));
  }
  expect_block_end();
  std::string end;
  s->body = parse_body({"endfilter"}, end);
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_with(int line) {
  auto s = std::make_unique<WithStmt>(line);
  while (cur().type != Tok::kBlockEnd) {
    if (!s->assignments.empty()) expect_op(",");
    std::string n = expect_name();
    expect_op("=");
    s->assignments.emplace_back(std::move(n), parse_expression(true));
  }
  expect_block_end();
  std::string end;
  s->body = parse_body({"endwith"}, end);
  expect_block_end();
  return s;
}

ParsedTemplate parse(std::string_view source, bool trim_blocks, bool lstrip_blocks) {
  ParsedTemplate t;
  t.body = Parser(tokenize(source, {trim_blocks, lstrip_blocks})).parse_template();
  resolve_frames(t);
  return t;
}

}  // namespace minimakv::jinja::detail
