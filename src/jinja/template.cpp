#include "minimakv/jinja/template.h"

#include "interpreter.h"

namespace minimakv::jinja {

struct Template::Body {
  detail::ParsedTemplate parsed;
};

Template Template::parse(std::string_view source, const Options& opt) {
  Template t;
  auto b = std::make_shared<Body>();
  b->parsed = detail::parse(source, opt.trim_blocks, opt.lstrip_blocks);
  t.body_ = std::move(b);
  return t;
}

std::string Template::render(const Dict& vars, const Limits& limits) const {
  detail::Context c;
  c.globals = &vars;
  c.limits = limits;
  detail::Scope root;
  c.root = c.scope = &root;
  for (const auto& n : body_->parsed.root_locals) root.vars[n] = Value::undefined("'" + n + "' is undefined");
  std::string out;
  c.exec_body(body_->parsed.body, out);
  return out;
}

}  // namespace minimakv::jinja
