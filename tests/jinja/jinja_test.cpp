// The Jinja engine's own contract: what the parity test against jinja2 cannot show (limits, errors,
// thread safety), and the Jinja2 behaviours chat templates depend on, pinned to Jinja2's outputs.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "minimakv/jinja/template.h"

namespace minimakv::jinja {
namespace {

std::string render(const std::string& src, const std::string& vars_json = "{}", const Limits& lim = {}) {
  const Value vars = from_json(nlohmann::ordered_json::parse(vars_json));
  return Template::parse(src).render(vars.dict(), lim);
}

std::string error_kind(const std::string& src, const std::string& vars_json = "{}", const Limits& lim = {}) {
  try {
    render(src, vars_json, lim);
  } catch (const Error& e) {
    return e.kind;
  }
  return "none";
}

TEST(Jinja, WhitespaceRulesOfTransformersEnvironment) {
  // trim_blocks and lstrip_blocks on, one trailing newline dropped, '-' and '+' modifiers
  EXPECT_EQ(render("  {% if 1 %}a{% endif %}\n  b\n"), "a  b");
  EXPECT_EQ(render("x  {% if 1 %}a{% endif %}\nb\n\n"), "x  ab\n");
  EXPECT_EQ(render("x\n  {%+ if 1 %}a{% endif +%}\nb"), "x\n  a\nb");
  EXPECT_EQ(render("a  {%- if 1 -%}  b  {%- endif %}  c"), "ab  c");
  EXPECT_EQ(render("a\r\nb{{ 'c' }}\r\n"), "a\nbc");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, ScopingFollowsJinja2) {
  // a loop body's set is per iteration; namespaces carry state out of loops
  EXPECT_EQ(render("{% set x=1 %}{% for i in range(2) %}{{ x }}{% set x=x+1 %}{{ x }};{% endfor %}{{x}}"), "12;12;1");
  EXPECT_EQ(
      render("{% set ns = namespace(a=1) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}"),
      "4");
  // a name the template stores later is undefined inside an earlier loop, even when the variables hold it
  EXPECT_EQ(render("{% for i in [1,2] %}{{ x }};{% endfor %}{% set x = 3 %}", R"({"x": 9})"), ";;");
  EXPECT_EQ(render("{{ n }}{% set n = 1 %}{{ n }}", R"({"n": 5})"), "51");
  // macros see the template's top level at call time, not the caller's locals
  EXPECT_EQ(render("{% macro m(a, b=2) %}[{{a}}{{b}}{{ c }}]{% endmacro %}{% set c = 9 %}{{ m(1) }}{{ m(1, b=3) }}"),
            "[129][139]");
  // break and continue; else runs when no iteration completed
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif "
                   "%}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for i in [1, 2] %}a{% break %}{% else %}b{% endfor %}"), "ab");
}

TEST(Jinja, PythonValueSemantics) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ 7/2 }} {{ -7//2 }} {{ -7%3 }} {{ 2**10 }} {{ 10/5 }}"),
            "1.0 0.30000000000000004 1e-05 3.5 -4 2 1024 2.0");
  EXPECT_EQ(render("{{ [1,'a',none,true] }} {{ {'a':1} }} {{ (1,) }} {{ \"it's\" }}|{{ ['it\\'s'] }}"),
            "[1, 'a', None, True] {'a': 1} (1,) it's|[\"it's\"]");
  EXPECT_EQ(render("{{ 'abc'[::-1] }} {{ [1,2,3][1:] }} {{ 'a,b'.split(',') }} {{ '  x '.strip() }} {{ 'é'|length }}"),
            "cba [2, 3] ['a', 'b'] x 1");
  EXPECT_EQ(render("{{ {'a': [1, 2], 'é': none}|tojson }}|{{ [1]|tojson(indent=2) }}"),
            "{\"a\": [1, 2], \"é\": null}|[\n  1\n]");
  EXPECT_EQ(render("{{ x is defined }} {{ x|default('d') }} {{ none.y }}|{{ 3 is divisibleby 3 }} {{ 2.5|round }} {{ 7 "
                   "// 0.1 }}"),
            "False d |True 2.0 69.0");
  EXPECT_EQ(
      render(
          "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}",
          R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]})"),
      "a,c");
}

