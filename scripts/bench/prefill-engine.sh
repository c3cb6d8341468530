#!/usr/bin/env bash
# End-to-end prefill of one long prompt through the engine on the GPU (dummy weights at real geometry),
# every KV mode and prefill chunk size given, then one table of prefill tokens/s. Each run is one
# `minimakv generate --json`; a minima run converts pages at the retier checkpoint after every chunk
# (page scores only with --scoring, which these runs do not pass).
#   BUILD=dir (prebuilt: dir/apps/minimakv/minimakv); CFG (default bench/configs/qwen3-8b);
#   CONTEXT (default 32768); KVS (default "bf16 fp8 minima"); CHUNKS (default "4096"; "auto" passes no
#   --prefill-chunk, so generate picks the chunk from the free memory); OUT (JSON).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
CFG=${CFG:-bench/configs/qwen3-8b}
CONTEXT=${CONTEXT:-32768}
OUT=${OUT:-build/prefill-engine}
mkdir -p "$OUT"
source scripts/gpu-env.sh
for chunk in ${CHUNKS:-4096}; do
  for kv in ${KVS:-bf16 fp8 minima}; do
    "$BUILD/apps/minimakv/minimakv" generate --device cuda --model "$CFG" --dummy-weights --kv "$kv" \
      --prompt-file README.md --prompt-tokens $((CONTEXT - 16)) --max-tokens 16 --ignore-eos \
      $([[ "$chunk" == auto ]] || echo --prefill-chunk "$chunk") --json >"$OUT/prefill-$kv-c$chunk.json" 2>"$OUT/prefill-$kv-c$chunk.log" ||
      echo "$kv chunk $chunk: rc $? ($(tail -n 1 "$OUT/prefill-$kv-c$chunk.log"))"
  done
done
python3 - "$OUT" "$CONTEXT" <<'PY'
import glob, json, os, sys
out, ctx = sys.argv[1], sys.argv[2]
print(f"\n| context | kv | prefill chunk | prefill tokens/s | prefill s |\n|---|---|---|---|---|")
for p in sorted(glob.glob(f"{out}/prefill-*.json")):
    try:
        j = json.load(open(p))
    except (json.JSONDecodeError, OSError):
        continue
    kv, chunk = os.path.basename(p)[8:-5].rsplit("-c", 1)
    tps = j.get("prefill_tokens_per_s")
    if chunk == "auto" and "prefill_chunk" in j:
        chunk = f"auto ({j['prefill_chunk']})"
    print(f"| {ctx} | {kv} | {chunk} | {tps:.0f} | {(int(ctx) - 16) / tps:.2f} |" if tps else f"| {ctx} | {kv} | {chunk} | - | - |")
PY
