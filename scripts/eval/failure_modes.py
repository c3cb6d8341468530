#!/usr/bin/env python3
"""How an arm fails a set of NIAH tasks, from the outputs an `minimakv eval niah` JSON records.

Every failed example (score < 1) is put in one of three classes:
  partial   some but not all of the asked values were named (multi-value and multi-query tasks);
  wrong     no asked value, but the answer holds a digit in its first 80 characters: RULER's values
            (and our held-out variants') are 7-digit numbers or UUIDs, so the model answered with
            something of a value's shape (a distractor's value, a repeated year...);
  no answer no digit at all: the model continued the haystack's prose instead of answering.
Usage: failure_modes.py EVAL.json [--arm bf16] [--tasks-prefix heldout_] [--length N]
"""
import argparse
import collections
import json
import re


def classify(record):
    if record["score"] >= 1:
        return None
    if record["score"] > 0:
        return "partial"
    return "wrong" if re.search(r"\d", record["output"][:80]) else "no answer"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_json")
    ap.add_argument("--arm", default="bf16")
    ap.add_argument("--tasks-prefix", default="heldout_")
    ap.add_argument("--length", type=int, default=None)
    a = ap.parse_args()
    records = json.load(open(a.eval_json))["niah"]["records"]
    by_length = collections.defaultdict(collections.Counter)
    for r in records:
        if r["arm"] != a.arm or not r["task"].startswith(a.tasks_prefix):
            continue
        if a.length is not None and r["length"] != a.length:
            continue
        c = by_length[r["length"]]
        c["examples"] += 1
        k = classify(r)
        if k:
            c[k] += 1
    print("| length | examples | failed | no answer | wrong value | partial |")
    print("|---|---|---|---|---|---|")
    for length, c in sorted(by_length.items()):
        n = c["examples"]
        failed = c["no answer"] + c["wrong"] + c["partial"]
        pct = lambda k: f"{c[k]} ({100.0 * c[k] / n:.1f}%)"
        print(f"| {length} | {n} | {failed} ({100.0 * failed / n:.1f}%) | {pct('no answer')} | {pct('wrong')} | {pct('partial')} |")


if __name__ == "__main__":
    main()