TEST(Jinja, ErrorsNameTheirKind) {
  EXPECT_EQ(error_kind("{{ foo.bar }}"), "UndefinedError");
  EXPECT_EQ(error_kind("{{ raise_exception('roles must alternate') }}"), "TemplateError");
  EXPECT_EQ(error_kind("{{ [1].append(2) }}"), "SecurityError");
  EXPECT_EQ(error_kind("{{ 1 + 'a' }}"), "TypeError");
  EXPECT_EQ(error_kind("{{ 1 / 0 }}"), "ZeroDivisionError");
  EXPECT_EQ(error_kind("{% include 'x' %}"), "TemplateSyntaxError");
  EXPECT_EQ(error_kind("{% for x in y %}"), "TemplateSyntaxError");
  // Integers past int64, as a literal and as a '.N' subscript (found by the fuzzer: it used to escape as
  // std::out_of_range), and as a digit part of an attribute path, which reads past every list's end.
  EXPECT_EQ(error_kind("{{ 99999999999999999999 }}"), "TemplateSyntaxError");
  EXPECT_EQ(error_kind("{{ x.99999999999999999999 }}"), "TemplateSyntaxError");
  EXPECT_EQ(render("{{ xs | map(attribute='99999999999999999999') | list | length }}", R"({"xs": [[1], [2]]})"), "2");
  try {
    Template::parse("a\nb\n{{ 1 + }}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind, "TemplateSyntaxError");
    EXPECT_EQ(e.line, 3);
  }
}

TEST(Jinja, HostileTemplatesHitALimitInsteadOfHangingOrExhaustingMemory) {
  Limits lim;
  lim.max_output_bytes = 1 << 20;
  lim.max_steps = 200'000;
  EXPECT_EQ(error_kind("{{ range(1000000)|length }}", "{}", lim), "LimitError");
  EXPECT_EQ(error_kind("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", lim),
            "LimitError");
  EXPECT_EQ(error_kind("{{ 'x' * 1000000000 }}", "{}", lim), "LimitError");
  EXPECT_EQ(error_kind("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "{}", lim), "LimitError");
  EXPECT_EQ(
      error_kind("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "{}", lim),
      "LimitError");
  EXPECT_EQ(error_kind("{{ 3 ** 99 }}", "{}", lim), "LimitError");
  // nesting is bounded at parse time, so neither parser nor interpreter recursion can overflow the stack
  EXPECT_EQ(error_kind("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), "TemplateSyntaxError");
  EXPECT_EQ(error_kind("{{ " + std::string(5000, '-') + "1 }}"), "TemplateSyntaxError");
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{% if 1 %}";
  EXPECT_EQ(error_kind(deep), "TemplateSyntaxError");
}

TEST(Jinja, RandomBytesNeverCrashTheParserOrTheInterpreter) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string alphabet = "{}%#-+()[]'\",.:|~*/=<>! \n\tabcxyz019_ifelsforendsetmacro";
  Limits lim;
  lim.max_steps = 100'000;
  lim.max_output_bytes = 1 << 16;
  for (int i = 0; i < 3000; ++i) {
    std::string src;
    const size_t n = rng() % 80;
    for (size_t k = 0; k < n; ++k) src += alphabet[rng() % alphabet.size()];
    try {
      render(src, R"({"x": [1, "a", {"b": null}], "y": "s"})", lim);
    } catch (const Error&) {
      // an error of the engine's own kinds is the expected answer to garbage
    }
  }
}

TEST(Jinja, OneParsedTemplateRendersOnManyThreadsAtOnce) {
  const Template t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.k %}{{ m.k }},{% endfor %}={{ ns.n "
      "}}");
  std::vector<std::thread> threads;
  std::vector<std::string> got(8), want(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      nlohmann::ordered_json j;
      int sum = 0;
      for (int k = 0; k <= i; ++k) {
        j["messages"].push_back({{"k", k}});
        want[static_cast<size_t>(i)] += std::to_string(k) + ",";
        sum += k;
      }
      want[static_cast<size_t>(i)] += "=" + std::to_string(sum);
      for (int rep = 0; rep < 200; ++rep) got[static_cast<size_t>(i)] = t.render(from_json(j).dict());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace minimakv::jinja
