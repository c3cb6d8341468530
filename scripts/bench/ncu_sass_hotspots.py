#!/usr/bin/env python3
"""The SASS instructions of one Nsight Compute report with the most warp-stall samples, and the samples
summed by stall reason and by opcode: where a kernel's warps wait, instruction by instruction.
Usage: ncu_sass_hotspots.py SOURCE.csv [TOP] where SOURCE.csv is
`ncu -i REPORT --page source --print-source sass --csv` of a report with the SourceCounters section."""
import collections
import csv
import sys


def number(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> int:
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    start = next((i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r)), None)
    if start is None:
        print("no SASS table in", sys.argv[1])
        return 0
    head = rows[start]
    src = head.index("Source")
    total = next((i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All")), None)
    if total is None:
        print("no stall-sampling column; columns:", head)
        return 0
    reasons = [i for i, c in enumerate(head) if c.startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")]
    body = [r for r in rows[start + 1:] if len(r) == len(head)]
    grand = sum(number(r[total]) for r in body) or 1.0
    by_reason = collections.Counter()
    by_op = collections.Counter()
    for r in body:
        op = r[src].strip().split(" ")[0] if r[src].strip() else "?"
        if op.startswith("@"):
            op = r[src].strip().split(" ")[1]
        by_op[op.split(".")[0]] += number(r[total])
        for i in reasons:
            by_reason[head[i]] += number(r[i])
    print(f"samples: {grand:.0f}")
    print("by stall reason:", ", ".join(f"{k.replace('smsp__pcsamp_warps_issue_stalled_', '')} {v / grand:.1%}"
                                        for k, v in by_reason.most_common(10)))
    print("by opcode:", ", ".join(f"{k} {v / grand:.1%}" for k, v in by_op.most_common(14)))
    ranked = sorted(range(len(body)), key=lambda i: -number(body[i][total]))[:top]
    for i in sorted(ranked):
        r = body[i]
        lead = sorted(((number(r[j]), head[j]) for j in reasons), reverse=True)[:2]
        why = ", ".join(f"{n.replace('smsp__pcsamp_warps_issue_stalled_', '')} {v:.0f}" for v, n in lead if v)
        print(f"{i:6d} {number(r[total]) / grand:6.1%}  {r[src].strip()[:70]:70}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
