#!/usr/bin/env python3
"""Training curves of a model card, as a Markdown table, from train.py's logs (one JSON object per line).

For each run: the smoothed loss and the answer-token loss at about `--points` evenly spaced logged steps,
cumulative over the runs given (in order), and the run's final quick check (macro per group).
  python3 scripts/train/curves.py docs/training/minima-qwen3-25m/run{1,2,3,4,5}.jsonl
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--points", type=int, default=4)
    args = ap.parse_args()
    print("| run | step (cumulative) | tokens (cumulative) | loss (EMA) | answer-token loss | lr |")
    print("|---|---|---|---|---|---|")
    base_step, base_tokens, finals = 0, 0, []
    for run, path in enumerate(args.logs, 1):
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        steps = [r for r in recs if "loss" in r]
        if not steps:
            raise SystemExit(f"{path}: no logged steps")
        picks = sorted({round(i * (len(steps) - 1) / max(1, args.points - 1)) for i in range(args.points)})
        for i in picks:
            r = steps[i]
            print(f"| {run} | {base_step + r['step']:,} | {(base_tokens + r['tokens']) / 1e6:.1f}M | {r['loss']:.3f} "
                  f"| {r['answer_loss']:.3f} | {r['lr']:.2e} |")
        done = next((r for r in recs if r.get("event") == "done"), None)
        if done is None:
            raise SystemExit(f"{path}: the run has no 'done' record")
        base_step += done["step"]
        base_tokens += done["tokens"]
        q = done.get("quick_eval_4k", {})
        finals.append((run, {k: v for k, v in q.items() if k.startswith("macro")}))
    print()
    print("Quick check at the end of each run (4K, train.py's own, a few examples per task):")
    print()
    for run, macros in finals:
        print(f"- run {run}: " + ", ".join(f"{k.removeprefix('macro_')} {v}" for k, v in macros.items()))


if __name__ == "__main__":
    main()
