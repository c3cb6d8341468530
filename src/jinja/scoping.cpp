// Jinja2 decides at compile time what each name in a frame refers to, and the decision is visible:
// a name a frame stores before it loads it, with no enclosing frame referring to it, starts out
// undefined in that frame, even when the render's variables hold it. So
//   {% for m in messages %}{{ x }}{% endfor %}{% set x = 1 %}
// prints nothing for x inside the loop, and a loop body's `{% set %}` never reads the outer value it
// hides. This pass repeats Jinja2's symbol tracking (its frames: the template, each loop body and
// loop else, each macro body, block set, filter block, with and generation body; stores in some but
// not all branches of an if resolve from outside) and records, per frame, the names to bind to
// undefined on entry.
#include <set>
#include <unordered_map>

#include "ast.h"

namespace minimakv::jinja::detail {

namespace {

enum class Ref { kResolve, kAlias, kUndefined, kParam };

struct Symbols {
  const Symbols* parent = nullptr;
  std::unordered_map<std::string, Ref> refs;
  std::set<std::string> stores;

  bool find(const std::string& n) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(n)) return true;
    return false;
  }
  void load(const std::string& n) {
    if (!find(n)) refs[n] = Ref::kResolve;
  }
  void store(const std::string& n) {
    stores.insert(n);
    if (!refs.count(n)) refs[n] = parent && parent->find(n) ? Ref::kAlias : Ref::kUndefined;
  }
  void param(const std::string& n) {
    stores.insert(n);
    refs[n] = Ref::kParam;
  }
  // Merges the branches of an if: what only some branches store is looked up outside.
  void branch_update(const std::vector<Symbols>& branches) {
    std::unordered_map<std::string, size_t> stored;
    for (const auto& b : branches)
      for (const auto& t : b.stores)
        if (!stores.count(t)) ++stored[t];
    for (const auto& b : branches) {
      for (const auto& [n, r] : b.refs) refs[n] = r;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& [n, count] : stored) {
      if (count == branches.size()) continue;
      refs[n] = parent && parent->find(n) ? Ref::kAlias : Ref::kResolve;
    }
  }
  FrameLocals undefined_names() const {
    FrameLocals out;
    for (const auto& [n, r] : refs)
      if (r == Ref::kUndefined) out.push_back(n);
    return out;
  }
};

// A frame met while visiting its parent, analysed once the parent's symbols are complete.
struct Pending {
  const Body* body = nullptr;
  std::vector<std::string> params;
  std::vector<std::string> stored_targets;  // `with` targets
  FrameLocals* locals = nullptr;
};

void loads(const Expr* e, Symbols& s);

void loads_all(const std::vector<ExprPtr>& es, Symbols& s) {
  for (const auto& e : es) loads(e.get(), s);
}
void loads_kw(const std::vector<Kwarg>& ks, Symbols& s) {
  for (const auto& k : ks) loads(k.value.get(), s);
}

void loads(const Expr* e, Symbols& s) {
  if (!e) return;
  if (auto* n = dynamic_cast<const Name*>(e)) return s.load(n->name);
  if (auto* x = dynamic_cast<const GetAttr*>(e)) return loads(x->obj.get(), s);
  if (auto* x = dynamic_cast<const GetItem*>(e)) {
    loads(x->obj.get(), s);
    return loads(x->index.get(), s);
  }
  if (auto* x = dynamic_cast<const Slice*>(e)) {
    loads(x->obj.get(), s);
    loads(x->start.get(), s);
    loads(x->stop.get(), s);
    return loads(x->step.get(), s);
  }
  if (auto* x = dynamic_cast<const Call*>(e)) {
    loads(x->fn.get(), s);
    loads_all(x->args, s);
    return loads_kw(x->kwargs, s);
  }
  if (auto* x = dynamic_cast<const FilterExpr*>(e)) {
    loads(x->value.get(), s);
    loads_all(x->args, s);
    return loads_kw(x->kwargs, s);
  }
  if (auto* x = dynamic_cast<const TestExpr*>(e)) {
    loads(x->value.get(), s);
    loads_all(x->args, s);
    return loads_kw(x->kwargs, s);
  }
  if (auto* x = dynamic_cast<const Unary*>(e)) return loads(x->operand.get(), s);
  if (auto* x = dynamic_cast<const Binary*>(e)) {
    loads(x->lhs.get(), s);
    return loads(x->rhs.get(), s);
  }
  if (auto* x = dynamic_cast<const Compare*>(e)) {
    loads(x->first.get(), s);
    for (const auto& [op, r] : x->rest) loads(r.get(), s);
    return;
  }
  if (auto* x = dynamic_cast<const CondExpr*>(e)) {
    loads(x->cond.get(), s);
    loads(x->then.get(), s);
    return loads(x->otherwise.get(), s);
  }
  if (auto* x = dynamic_cast<const ListLit*>(e)) return loads_all(x->items, s);
  if (auto* x = dynamic_cast<const DictLit*>(e)) {
    for (const auto& [k, v] : x->items) {
      loads(k.get(), s);
      loads(v.get(), s);
    }
  }
}

