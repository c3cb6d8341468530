// The parsed template: expression and statement nodes. The parser (parser.cpp) builds them; the
// interpreter (interpreter.cpp) gives each its eval()/exec(). Nodes are immutable after parsing, so one
// parsed template renders on any number of threads at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "minimakv/jinja/value.h"

namespace minimakv::jinja::detail {

struct Context;

struct Expr {
  explicit Expr(int l) : line(l) {}
  virtual ~Expr() = default;
  virtual Value eval(Context& c) const = 0;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Kwarg {
  std::string name;
  ExprPtr value;
};

struct Literal final : Expr {
  Literal(int l, Value v) : Expr(l), value(std::move(v)) {}
  Value eval(Context& c) const override;
  Value value;
};

struct Name final : Expr {
  Name(int l, std::string n) : Expr(l), name(std::move(n)) {}
  Value eval(Context& c) const override;
  std::string name;
};

struct GetAttr final : Expr {
  GetAttr(int l, ExprPtr o, std::string n) : Expr(l), obj(std::move(o)), name(std::move(n)) {}
  Value eval(Context& c) const override;
  ExprPtr obj;
  std::string name;
};

struct GetItem final : Expr {
  GetItem(int l, ExprPtr o, ExprPtr i) : Expr(l), obj(std::move(o)), index(std::move(i)) {}
  Value eval(Context& c) const override;
  ExprPtr obj, index;
};

struct Slice final : Expr {
  Slice(int l, ExprPtr o) : Expr(l), obj(std::move(o)) {}
  Value eval(Context& c) const override;
  ExprPtr obj, start, stop, step;  // any may be null
};

struct Call final : Expr {
  Call(int l, ExprPtr f) : Expr(l), fn(std::move(f)) {}
  Value eval(Context& c) const override;
  ExprPtr fn;
  std::vector<ExprPtr> args;
  std::vector<Kwarg> kwargs;
};

// `value | name(args)`; value is null inside a filter block (the block's output is the input).
struct FilterExpr final : Expr {
  FilterExpr(int l, ExprPtr v, std::string n) : Expr(l), value(std::move(v)), name(std::move(n)) {}
  Value eval(Context& c) const override;
  Value apply(Context& c, Value input) const;
  ExprPtr value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<Kwarg> kwargs;
};

struct TestExpr final : Expr {
  TestExpr(int l, ExprPtr v, std::string n, bool neg)
      : Expr(l), value(std::move(v)), name(std::move(n)), negated(neg) {}
  Value eval(Context& c) const override;
  ExprPtr value;
  std::string name;
  bool negated;
  std::vector<ExprPtr> args;
  std::vector<Kwarg> kwargs;
};

struct Unary final : Expr {
  Unary(int l, std::string o, ExprPtr x) : Expr(l), op(std::move(o)), operand(std::move(x)) {}
  Value eval(Context& c) const override;
  std::string op;  // "-", "+", "not"
  ExprPtr operand;
};

struct Binary final : Expr {
  Binary(int l, std::string o, ExprPtr a, ExprPtr b)
      : Expr(l), op(std::move(o)), lhs(std::move(a)), rhs(std::move(b)) {}
  Value eval(Context& c) const override;
  std::string op;  // + - * / // % ** ~ and or
  ExprPtr lhs, rhs;
};

struct Compare final : Expr {
  Compare(int l, ExprPtr f) : Expr(l), first(std::move(f)) {}
  Value eval(Context& c) const override;
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;  // == != < <= > >= in notin
};

struct CondExpr final : Expr {
  CondExpr(int l, ExprPtr t, ExprPtr c, ExprPtr e)
      : Expr(l), then(std::move(t)), cond(std::move(c)), otherwise(std::move(e)) {}
  Value eval(Context& c) const override;
  ExprPtr then, cond, otherwise;  // otherwise may be null: undefined
};

struct ListLit final : Expr {
  ListLit(int l, bool t) : Expr(l), tuple(t) {}
  Value eval(Context& c) const override;
  bool tuple;
  std::vector<ExprPtr> items;
};

struct DictLit final : Expr {
  explicit DictLit(int l) : Expr(l) {}
  Value eval(Context& c) const override;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

// ---- statements

struct Stmt {
  explicit Stmt(int l) : line(l) {}
  virtual ~Stmt() = default;
  virtual void exec(Context& c, std::string& out) const = 0;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt final : Stmt {
  TextStmt(int l, std::string t) : Stmt(l), text(std::move(t)) {}
  void exec(Context& c, std::string& out) const override;
  std::string text;
};

struct PrintStmt final : Stmt {
  PrintStmt(int l, ExprPtr e) : Stmt(l), expr(std::move(e)) {}
  void exec(Context& c, std::string& out) const override;
  ExprPtr expr;
};

struct IfStmt final : Stmt {
  explicit IfStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body otherwise;
};

// Names a frame (a loop body, a macro body, a block) binds to undefined when it starts: those Jinja2's
// compile-time analysis finds stored before any load in the frame, with no enclosing frame defining
// them (scoping.cpp). They shadow the context, as in Jinja2.
using FrameLocals = std::vector<std::string>;

struct ForStmt final : Stmt {
  explicit ForStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::vector<std::string> targets;  // one name, or several to unpack each item into
  bool unpack = false;
  ExprPtr iter, filter;  // filter may be null
  Body body, otherwise;
  FrameLocals body_locals, else_locals;
};

// `{% set x = e %}`, `{% set a, b = e %}`, `{% set ns.attr = e %}`, or a block set (body, filters).
struct SetStmt final : Stmt {
  explicit SetStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::vector<std::string> targets;
  bool unpack = false;
  std::string attr;  // non-empty: targets[0] is a namespace and this its attribute
  ExprPtr value;     // null for a block set
  Body body;
  std::vector<std::unique_ptr<FilterExpr>> filters;  // block set: applied to the body's output
  FrameLocals body_locals;
};

struct MacroStmt final : Stmt {
  explicit MacroStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null where none
  Body body;
  FrameLocals body_locals;
};

struct FilterBlockStmt final : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  FrameLocals body_locals;
};

struct WithStmt final : Stmt {
  explicit WithStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  Body body;
  FrameLocals body_locals;
};

// transformers' `{% generation %}` (marks assistant text for masks; renders its body) and a plain body.
struct BlockStmt final : Stmt {
  explicit BlockStmt(int l) : Stmt(l) {}
  void exec(Context& c, std::string& out) const override;
  Body body;
  FrameLocals body_locals;
};

struct LoopControlStmt final : Stmt {
  LoopControlStmt(int l, bool b) : Stmt(l), is_break(b) {}
  void exec(Context& c, std::string& out) const override;
  bool is_break;
};

struct ParsedTemplate {
  Body body;
  FrameLocals root_locals;
};

// Throws jinja::Error("TemplateSyntaxError") with the line of the offending token.
ParsedTemplate parse(std::string_view source, bool trim_blocks, bool lstrip_blocks);

// Fills every frame's locals (and the root's), as Jinja2's symbol tracking decides them.
void resolve_frames(ParsedTemplate& t);

}  // namespace minimakv::jinja::detail
