#!/usr/bin/env bash
# Nsight Compute details of the decode split kernels on the canary geometry of cuda_decode_bench (the
# first configuration it runs, head_dim 256): one launch per format, the first timed one of the arm that
# reads it (BF16 in the bf16 arm, FP8 in the fp8 arm, TQ3 in the mixed arm), with the throughput,
# occupancy and warp-stall sections, printed as "section / metric / value" lines. The bench launches at
# capacity (as a graph replay does): every arm launches every pool's format, 3 warm-ups + 20 repetitions,
# so format f's own arm starts after 23 f launches of it.
#   BIN=build/release/bench/cuda_decode_bench OUT=dir bash scripts/bench/decode-kernel-profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/bench/cuda_decode_bench}
OUT=${OUT:-build/decode-kernel-profile}
mkdir -p "$OUT"
for f in 0 1 2; do
  ncu --kernel-name-base demangled --kernel-name "regex:decode_split_kernel<\\(minimakv::codec::PageFormat\\)$f, \\(int\\)256" \
    --launch-skip $((23 * f + 3)) --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --csv --page details --log-file "$OUT/format$f.csv" "$BIN" --quick --reps 20 >/dev/null 2>"$OUT/format$f.err" || true
  echo "== split kernel, page format $f (0 BF16, 1 FP8, 2 TQ3)"
  python3 scripts/bench/ncu_details.py "$OUT/format$f.csv"
done