void visit_body(const Body& body, Symbols& s, std::vector<Pending>& pending);

// One `if` of Jinja2's AST: its test, its body, its elif chain (each an if of its own) and its else.
void visit_if(const IfStmt& st, size_t first, bool with_else, Symbols& s, std::vector<Pending>& pending) {
  loads(st.branches[first].first.get(), s);
  std::vector<Symbols> branches(3, s);
  visit_body(st.branches[first].second, branches[0], pending);
  for (size_t k = first + 1; k < st.branches.size() && with_else; ++k) visit_if(st, k, false, branches[1], pending);
  if (with_else) visit_body(st.otherwise, branches[2], pending);
  s.branch_update(branches);
}

void visit_body(const Body& body, Symbols& s, std::vector<Pending>& pending) {
  for (const auto& stp : body) {
    Stmt* st = stp.get();
    if (auto* p = dynamic_cast<PrintStmt*>(st)) {
      loads(p->expr.get(), s);
    } else if (auto* i = dynamic_cast<IfStmt*>(st)) {
      visit_if(*i, 0, true, s, pending);
    } else if (auto* f = dynamic_cast<ForStmt*>(st)) {
      loads(f->iter.get(), s);
      std::vector<std::string> params = f->targets;
      params.push_back("loop");
      pending.push_back({&f->body, params, {}, (&f->body_locals)});
      pending.push_back({&f->otherwise, {}, {}, (&f->else_locals)});
    } else if (auto* a = dynamic_cast<SetStmt*>(st)) {
      if (a->value) {
        loads(a->value.get(), s);
        if (!a->attr.empty())
          s.load(a->targets[0]);
        else
          for (const auto& t : a->targets) s.store(t);
      } else {
        s.store(a->targets[0]);
        pending.push_back({&a->body, {}, {}, (&a->body_locals)});
      }
    } else if (auto* m = dynamic_cast<MacroStmt*>(st)) {
      s.store(m->name);
      pending.push_back({&m->body, m->params, {}, (&m->body_locals)});
    } else if (auto* fb = dynamic_cast<FilterBlockStmt*>(st)) {
      for (const auto& flt : fb->filters) loads(flt.get(), s);
      pending.push_back({&fb->body, {}, {}, (&fb->body_locals)});
    } else if (auto* w = dynamic_cast<WithStmt*>(st)) {
      std::vector<std::string> targets;
      for (const auto& [n, e] : w->assignments) {
        loads(e.get(), s);
        targets.push_back(n);
      }
      pending.push_back({&w->body, {}, targets, (&w->body_locals)});
    } else if (auto* b = dynamic_cast<BlockStmt*>(st)) {
      pending.push_back({&b->body, {}, {}, (&b->body_locals)});
    }
  }
}

void analyse_frame(const Pending& p, const Symbols* parent) {
  Symbols s;
  s.parent = parent;
  for (const auto& n : p.params) s.param(n);
  for (const auto& n : p.stored_targets) s.store(n);
  std::vector<Pending> children;
  visit_body(*p.body, s, children);
  for (const auto& c : children) analyse_frame(c, &s);
  *p.locals = s.undefined_names();
}

}  // namespace

void resolve_frames(ParsedTemplate& t) {
  analyse_frame({&t.body, {}, {}, &t.root_locals}, nullptr);
}

}  // namespace minimakv::jinja::detail
