#!/usr/bin/env bash
# The Stale-fidelity protocol on the GPU, in parts that fit one device call each, and the one report
# they make in docs/results.md: RULER-NIAH at 4K (128 examples per task), 8K, 16K and 32K (64 each) on
# identical examples, KL at 4K and 16K and KV memory, for bf16, the default minima (the model's
# kv_profile.json) and minima with TQ3 everywhere (plus fp8 at 4K).
#   bash scripts/eval/stale-fidelity.sh run PART...     # on the GPU machine; PART: 4k 8k 16k-a 16k-b 32k-a 32k-b
#                                                        # (all six by default), or 32k-fp8-a 32k-fp8-b: fp8
#                                                        # alone on the 32K examples, to tell FP8's share of
#                                                        # minima's 32K loss from the Stale format's
#   bash scripts/eval/stale-fidelity.sh report [PART...] # anywhere: merge the parts present, splice the report
#                                                        # (the fp8 parts only when both halves are there)
# Each part runs scripts/eval/run-eval.sh with SHARDS processes side by side and leaves only its merged
# eval-niah.json (and, for 4k, eval-kl.json and eval-memory.json) under OUT/PART; the "-a"/"-b" halves
# are examples 0-31 and 32-63. Measured on an H200 with the shipped model (2026-12-03): 4k 234 s
# (KL and memory included), 8k 114 s, 16k 92 s per half, 32k about 175 s per half (24 examples: 133 s).
# report merges every part's records with `minimakv eval merge` per length and writes the section
# RESULTS_SECTION (default stale-fidelity-calibrated-gpu) of RESULTS (default docs/results.md).
# BIN, MODEL, OUT (default build/stale-fidelity), SHARDS (default 8), ARMS and ARMS_4K override the defaults;
# DEVICE=cpu and EXAMPLES=N (every part's example count) make a small smoke run of the script itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/apps/minimakv/minimakv}
OUT=${OUT:-build/stale-fidelity}
SHARDS=${SHARDS:-8}
ARMS=${ARMS:-bf16,minima,minima@tq4=none}
ARMS_4K=${ARMS_4K:-bf16,fp8,minima,minima@tq4=none}
mode=${1:?run or report}; shift
[[ $SHARDS -ge 2 ]] || { echo "stale-fidelity.sh: SHARDS must be at least 2 (run-eval.sh merges shards)" >&2; exit 2; }
mkdir -p "$OUT"
parts=("$@")
if [[ ${#parts[@]} -eq 0 ]]; then
  parts=(4k 8k 16k-a 16k-b 32k-a 32k-b)
  # The fp8 halves are merged when both are present: one half alone would give fp8 fewer examples than
  # the other arms, and the paired statistics need every arm on the same examples.
  [[ $mode == report && -f $OUT/32k-fp8-a/eval-niah.json && -f $OUT/32k-fp8-b/eval-niah.json ]] &&
    parts+=(32k-fp8-a 32k-fp8-b)
fi

part_args() {  # PART -> the run-eval.sh environment of that part
  case "$1" in
    4k) echo "WHAT=all LENGTHS=4096 EXAMPLES=128 FIRST_EXAMPLE=0 KL_LENGTHS=4096,16384 ARMS=$ARMS_4K" ;;
    8k) echo "WHAT=niah LENGTHS=8192 EXAMPLES=64 FIRST_EXAMPLE=0 ARMS=$ARMS" ;;
    16k-a) echo "WHAT=niah LENGTHS=16384 EXAMPLES=32 FIRST_EXAMPLE=0 ARMS=$ARMS" ;;
    16k-b) echo "WHAT=niah LENGTHS=16384 EXAMPLES=32 FIRST_EXAMPLE=32 ARMS=$ARMS" ;;
    32k-a) echo "WHAT=niah LENGTHS=32768 EXAMPLES=32 FIRST_EXAMPLE=0 ARMS=$ARMS" ;;
    32k-b) echo "WHAT=niah LENGTHS=32768 EXAMPLES=32 FIRST_EXAMPLE=32 ARMS=$ARMS" ;;
    32k-fp8-a) echo "WHAT=niah LENGTHS=32768 EXAMPLES=32 FIRST_EXAMPLE=0 ARMS=fp8" ;;
    32k-fp8-b) echo "WHAT=niah LENGTHS=32768 EXAMPLES=32 FIRST_EXAMPLE=32 ARMS=fp8" ;;
    *) echo "stale-fidelity.sh: no part '$1' (4k 8k 16k-a 16k-b 32k-a 32k-b 32k-fp8-a 32k-fp8-b)" >&2; return 2 ;;
  esac
}

if [[ $mode == run ]]; then
  for p in "${parts[@]}"; do
    env_args="$(part_args "$p")${EXAMPLES:+ EXAMPLES=$EXAMPLES}"  # a later assignment wins in env
    t0=$(date +%s)
    # shellcheck disable=SC2086
    env $env_args DEVICE="${DEVICE:-cuda}" SHARDS="$SHARDS" BIN="$BIN" OUT="$OUT/$p" \
      ${MODEL:+MODEL=$MODEL} \
      bash scripts/eval/run-eval.sh >/dev/null 2>>"$OUT/$p.log" || { echo "$p: failed (see $OUT/$p.log)"; exit 1; }
    { cat "$OUT/$p/header.md"; echo "Part $p: $env_args, $(($(date +%s) - t0)) s"; } >"$OUT/$p.header"
    rm -f "$OUT/$p"/niah-shard* "$OUT/$p"/report.md "$OUT/$p"/header.md
    echo "$p: $(($(date +%s) - t0)) s; $(grep -m1 -E '^\| \*\*macro' "$OUT/$p/eval-niah.md")"
  done
  exit 0
fi

[[ $mode == report ]] || { echo "stale-fidelity.sh: run or report" >&2; exit 2; }
report=$OUT/report.md
{
  echo "Parts (\`bash scripts/eval/stale-fidelity.sh run PART\`, then \`report\`):"
  echo
  for p in "${parts[@]}"; do
    [[ -f $OUT/$p.header ]] && sed 's/^/    /' "$OUT/$p.header"
  done
  echo
} >"$report"
for len in 4k 8k 16k 32k; do
  inputs=()
  for p in "${parts[@]}"; do
    [[ $p == "$len" || $p == "$len"-* ]] && [[ -f $OUT/$p/eval-niah.json ]] && inputs+=("$OUT/$p/eval-niah.json")
  done
  [[ ${#inputs[@]} -gt 0 ]] || continue
  "$BIN" eval merge --inputs "$(IFS=,; echo "${inputs[*]}")" --json "$OUT/merged-$len.json" \
    --markdown "$OUT/merged-$len.md" >/dev/null
  sed -n '/^\*\*[0-9]* tokens\*\*/,$p' "$OUT/merged-$len.md" >>"$report"
  echo >>"$report"
  if [[ $len == 4k ]]; then
    for w in kl memory; do
      [[ -f $OUT/4k/eval-$w.md ]] && sed -n '/^### /,$p' "$OUT/4k/eval-$w.md" | grep -v '^(total' >>"$report"
    done
  fi
done
python3 scripts/eval/splice-results.py --results "${RESULTS:-docs/results.md}" \
  --section "${RESULTS_SECTION:-stale-fidelity-calibrated-gpu}" --report "$report"
echo "wrote $report into ${RESULTS:-docs/results.md}"
