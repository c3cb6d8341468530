#!/usr/bin/env python3
"""Print the chosen metrics of an Nsight Compute `--csv --page details` log as "section / metric / value"
lines, then its stall and bottleneck remarks: the reader behind the kernel-profile scripts.
Usage: ncu_details.py LOG.csv [METRIC_PREFIX ...] (default: the throughput, occupancy, issue and launch
metrics below)."""
import csv
import sys

DEFAULT_KEEP = ("Duration", "Memory Throughput", "DRAM Throughput", "Compute (SM) Throughput",
                "Registers Per Thread", "Achieved Occupancy", "Theoretical Occupancy",
                "Warp Cycles Per Issued Instruction", "Block Limit", "L1/TEX Hit Rate", "Mem Busy",
                "Max Bandwidth", "Grid Size", "Dynamic Shared Memory Per Block", "Issue Slots Busy",
                "Executed Ipc Active", "Issued Warp Per Scheduler", "Eligible Warps Per Scheduler",
                "Executed Instructions", "SM Frequency")


def main() -> int:
    path = sys.argv[1]
    keep = tuple(sys.argv[2:]) or DEFAULT_KEEP
    try:
        rows = list(csv.reader(open(path)))
    except OSError:
        print("  no profile log (see the .err file)")
        return 0
    try:
        start = next(i for i, r in enumerate(rows) if "Metric Name" in r)
    except StopIteration:
        print("  no kernel profiled (see the .err file)")
        return 0
    head = rows[start]
    sec, name, unit, val = (head.index(k) for k in ("Section Name", "Metric Name", "Metric Unit", "Metric Value"))
    # Metric rows end at the value and unit columns; rule rows (the remarks) carry the full width.
    for r in rows[start + 1:]:
        if len(r) > val and r[name] and r[name].startswith(keep):
            print(f"  {r[sec][:22]:22} {r[name][:44]:44} {r[val]:>12} {r[unit]}")
    rule, desc = head.index("Rule Name"), head.index("Rule Description")
    remarks = [r for r in rows[start + 1:] if len(r) == len(head) and r[desc]
               and any(w in (r[rule] + r[desc]).lower() for w in ("stall", "bottleneck", "pipe"))]
    for r in remarks[:4]:
        print(f"  {r[sec][:22]:22} {r[rule]}: {r[desc][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
