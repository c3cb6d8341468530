#!/usr/bin/env bash
# Where a decode step's time goes on the CUDA backend: one generate run per (batch, graphs on/off, kv)
# with the backend's host-phase profile (MINIMAKV_CUDA_PROFILE=1), printing the median step and the
# per-call host time of each decode phase ("to_host wait" is the time the host waits for the device).
#   CONTEXT=32768 BATCHES="1 8" KVS="bf16 minima" BIN=build/release/apps/minimakv/minimakv OUT=dir \
#     bash scripts/bench/engine-profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CONTEXT=${CONTEXT:-32768}
BATCHES=${BATCHES:-"1 8"}
KVS=${KVS:-"bf16 minima"}
NEW=${NEW:-128}
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/engine-profile}
TEXT=${TEXT:-data/corpus/essay.txt}
mkdir -p "$OUT"
for b in $BATCHES; do
  for g in 1 0; do
    for kv in $KVS; do
      base="$OUT/profile-$kv-b$b-g$g"
      MINIMAKV_CUDA_GRAPHS=$g MINIMAKV_CUDA_PROFILE=1 "$BIN" generate --device cuda --kv "$kv" --prompt-file "$TEXT" \
        --prompt-tokens $((CONTEXT - NEW)) --batch "$b" --max-tokens "$NEW" --ignore-eos --json >"$base.json" 2>"$base.txt"
      median=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['step_ms']['median'])" "$base.json")
      echo "== $kv batch $b graphs $g: median step $median ms"
      grep -vE "prefill|host time" "$base.txt" || true
    done
  done
done
