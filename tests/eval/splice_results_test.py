#!/usr/bin/env python3
"""scripts/eval/splice-results.py against its promises, on documents drawn at random:
- a new section lands before the first `## ` heading (or at the end without one), with its heading;
- splicing again replaces the section only: every byte outside the markers is unchanged, and splicing
  the same report twice gives the same file;
- malformed markers (END before BEGIN, END alone, two BEGINs) and bad section names are refused with an
  exit status and a message, and the file is left untouched.
Run: python3 tests/eval/splice_results_test.py
"""
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "scripts", "eval", "splice-results.py")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def words(rng, n):
    return " ".join(rng.choice(["alpha", "beta", "| a | b |", "x<y", "--", "`code`", "é"]) for _ in range(n))


def run(results, section, report_text, title=None):
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as r:
        r.write(report_text)
    cmd = [sys.executable, TOOL, "--results", results, "--section", section, "--report", r.name]
    if title:
        cmd += ["--title", title]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    os.unlink(r.name)
    return p


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "results.md")
        for trial in range(20):
            head = "# Results\n\n" + words(rng, rng.randint(0, 30)) + "\n\n"
            rest = "".join(f"## Old {i}\n\n{words(rng, rng.randint(1, 40))}\n\n" for i in range(rng.randint(0, 3)))
            with open(path, "w", encoding="utf-8") as f:
                f.write(head + rest)
            report1 = "### Table\n\n" + words(rng, rng.randint(1, 50)) + "\n"
            p = run(path, "sec-1", report1, title="New section")
            check(p.returncode == 0, f"first splice failed: {p.stderr}")
            doc = read(path)
            check(doc.startswith(head + "## New section\n\n<!-- BEGIN eval:sec-1 -->"), "new section before the old ones")
            check(doc.endswith(rest), "the rest of the file is kept")
            check(report1.strip() in doc, "report written")
            before, after = doc.split("<!-- BEGIN eval:sec-1 -->")[0], doc.split("<!-- END eval:sec-1 -->")[1]
            report2 = words(rng, rng.randint(1, 50))
            check(run(path, "sec-1", report2).returncode == 0, "second splice")
            doc2 = read(path)
            check(doc2.split("<!-- BEGIN eval:sec-1 -->")[0] == before, "bytes before the section unchanged")
            check(doc2.split("<!-- END eval:sec-1 -->")[1] == after, "bytes after the section unchanged")
            check(report2.strip() in doc2 and report1.strip() not in doc2, "the old report is replaced")
            check(run(path, "sec-1", report2).returncode == 0 and read(path) == doc2, "idempotent")
        # Refusals leave the file as it was.
        for bad_doc in ("a\n<!-- END eval:s -->\n<!-- BEGIN eval:s -->\n", "a\n<!-- END eval:s -->\n",
                        "<!-- BEGIN eval:s -->\n<!-- BEGIN eval:s -->\n<!-- END eval:s -->\n"):
            with open(path, "w", encoding="utf-8") as f:
                f.write(bad_doc)
            p = run(path, "s", "report")
            check(p.returncode != 0 and "splice-results.py" in p.stderr, f"malformed markers refused: {bad_doc!r}")
            check(read(path) == bad_doc, "a refused splice leaves the file untouched")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# R\n")
        p = run(path, "bad name -->", "report")
        check(p.returncode != 0 and read(path) == "# R\n", "a section name that could close the marker is refused")
    print("splice-results: all checks passed")


if __name__ == "__main__":
    main()
