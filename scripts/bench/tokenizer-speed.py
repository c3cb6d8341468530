#!/usr/bin/env python3
"""Tokenizer speed on pathological inputs: ours (`minimakv tokenize --reps`) against `tokenizers`.

Long runs without a space are one pre-tokenizer piece each, where a BPE that rescans every pair per
merge is quadratic. For each input (1,000,000 random letters, one letter repeated, digits, one CJK
character repeated, random valid UTF-8 without spaces, prose of the same size) both encoders run in
process, median of --reps, on the same text; ids must be identical. Prints a table with the ratio.
  tokenizer-speed.py --bin build/release/apps/minimakv/minimakv [--size 1000000] [--reps 3]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def inputs(size, seed):
    rng = random.Random(seed)
    prose = "The grass is green, the sky is blue; 42 ships left the harbour at 7:15, and nobody's sure why.\n"
    utf8, nbytes = [], 0
    while nbytes < size:  # code points from several scripts, no whitespace
        cp = rng.choice([rng.randint(0x21, 0x7E), rng.randint(0xA1, 0x2FF), rng.randint(0x400, 0x4FF),
                         rng.randint(0x4E00, 0x9FFF), rng.randint(0x1F600, 0x1F64F)])
        utf8.append(chr(cp))
        nbytes += len(utf8[-1].encode())
    return {
        "random letters": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size)),
        "one letter": "a" * size,
        "digits": "".join(rng.choice("0123456789") for _ in range(size)),
        "one CJK character": "\u6587" * (size // 3),
        "random UTF-8, no spaces": "".join(utf8),
        "prose": (prose * (size // len(prose) + 1))[:size],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "minima-qwen3-23m"))
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    ref = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    texts = inputs(args.size, args.seed)
    res = subprocess.run([args.bin, "tokenize", "--model", args.model, "--reps", str(args.reps)],
                         input=json.dumps(list(texts.values())).encode(), capture_output=True, check=True)
    ours = json.loads(res.stdout)
    bad = 0
    print(f"{'input':<26} {'bytes':>9} {'tokens':>8} {'ours s':>8} {'tokenizers s':>12} {'ratio':>6}  ids")
    for i, (name, t) in enumerate(texts.items()):
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            want = ref.encode(t).ids
            times.append(time.perf_counter() - t0)
        theirs = statistics.median(times)
        same = ours["ids"][i] == want
        bad += 0 if same else 1
        print(f"{name:<26} {len(t.encode()):>9} {len(want):>8} {ours['seconds'][i]:>8.3f} {theirs:>12.3f} "
              f"{ours['seconds'][i] / theirs:>6.2f}  {'identical' if same else 'DIFFER'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
