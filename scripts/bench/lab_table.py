"""One table of a kernel lab's run: each variant's benchmark JSON (rows with config, arm and a metric) side
by side, the best value of each row in bold. Used by decode-lab.sh and prefill-lab.sh.

Usage: lab_table.py OUT LAB METRIC min|max LABEL_FILE TITLE [SKIP_ARM...]
  OUT: folder of <variant>.json; LAB: folder of <variant>/LABEL_FILE (what the variant was built with);
  min|max: which value of a row is best; SKIP_ARM: arms left out of the table.
"""
import glob
import json
import os
import sys


def main():
    out, lab, metric, better, label_file, title = sys.argv[1:7]
    skip = set(sys.argv[7:])
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(f"{out}/*.json"))
    runs = {n: {(x["config"], x["arm"]): x[metric] for x in json.load(open(f"{out}/{n}.json"))} for n in names}
    keys = list(dict.fromkeys(k for n in names for k in runs[n]))
    labels = {n: open(f"{lab}/{n}/{label_file}").read().strip() for n in names
              if os.path.exists(f"{lab}/{n}/{label_file}")}
    print(f"{title}:", ", ".join(f"{n} ({labels.get(n, '?')})" for n in names))
    print(f"| config | arm | " + " | ".join(f"{n} {metric}" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    pick = min if better == "min" else max
    for k in keys:
        if k[1] in skip:
            continue
        vals = [runs[n].get(k) for n in names]
        best = pick(v for v in vals if v is not None)
        cells = [("**%.1f**" if v == best else "%.1f") % v if v is not None else "-" for v in vals]
        print(f"| {k[0]} | {k[1]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
