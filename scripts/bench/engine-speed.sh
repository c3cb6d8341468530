#!/usr/bin/env bash
# End-to-end speed of the engine: prefill tokens/s and decode step time (median, min-max over the steps)
# for each KV mode, context and batch, on one device. Prompts are held-out prose (data/corpus/essay.txt,
# made by scripts/data/extract_corpus.py), each sequence starting further into it, cut or repeated to
# the context. Every sequence generates exactly NEW tokens (--ignore-eos). The table is printed last.
#   DEVICE=cuda CONTEXTS="16384 32000" BATCHES="1 8" KVS="bf16 fp8 minima" NEW=128 \
#     BIN=build/release/apps/minimakv/minimakv OUT=dir bash scripts/bench/engine-speed.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda}
CONTEXTS=${CONTEXTS:-"16384 32000"}
BATCHES=${BATCHES:-"1 8"}
KVS=${KVS:-"bf16 fp8 minima"}
NEW=${NEW:-128}
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/engine-speed}
TEXT=${TEXT:-data/corpus/essay.txt}
mkdir -p "$OUT"
for ctx in $CONTEXTS; do
  for b in $BATCHES; do
    for kv in $KVS; do
      f="$OUT/speed-$DEVICE-$kv-$ctx-b$b.json"
      "$BIN" generate --device "$DEVICE" --kv "$kv" --prompt-file "$TEXT" --prompt-tokens $((ctx - NEW)) \
        --batch "$b" --max-tokens "$NEW" --ignore-eos --json >"$f"
    done
  done
done
python3 - "$OUT" "$DEVICE" <<'PY'
import glob, json, os, sys
out, device = sys.argv[1], sys.argv[2]
rows = []
for f in glob.glob(os.path.join(out, f"speed-{device}-*.json")):
    j = json.load(open(f))
    _, _, kv, ctx, b = os.path.basename(f)[:-5].split("-")
    batch = int(b[1:])
    res = j.get("results") or [j]
    prompt = sum(r["prompt_tokens"] for r in res)
    prefill = sum(r.get("prefill_s", 0) for r in res) or prompt / j["prefill_tokens_per_s"]
    st = j["step_ms"]
    att = j.get("attention", {})
    rows.append((int(ctx), batch, kv, prompt / prefill, st["median"], st["min"], st["max"],
                 batch * 1e3 / st["median"], j["kv_bytes_per_token"], ",".join(att.get("routes", {}).keys()),
                 att.get("dense_shadow_bytes", 0), j.get("device", "?")))
rows.sort(key=lambda r: (r[0], r[1], ["bf16", "fp8", "minima"].index(r[2])))
print(f"\nengine speed on {rows[0][-1] if rows else device}")
print(f"{'context':>7} {'batch':>5} {'kv':>6} {'prefill tok/s':>13} {'step ms med':>11} {'(min-max)':>15} "
      f"{'decode tok/s':>12} {'KV B/token':>10} {'routes':>16} {'dense copy B':>12}")
for r in rows:
    print(f"{r[0]:>7} {r[1]:>5} {r[2]:>6} {r[3]:>13.0f} {r[4]:>11.2f} {f'({r[5]:.2f}-{r[6]:.2f})':>15} "
          f"{r[7]:>12.1f} {r[8]:>10.1f} {r[9]:>16} {r[10]:>12}")
PY
