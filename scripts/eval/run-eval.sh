#!/usr/bin/env bash
# The evaluation behind docs/results.md: RULER-NIAH accuracy of every arm on identical examples with
# paired CIs, KL against bf16, and KV memory per live token, written as Markdown and JSON.
#   bash scripts/eval/run-eval.sh                 # full protocol (4K/8K/16K, 64 examples per task)
#   LENGTHS=4096 EXAMPLES=8 bash scripts/eval/run-eval.sh   # a smaller run
# BIN picks the minimakv binary (default build/release/apps/minimakv/minimakv); OUT the output folder
# (default build/eval). The run's command line, date and machine are written next to the numbers.
# MODEL picks the model directory (default: the engine's, the embedded model).
# DEVICE=cuda runs the engine on the GPU (the CUDA backend); WHAT=niah|kl|memory|all picks the parts.
# TASKS picks the NIAH-report tasks: a comma list, or "all" for RULER's eight NIAH tasks, the same shapes in
# held-out phrasing (heldout_*) and vt, cwe, fwe (default: RULER's eight NIAH tasks).
# SHARDS=N splits the NIAH tasks over N processes run side by side (on one GPU they overlap one
# another's host work) and merges their records with `minimakv eval merge`, which gives the tables and
# statistics one process would. KL and memory then run in one more process. FIRST_EXAMPLE=K starts at
# example K, so one protocol can be run in parts (e.g. 0-31 and 32-63) and merged the same way.
# On the CPU (16 threads) a 4K example takes 1-2 s per arm, so the full protocol (about 9,000 runs up to
# 16K) takes many hours there; docs/results.md lists the runs actually made and where.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/eval}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cpu}
WHAT=${WHAT:-all}
SHARDS=${SHARDS:-1}
common=(--device "$DEVICE" --lengths "${LENGTHS:-4096,8192,16384}" --examples "${EXAMPLES:-64}"
        --first-example "${FIRST_EXAMPLE:-0}"
        --arms "${ARMS:-bf16,fp8,minima,minima-scored,minima-aggr,minima-reuse}"
        --kl-lengths "${KL_LENGTHS:-4096,16384}" --kl-windows "${KL_WINDOWS:-8}" --seed "${SEED:-1}")
if [[ -n "${MODEL:-}" ]]; then common+=(--model "$MODEL"); fi
tasks=(niah_single_1 niah_single_2 niah_single_3 niah_multikey_1 niah_multikey_2 niah_multikey_3 niah_multivalue
       niah_multiquery)
if [[ "${TASKS:-}" == all ]]; then
  tasks+=(heldout_single_1 heldout_single_2 heldout_single_3 heldout_multikey_1 heldout_multikey_2 heldout_multikey_3
          heldout_multivalue heldout_multiquery vt cwe fwe)
elif [[ -n "${TASKS:-}" ]]; then
  IFS=, read -r -a tasks <<<"$TASKS"
fi
task_list=$(IFS=,; echo "${tasks[*]}")
{
  echo "Date: $(date -u +'%Y-%m-%d %H:%M UTC'); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
  if [[ "$DEVICE" == cuda ]]; then
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  fi
} >"$OUT/header.md"

if [[ "$SHARDS" -le 1 ]]; then
  args=(eval "$WHAT" "${common[@]}" --tasks "$task_list" --json "$OUT/eval.json" --markdown "$OUT/eval.md")
  echo "Command: \`$BIN ${args[*]}\`" >>"$OUT/header.md"
  "$BIN" "${args[@]}" >/dev/null
  cat "$OUT/header.md" "$OUT/eval.md"
  exit 0
fi

if [[ "$WHAT" == all || "$WHAT" == niah ]]; then
  pids=() inputs=()
  for ((s = 0; s < SHARDS; s++)); do
    mine=()
    for ((t = s; t < ${#tasks[@]}; t += SHARDS)); do mine+=("${tasks[t]}"); done
    [[ ${#mine[@]} -eq 0 ]] && continue
    list=$(IFS=,; echo "${mine[*]}")
    args=(eval niah "${common[@]}" --tasks "$list" --json "$OUT/niah-shard$s.json" --markdown "$OUT/niah-shard$s.md")
    echo "Command (shard $s): \`$BIN ${args[*]}\`" >>"$OUT/header.md"
    "$BIN" "${args[@]}" >/dev/null 2>"$OUT/niah-shard$s.log" &
    pids+=($!) inputs+=("$OUT/niah-shard$s.json")
  done
  for p in "${pids[@]}"; do wait "$p"; done
  merge=(eval merge --inputs "$(IFS=,; echo "${inputs[*]}")" --json "$OUT/eval-niah.json" --markdown "$OUT/eval-niah.md")
  echo "Command: \`$BIN ${merge[*]}\`" >>"$OUT/header.md"
  "$BIN" "${merge[@]}" >/dev/null
fi
parts=()
[[ -f "$OUT/eval-niah.md" && ( "$WHAT" == all || "$WHAT" == niah ) ]] && parts+=("$OUT/eval-niah.md")
for w in kl memory; do
  if [[ "$WHAT" == all || "$WHAT" == "$w" ]]; then
    args=(eval "$w" "${common[@]}" --json "$OUT/eval-$w.json" --markdown "$OUT/eval-$w.md")
    echo "Command: \`$BIN ${args[*]}\`" >>"$OUT/header.md"
    "$BIN" "${args[@]}" >/dev/null
    parts+=("$OUT/eval-$w.md")
  fi
done
cat "$OUT/header.md" "${parts[@]}" | tee "$OUT/eval.md"
