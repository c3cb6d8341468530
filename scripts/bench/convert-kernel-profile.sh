#!/usr/bin/env bash
# Nsight Compute details of the page conversion kernels (FP8 -> TQ3 and the promotion TQ3 -> FP8) on the
# "b8 32K" configuration of cuda_decode_bench (head_dim 128, 744 pages a launch): one launch of each
# kernel, the third of its kind (the bench's device check launches it first; FP8 -> TQ3 launches once
# for K and once for V, so its third launch is the K half of the first timed warm-up), with the
# throughput, issue, occupancy and warp-stall sections, printed as "section / metric / value" lines.
#   BIN=build/release/bench/cuda_decode_bench OUT=dir bash scripts/bench/convert-kernel-profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/bench/cuda_decode_bench}
OUT=${OUT:-build/convert-kernel-profile}
mkdir -p "$OUT"
for k in fp8_to_tq3_kernel tq3_to_fp8_kernel; do
  ncu --kernel-name-base function --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section Occupancy \
    --section WarpStateStats --section InstructionStats --section LaunchStats --csv --page details \
    --log-file "$OUT/$k.csv" "$BIN" --configs "b8 32K" --reps 20 >/dev/null 2>"$OUT/$k.err" || true
  echo "== $k"
  python3 scripts/bench/ncu_details.py "$OUT/$k.csv"
done
