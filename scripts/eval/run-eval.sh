#!/usr/bin/env bash
# The evaluation behind docs/results.md: RULER-NIAH accuracy of every arm on identical examples with
# paired CIs, KL against bf16, and KV memory per live token, written as Markdown and JSON.
#   bash scripts/eval/run-eval.sh                 # full protocol (4K/8K/16K, 64 examples per task)
#   LENGTHS=4096 EXAMPLES=8 bash scripts/eval/run-eval.sh   # a smaller run
# BIN picks the minimakv binary (default build/release/apps/minimakv/minimakv); OUT the output folder
# (default build/eval). The run's command line, date and machine are written next to the numbers.
# DEVICE=cuda runs the engine on the GPU (the CUDA backend); WHAT=niah|kl|memory|all picks the parts.
# On the CPU (16 threads) a 4K example takes 1-2 s per arm, so the full protocol (about 9,000 runs up to
# 16K) takes many hours there; docs/results.md lists the runs actually made and where.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/eval}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cpu}
args=(eval "${WHAT:-all}" --device "$DEVICE" --lengths "${LENGTHS:-4096,8192,16384}" --examples "${EXAMPLES:-64}"
      --arms "${ARMS:-bf16,fp8,minima,minima-scored,minima-aggr,minima-reuse}"
      --kl-lengths "${KL_LENGTHS:-4096,16384}" --kl-windows "${KL_WINDOWS:-8}" --seed "${SEED:-1}"
      --json "$OUT/eval.json" --markdown "$OUT/eval.md")
{
  echo "Command: \`$BIN ${args[*]}\`"
  echo "Date: $(date -u +'%Y-%m-%d %H:%M UTC'); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
  if [[ "$DEVICE" == cuda ]]; then
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  fi
} >"$OUT/header.md"
"$BIN" "${args[@]}" >/dev/null
cat "$OUT/header.md" "$OUT/eval.md"
