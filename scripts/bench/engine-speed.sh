#!/usr/bin/env bash
# End-to-end speed of the engine: prefill tokens/s and decode tokens/s for each KV mode, context and
# batch, on one device, over REPS repetitions. Prompts are held-out prose (data/corpus/essay.txt, made
# by scripts/data/extract_corpus.py), each sequence starting further into it, cut or repeated to the
# context. Every sequence generates exactly NEW tokens (--ignore-eos); a run's decode tokens/s is
# batch / its median step time. Repetitions go round-robin over every configuration, so slow drift of
# the machine hits all arms alike; each arm's ratio to bf16 is taken within a repetition (paired) and
# reported as the median and min-max over the repetitions. GRAPHS="1 0" also runs every arm with the
# CUDA backend's decode-step graphs off (MINIMAKV_CUDA_GRAPHS=0, arms named kv/eager, each compared with
# bf16/eager). The table is printed last.
#   DEVICE=cuda CONTEXTS="16384 32000" BATCHES="1 8" KVS="bf16 fp8 minima" NEW=128 REPS=5 GRAPHS=1 \
#     BIN=build/release/apps/minimakv/minimakv OUT=dir bash scripts/bench/engine-speed.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda}
CONTEXTS=${CONTEXTS:-"16384 32000"}
BATCHES=${BATCHES:-"1 8"}
KVS=${KVS:-"bf16 fp8 minima"}
NEW=${NEW:-128}
REPS=${REPS:-5}
GRAPHS=${GRAPHS:-1}
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/engine-speed}
TEXT=${TEXT:-data/corpus/essay.txt}
mkdir -p "$OUT"
rm -f "$OUT"/speed-"$DEVICE"-*.json
for ((rep = 1; rep <= REPS; rep++)); do
  for ctx in $CONTEXTS; do
    for b in $BATCHES; do
      for g in $GRAPHS; do
        for kv in $KVS; do
          f="$OUT/speed-$DEVICE-$kv-$ctx-b$b-r$rep-g$g.json"
          MINIMAKV_CUDA_GRAPHS=$g "$BIN" generate --device "$DEVICE" --kv "$kv" --prompt-file "$TEXT" \
            --prompt-tokens $((ctx - NEW)) --batch "$b" --max-tokens "$NEW" --ignore-eos --json >"$f"
        done
      done
    done
  done
done
python3 - "$OUT" "$DEVICE" <<'PY'
import collections, glob, json, os, statistics, sys
out, device = sys.argv[1], sys.argv[2]
runs = collections.defaultdict(dict)  # (ctx, batch, kv) -> rep -> (prefill tok/s, decode tok/s)
meta = {}
for f in glob.glob(os.path.join(out, f"speed-{device}-*.json")):
    j = json.load(open(f))
    _, _, kv, ctx, b, r, g = os.path.basename(f)[:-5].split("-")
    batch, rep = int(b[1:]), int(r[1:])
    if g == "g0":
        kv += "/eager"  # decode steps launched one call at a time
    res = j.get("results") or [j]
    prompt = sum(x["prompt_tokens"] for x in res)
    prefill = sum(x.get("prefill_s", 0) for x in res) or prompt / j["prefill_tokens_per_s"]
    key = (int(ctx), batch, kv)
    runs[key][rep] = (prompt / prefill, batch * 1e3 / j["step_ms"]["median"])
    att = j.get("attention", {})
    fp = j.get("forward_passes", {})
    passes = sum(fp.values()) or 1
    meta[key] = (j["kv_bytes_per_token"], ",".join(att.get("routes", {}).keys()), att.get("dense_shadow_bytes", 0),
                 j.get("device", "?"), 100.0 * fp.get("replayed", 0) / passes)
order = ["bf16", "fp8", "minima"]
def rank(kv):
    base, _, eager = kv.partition("/")
    return (eager != "", order.index(base) if base in order else 9)
keys = sorted(runs, key=lambda k: (k[0], k[1], rank(k[2])))
def spread(xs):
    return f"{statistics.median(xs):.0f}" if len(xs) == 1 else \
        f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"
print(f"\nengine speed on {meta[keys[0]][3] if keys else device}: median (min-max) over repetitions")
print(f"{'context':>7} {'batch':>5} {'kv':>12} {'reps':>4} {'prefill tok/s':>22} {'decode tok/s':>20} "
      f"{'decode vs bf16':>20} {'KV B/token':>10} {'routes':>16} {'dense copy B':>12} {'replayed %':>10}")
for k in keys:
    ctx, batch, kv = k
    reps = runs[k]
    pre = [v[0] for v in reps.values()]
    dec = [v[1] for v in reps.values()]
    ref = "bf16/eager" if kv.endswith("/eager") else "bf16"
    base = runs.get((ctx, batch, ref), {})
    ratios = [reps[r][1] / base[r][1] for r in reps if r in base]
    ratio = "-" if not ratios or kv == ref else \
        f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    m = meta[k]
    print(f"{ctx:>7} {batch:>5} {kv:>12} {len(reps):>4} {spread(pre):>22} {spread(dec):>20} {ratio:>20} "
          f"{m[0]:>10.1f} {m[1]:>16} {m[2]:>12} {m[4]:>10.0f}")
PY
