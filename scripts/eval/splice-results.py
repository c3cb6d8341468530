#!/usr/bin/env python3
"""Write an evaluation report into docs/results.md between its section's markers, so the evaluation
script regenerates the tables it produced instead of a person copying them.

A section is the text between `<!-- BEGIN eval:NAME -->` and `<!-- END eval:NAME -->`; it is replaced
whole, and everything outside the markers is kept byte for byte. A section not yet in the file is added
before the file's first `## ` heading, under a `## ` heading of its own when --title is given. The report
is folded into a <details> block (the summary tables beside it are written by hand).
  splice-results.py --results docs/results.md --section v2-run5-gpu --report build/eval/report.md \
      [--title "Full report: ..."]
"""
import argparse
import re
import sys


def splice(doc, name, body, title):
    begin, end = f"<!-- BEGIN eval:{name} -->", f"<!-- END eval:{name} -->"
    block = f"{begin}\n<details><summary>Generated report ({name})</summary>\n\n{body.strip()}\n\n</details>\n{end}"
    if doc.count(begin) > 1 or doc.count(end) > 1:
        raise ValueError(f"section {name} has more than one marker pair")
    if begin in doc:
        if end not in doc or doc.index(end) < doc.index(begin):
            raise ValueError(f"section {name}: END marker missing or before BEGIN")
        i, j = doc.index(begin), doc.index(end) + len(end)
        return doc[:i] + block + doc[j:]
    if end in doc:
        raise ValueError(f"section {name}: END marker without BEGIN")
    new = (f"## {title}\n\n" if title else "") + block + "\n\n"
    m = re.search(r"^## ", doc, re.M)
    at = m.start() if m else len(doc)
    return doc[:at] + new + doc[at:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--section", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--title")
    args = ap.parse_args()
    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.section):
        sys.exit(f"splice-results.py: section name '{args.section}' may hold letters, digits, '.', '_', '-'")
    with open(args.results, encoding="utf-8") as f:
        doc = f.read()
    with open(args.report, encoding="utf-8") as f:
        body = f.read()
    try:
        out = splice(doc, args.section, body, args.title)
    except ValueError as e:
        sys.exit(f"splice-results.py: {args.results}: {e}")
    with open(args.results, "w", encoding="utf-8") as f:
        f.write(out)


if __name__ == "__main__":
    main()
