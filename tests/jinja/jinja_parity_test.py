#!/usr/bin/env python3
"""Parity of minimakv's Jinja engine with Python's jinja2, configured as transformers configures it
for chat templates (immutable sandbox, trim_blocks, lstrip_blocks, loop controls, its tojson,
raise_exception and the {% generation %} tag).

Two parts, both on fresh random inputs (seeded by --seed, default: time):
  1. chat templates: the four templates in tests/jinja/templates (written in the style of the Qwen3,
     Llama 3, Mistral and Gemma templates, using the constructs those use) and the embedded model's own
     template, each over --conversations random conversations (roles, tool calls, tools, reasoning,
     typed content parts, Unicode, template-like text, generation prompt on and off);
  2. random template programs: --programs templates drawn from a grammar of expressions and
     statements (filters, tests, methods, slices, loops, namespaces, macros, whitespace control) over
     random variables.
Outputs must be identical; where jinja2 raises, so must we (and vice versa). Every chat-template
render must agree. Random programs may disagree in at most --program-tolerance of cases (default
0.2%): what remains there are Python-object corners no chat template relies on (set arithmetic on
dict views, which prints in hash order). Prints the first few differences; exits non-zero past the
bounds.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

LAZY = re.compile(r"<\w+ object( \w+)? at 0x", re.IGNORECASE)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class GenerationTag(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


ENV = make_env()


def reference(template, variables):
    try:
        return {"output": ENV.from_string(template).render(**variables)}
    except Exception as e:  # noqa: BLE001 - every failure counts as "raised"
        return {"error": type(e).__name__, "message": str(e)}


# ---------------------------------------------------------------- conversations

WORDS = ["alpha", "beta", "gamma", "naïve", "café", "東京", "🙂", "x", "  padded  ", "tab\there", "line\nbreak",
         "{{ not_a_var }}", "{% if %}", "quote'single", 'quote"double', "back\\slash", "</think>", "<think>",
         "<tool_response>", "</tool_response>", "\u00a0nbsp", "\u3000ideo", "", "\n", "end."]


def rand_text(rng, n=None):
    n = rng.randint(0, 8) if n is None else n
    return "".join(rng.choice(WORDS) + rng.choice([" ", "", "\n", "  "]) for _ in range(n))


def rand_args(rng):
    if rng.random() < 0.3:
        return json.dumps({"q": rand_text(rng, 2)})
    return {"q": rand_text(rng, 2), "n": rng.randint(-5, 99), "f": rng.choice([0.5, 1.0, 2.25, 1e-5]), "ok": rng.random() < 0.5,
            "items": [rng.randint(0, 9) for _ in range(rng.randint(0, 3))], "none": None}


def rand_message(rng, role):
    m = {"role": role}
    if role == "assistant" and rng.random() < 0.3:
        m["tool_calls"] = [{"type": "function", "function": {"name": rng.choice(["lookup", "get_time", "search"]), "arguments": rand_args(rng)}}
                           for _ in range(rng.randint(1, 2))]
        m["content"] = rng.choice([None, "", rand_text(rng)])
        if m["content"] is None and rng.random() < 0.5:
            del m["content"]
        return m
    if role == "assistant" and rng.random() < 0.3:
        m["reasoning_content"] = rand_text(rng)
    if role == "assistant" and rng.random() < 0.2:
        m["content"] = "<think>\n" + rand_text(rng) + "\n</think>\n\n" + rand_text(rng)
        return m
    if role == "tool" and rng.random() < 0.3:
        m["content"] = {"result": rand_text(rng, 2), "code": rng.randint(0, 3)}
        return m
    if role == "user" and rng.random() < 0.15:
        m["content"] = [{"type": "text", "text": rand_text(rng)}] + ([{"type": "image"}] if rng.random() < 0.5 else [])
        return m
    if role == "user" and rng.random() < 0.1:
        m["content"] = "<tool_response>" + rand_text(rng, 2) + "</tool_response>"
        return m
    m["content"] = rand_text(rng)
    return m


def rand_conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append(rand_message(rng, "system"))
    n = rng.randint(1, 7)
    alternate = rng.random() < 0.6
    for i in range(n):
        if alternate:
            role = "user" if i % 2 == 0 else "assistant"
        else:
            role = rng.choice(["user", "assistant", "tool", "system", "ipython"])
        msgs.append(rand_message(rng, role))
    v = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6, "bos_token": "<s>", "eos_token": "</s>"}
    if rng.random() < 0.4:
        v["tools"] = [{"type": "function", "function": {"name": "lookup", "description": rand_text(rng, 3),
                                                        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                                       "required": ["q"]}}}
                      for _ in range(rng.randint(1, 2))]
    elif rng.random() < 0.3:
        v["tools"] = None
    if rng.random() < 0.5:
        v["enable_thinking"] = rng.random() < 0.5
    if rng.random() < 0.2:
        v["builtin_tools"] = ["code_interpreter", "brave_search", "wolfram_alpha"][: rng.randint(1, 3)]
    if rng.random() < 0.2:
        v["tools_in_user_message"] = rng.random() < 0.5
    if rng.random() < 0.2:
        v["date_string"] = "7 Mar 2031"
    return v


# ---------------------------------------------------------------- random programs

VARS = ["n", "m", "f", "s", "t", "lst", "nums", "d", "nested", "flag", "nothing", "missing"]
FILTERS = ["length", "upper", "lower", "trim", "first", "last", "list", "reverse", "string", "int", "float", "abs",
           "tojson", "items", "sort", "unique", "join", "default", "capitalize", "title", "count", "round", "sum",
           "min", "max", "e", "indent", "wordcount", "dictsort", "select", "reject", "map", "batch", "center", "safe"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "boolean", "true", "false", "odd", "even", "divisibleby", "eq", "ne", "lt", "gt", "in", "lower", "upper",
         "callable", "sameas"]
METHODS = ["strip()", "lstrip()", "rstrip()", "strip('ab')", "split()", "split(',')", "split(' ', 1)", "rsplit(' ', 1)",
           "startswith('a')", "endswith('z')", "startswith(('a', 'b'))", "upper()", "lower()", "title()", "capitalize()",
           "replace('a', 'b')", "replace('a', 'b', 1)", "find('a')", "rfind('a')", "count('a')", "splitlines()",
           "isdigit()", "isalpha()", "isspace()", "join(['x', 'y'])", "format(1, 2)"]


def program_vars(rng):
    return {"n": rng.randint(-3, 12), "m": rng.choice([0, 1, 2, 7]), "f": rng.choice([0.0, 0.5, -1.25, 3.0, 1e-7, 2e16]),
            "s": rng.choice(["", "abc", " Hello World ", "a,b,,c", "line1\nline2\r\nline3", "ÜBER straße", "zz9", "a b  c"]),
            "t": rng.choice(["x", "ab", "AB", "1.5", "42", " 7 "]),
            "lst": rng.choice([[], [1, 2, 3], ["b", "a", "c"], [3, 1, 2, 1], ["x"], [[1, 2], [3, 4]]]),
            "nums": [rng.randint(-5, 5) for _ in range(rng.randint(0, 5))],
            "d": rng.choice([{}, {"a": 1, "b": "two"}, {"k": [1, 2], "z": None, "y": True}]),
            "nested": {"inner": {"v": rng.randint(0, 3), "w": "str"}, "arr": [{"name": "p", "x": 1}, {"name": "q", "x": 0}]},
            "flag": rng.random() < 0.5, "nothing": None}


class Gen:
    def __init__(self, rng):
        self.r = rng
        self.loop_vars = []

    def literal(self):
        r = self.r
        return r.choice(["0", "1", "-2", "3", "7", "2.5", "0.1", "1e3", "'a'", "\"b c\"", "'%s-%d'", "''", "true", "false",
                         "none", "[1, 2]", "['x', 'y']", "[]", "{'a': 1}", "(1, 'a')", "'{}:{}'", "'A\\nB'"])

    def atom(self, depth):
        r = self.r
        k = r.random()
        names = VARS + self.loop_vars
        if k < 0.3:
            return self.literal()
        if k < 0.6:
            return r.choice(names)
        if k < 0.7:
            return r.choice(["s", "t"]) + "." + r.choice(METHODS)
        if k < 0.8:
            return r.choice(["d", "nested", "nested.inner"]) + r.choice([".a", "['b']", ".k", ".inner", ".arr", ".get('a')",
                                                                          ".get('q', 5)", ".items()", ".keys()", ".values()"])
        if k < 0.9:
            return r.choice(["lst", "s", "nums", "nested.arr"]) + r.choice(["[0]", "[-1]", "[1:]", "[:2]", "[::-1]", "[::2]", "[5]"])
        return "(" + self.expr(depth + 1) + ")"

    def expr(self, depth=0):
        r = self.r
        if depth > 3:
            return self.atom(depth)
        k = r.random()
        if k < 0.35:
            return self.atom(depth)
        if k < 0.5:
            f = r.choice(FILTERS)
            arg = {"join": "(', ')", "default": "('dflt')", "round": "(1)", "indent": "(2)", "select": "('odd')",
                   "reject": "('none')", "map": "('string')", "batch": "(2)", "center": "(9)", "sort": "(reverse=true)",
                   "tojson": r.choice(["", "(indent=2)", "(sort_keys=true)"])}.get(f, "")
            return self.atom(depth) + "|" + f + arg
        if k < 0.6:
            t = r.choice(TESTS)
            arg = {"divisibleby": " 3", "eq": "(1)", "ne": " 2", "lt": "(5)", "gt": "(0)", "in": "([1, 'a'])", "sameas": " none"}.get(t, "")
            return self.atom(depth) + " is " + r.choice(["", "not "]) + t + arg
        if k < 0.8:
            op = r.choice(["+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "!=", "<", ">", "<=", ">=", "in", "not in"])
            return self.expr(depth + 1) + " " + op + " " + self.expr(depth + 1)
        if k < 0.88:
            return "not " + self.expr(depth + 1)
        if k < 0.95:
            return self.expr(depth + 1) + " if " + self.expr(depth + 1) + (" else " + self.expr(depth + 1) if r.random() < 0.7 else "")
        return "-" + self.atom(depth)

    def ws(self, open_):
        r = self.r.random()
        return ("-" if r < 0.3 else "+" if r < 0.4 else "") if open_ else ("-" if r < 0.3 else "+" if r < 0.35 else "")

    def tag(self, body):
        return "{%" + self.ws(True) + " " + body + " " + self.ws(False) + "%}"

    def text(self):
        return self.r.choice(["", "x", " ", "\n", "  \n", "\n  ", "a b", "\t", "|", "\n\n"])

    def block(self, depth=0, in_loop=False):
        r = self.r
        out = []
        for _ in range(r.randint(1, 3 if depth else 5)):
            k = r.random()
            out.append(self.text())
            if k < 0.35 or depth > 2:
                out.append("{{" + r.choice(["", "-"]) + " " + self.expr() + " " + r.choice(["", "-"]) + "}}")
            elif k < 0.5:
                out.append(self.tag("if " + self.expr()) + self.block(depth + 1, in_loop) +
                           (self.tag("elif " + self.expr()) + self.block(depth + 1, in_loop) if r.random() < 0.3 else "") +
                           (self.tag("else") + self.block(depth + 1, in_loop) if r.random() < 0.4 else "") + self.tag("endif"))
            elif k < 0.65:
                var = r.choice(["i", "j", "item"])
                src = r.choice(["lst", "nums", "s", "d", "d.items()", "range(n)", "range(3)", "nested.arr", "[1, 2, 3]", "missing"])
                target = "k, v" if src == "d.items()" else var
                self.loop_vars.extend(["loop.index", "loop.index0", "loop.first", "loop.last", "loop.length", "loop.revindex",
                                       "loop.previtem", "loop.nextitem", "loop.cycle('a', 'b')"] + target.split(", "))
                cond = (" if " + self.expr()) if r.random() < 0.2 else ""
                body = self.block(depth + 1, True)
                if r.random() < 0.15:
                    body += self.tag("if " + self.expr()) + self.tag(r.choice(["break", "continue"])) + self.tag("endif")
                del self.loop_vars[-(9 + len(target.split(", "))):]
                out.append(self.tag("for " + target + " in " + src + cond) + body +
                           (self.tag("else") + self.block(depth + 1, in_loop) if r.random() < 0.2 else "") + self.tag("endfor"))
            elif k < 0.75:
                out.append(self.tag("set " + r.choice(["x", "y", "n"]) + " = " + self.expr()) + "{{ " + r.choice(["x", "y", "n"]) + " }}")
            elif k < 0.82:
                out.append(self.tag("set ns = namespace(c=0, s='')") +
                           self.tag("for q in " + r.choice(["lst", "nums", "range(4)"])) +
                           self.tag("set ns.c = ns.c + 1") + self.tag("set ns.s = ns.s ~ q") + self.tag("endfor") + "{{ ns.c }}/{{ ns.s }}")
            elif k < 0.88:
                out.append(self.tag("macro mk(a, b=2)") + "[{{ a }}|{{ b }}|{{ " + self.expr() + " }}]" + self.tag("endmacro") +
                           "{{ mk(" + self.expr() + ") }}{{ mk(1, b=" + self.expr() + ") }}")
            elif k < 0.93:
                out.append(self.tag("set blk | " + r.choice(["upper", "trim", "capitalize"])) + self.block(depth + 1, in_loop) +
                           self.tag("endset") + "{{ blk }}")
            elif k < 0.97:
                out.append("{#" + r.choice(["", "-"]) + " comment " + r.choice(["", "-"]) + "#}")
            else:
                out.append(self.tag("raw") + "{{ raw }}" + self.tag("endraw"))
        out.append(self.text())
        return "".join(out)


# ---------------------------------------------------------------- driver

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the jinja_render test tool")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--conversations", type=int, default=400)
    ap.add_argument("--programs", type=int, default=3000)
    ap.add_argument("--program-tolerance", type=float, default=0.002)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time() * 1000) % (2 ** 31)
    rng = random.Random(seed)

    templates = {}
    for name in sorted(os.listdir(os.path.join(HERE, "templates"))):
        with open(os.path.join(HERE, "templates", name), encoding="utf-8") as f:
            templates[name] = f.read()
    with open(os.path.join(ROOT, "models", "minima-qwen3-23m", "tokenizer_config.json"), encoding="utf-8") as f:
        templates["minima-qwen3-23m"] = json.load(f)["chat_template"]

    cases = []
    for name, src in templates.items():
        for _ in range(a.conversations):
            cases.append((name, src, rand_conversation(rng)))
    for i in range(a.programs):
        g = Gen(rng)
        cases.append((f"program {i}", g.block(), program_vars(rng)))

    lines = "".join(json.dumps({"template": src, "vars": v}, ensure_ascii=False) + "\n" for _, src, v in cases)
    proc = subprocess.run([a.bin], input=lines.encode(), capture_output=True, timeout=600)
    if proc.returncode != 0:
        print(proc.stderr.decode(errors="replace"), file=sys.stderr)
        sys.exit(f"jinja_render exited with {proc.returncode}")
    ours = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert len(ours) == len(cases), (len(ours), len(cases))

    bad = []
    stats = {"same_output": 0, "both_raised": 0, "kind_differs": 0, "lazy": 0}
    for (name, src, v), got in zip(cases, ours):
        want = reference(src, v)
        # Jinja2's select/map/reverse are lazy generators: printed bare they show an address, and a
        # bad input fails only once iterated. Such renders have no comparable output.
        if "output" in want and LAZY.search(want["output"]):
            stats["lazy"] += 1
            continue
        if "output" in want and "output" in got:
            if want["output"] == got["output"]:
                stats["same_output"] += 1
            else:
                bad.append((name, src, v, want, got))
        elif "error" in want and "error" in got:
            stats["both_raised"] += 1
            stats["kind_differs"] += want["error"] != got["error"]
        else:
            bad.append((name, src, v, want, got))
    per_template = {n: 0 for n in templates}
    for name, _, v in cases:
        if name in per_template:
            per_template[name] += 1
    print(f"seed {seed}: {len(cases)} renders ({', '.join(f'{n} {c}' for n, c in per_template.items())}, "
          f"{a.programs} random programs): {stats['same_output']} identical outputs, {stats['both_raised']} raised in both "
          f"({stats['kind_differs']} with another error class name), {stats['lazy']} printing a lazy generator (skipped), "
          f"{len(bad)} differences")
    for name, src, v, want, got in bad[:5]:
        print("----", name)
        print("template:", repr(src)[:2000])
        print("vars:", json.dumps(v, ensure_ascii=False)[:1500])
        print("jinja2:  ", repr(want)[:1500])
        print("minimakv:", repr(got)[:1500])
    chat_bad = sum(1 for b in bad if not b[0].startswith("program "))
    program_bad = len(bad) - chat_bad
    limit = int(a.program_tolerance * a.programs)
    if chat_bad or program_bad > limit:
        sys.exit(f"FAIL: {chat_bad} chat-template differences (0 allowed), {program_bad} random-program differences "
                 f"({limit} allowed)")
    print(f"ok: 0 chat-template differences, {program_bad} random-program differences ({limit} allowed)")


if __name__ == "__main__":
    main()
