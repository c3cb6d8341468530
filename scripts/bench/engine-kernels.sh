#!/usr/bin/env bash
# GPU time of each kernel of a few decode steps (Nsight Compute, eager launches so every kernel is its
# own launch): kernel name, launches and mean duration, sorted by total time. Skips the prefill's
# launches first (SKIP), so the window falls inside the decode.
#   CONTEXT=32768 KV=bf16 BATCH=1 SKIP=15000 COUNT=600 BIN=build/release/apps/minimakv/minimakv [MODEL_ARGS=...] \
#     bash scripts/bench/engine-kernels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CONTEXT=${CONTEXT:-32768}
KV=${KV:-bf16}
BATCH=${BATCH:-1}
SKIP=${SKIP:-15000}
COUNT=${COUNT:-600}
BIN=${BIN:-build/release/apps/minimakv/minimakv}
MODEL_ARGS=${MODEL_ARGS:-}  # e.g. "--model bench/configs/qwen3-8b --dummy-weights"
TEXT=${TEXT:-data/corpus/essay.txt}
OUT=${OUT:-build/engine-kernels}
mkdir -p "$OUT"
csv="$OUT/kernels-$KV-b$BATCH.csv"
MINIMAKV_CUDA_GRAPHS=0 ncu --launch-skip "$SKIP" --launch-count "$COUNT" --metrics gpu__time_duration.sum --csv \
  --log-file "$csv" "$BIN" generate --device cuda $MODEL_ARGS --kv "$KV" --prompt-file "$TEXT" \
  --prompt-tokens $((CONTEXT - 128)) --batch "$BATCH" --max-tokens 128 --ignore-eos --json \
  >"$OUT/generate-$KV-b$BATCH.json" 2>"$OUT/ncu-$KV-b$BATCH.log"
python3 - "$csv" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]
head = rows[0]
name, unit, value = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
tot = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    if len(r) != len(head):
        continue
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[r[unit]]
    t = tot[r[name][:70]]
    t[0] += 1
    t[1] += float(r[value].replace(",", "")) * scale
all_us = sum(v[1] for v in tot.values())
print(f"{len(rows) - 1} launches, {all_us:.0f} us of kernel time")
print(f"{'kernel':70} {'launches':>8} {'mean us':>8} {'share':>6}")
for k, (n, us) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:70} {n:>8} {us / n:>8.1f} {100 * us / all_us:>5.1f}%")
PY
