#!/usr/bin/env python3
"""scripts/eval/failure_modes.py against its promises, on random eval records:
- every failed example of the chosen arm, task prefix and length lands in exactly one class, as drawn
  (partial: 0 < score < 1; wrong value: score 0 and a digit in the first 80 characters; no answer: no
  digit there); passed examples and other arms, tasks and lengths are not counted;
- the table's counts and percentages equal the drawn ones.
Run: python3 tests/eval/failure_modes_test.py
"""
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "scripts", "eval", "failure_modes.py")
PROSE = ["the", "parser", "reads", "a", "line", "and", "then", "returns", "it", "."]


def prose(rng, n):
    return " " + " ".join(rng.choice(PROSE) for _ in range(n))


def main():
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    records, expected = [], {}
    for length in (4096, 16384):
        want = {"examples": 0, "no answer": 0, "wrong": 0, "partial": 0}
        for _ in range(rng.randrange(20, 80)):
            kind = rng.choice(["pass", "no answer", "wrong", "partial"])
            out = prose(rng, rng.randrange(1, 30))
            if kind == "pass":
                score, out = 1.0, f" {rng.randrange(10**6, 10**7)}."
            elif kind == "partial":
                score = rng.choice([0.25, 0.5, 0.75])
            elif kind == "wrong":
                score = 0.0
                at = rng.randrange(0, 60)  # a digit inside the first 80 characters
                out = (out * 4)[:at] + str(rng.randrange(10)) + out
            else:
                score = 0.0
                if rng.random() < 0.5:  # a digit after the first 80 characters does not make an answer
                    out = (out * 80)[:80] + " 1234567"
            want["examples"] += 1
            if kind != "pass":
                want[kind] += 1
            records.append({"arm": "bf16", "task": "heldout_single_1", "length": length, "score": score, "output": out})
            # Noise that must not be counted: another arm, a RULER task.
            records.append({"arm": "minima", "task": "heldout_single_1", "length": length, "score": 0.0, "output": out})
            records.append({"arm": "bf16", "task": "niah_single_1", "length": length, "score": 0.0, "output": out})
        expected[length] = want
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"niah": {"records": records}}, f)
        path = f.name
    try:
        got = subprocess.run([sys.executable, TOOL, path], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    rows = [line for line in got.splitlines() if line.startswith("| ") and line[2].isdigit()]
    if len(rows) != 2:
        raise AssertionError(f"seed {seed}: expected two rows, got:\n{got}")
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        length, n = int(cells[0]), int(cells[1])
        want = expected[length]
        counts = [int(c.split()[0]) for c in cells[2:]]
        failed = want["no answer"] + want["wrong"] + want["partial"]
        if n != want["examples"] or counts != [failed, want["no answer"], want["wrong"], want["partial"]]:
            raise AssertionError(f"seed {seed}, length {length}: got {row}, want {want}")
        pct = float(cells[3].split("(")[1].rstrip("%)"))
        if abs(pct - 100.0 * want["no answer"] / n) > 0.051:
            raise AssertionError(f"seed {seed}: percentage {pct} off")
    print(f"failure_modes: ok (seed {seed})")


if __name__ == "__main__":
    main()
