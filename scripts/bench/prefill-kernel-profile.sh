#!/usr/bin/env bash
# Nsight Compute on the copy-engine prefill CTA (PrefillKernel::kTma), by default at the 8B geometry,
# 32K prompt in 4K chunks (D=256 CONFIG="d256 16K h24/4 p256" for the paper's geometry): one launch of
# the kernel of each page format asked for (FORMATS, default "1 2": FP8 in the
# fp8 arm, TQ3 in the mixed arm; 0 is BF16 in the bf16 arm), a late chunk's (SKIP launches of that
# kernel skipped), with the full section set; prints the throughput and stall lines, then the SASS
# instructions where its warps wait most (ncu_sass_hotspots.py).
#   BIN=build/release/bench/cuda_prefill_bench OUT=dir FORMATS="1 2" SKIP=12 [D=128 CONFIG=...] bash scripts/bench/prefill-kernel-profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/release/bench/cuda_prefill_bench}
OUT=${OUT:-build/prefill-kernel-profile}
D=${D:-128}
CONFIG=${CONFIG:-8b 32K h32/8 d128 p256}
mkdir -p "$OUT"
arm_of() { case $1 in 0) echo bf16 ;; 1) echo fp8 ;; *) echo mixed ;; esac; }
for f in ${FORMATS:-1 2}; do
  ncu --kernel-name-base demangled --kernel-name "regex:prefill_tma_kernel<\\(minimakv::codec::PageFormat\\)$f, \\(int\\)$D, \\(int\\)1>" \
    --launch-skip "${SKIP:-12}" --launch-count 1 --set full -f -o "$OUT/format$f" \
    "$BIN" --configs "$CONFIG" --arms "$(arm_of "$f")" --kernels tma --reps 10 >/dev/null 2>"$OUT/format$f.err" || true
  echo "== prefill_tma_kernel, page format $f (0 BF16, 1 FP8, 2 TQ3)"
  ncu -i "$OUT/format$f.ncu-rep" --csv --page details >"$OUT/format$f.csv" 2>/dev/null || true
  python3 scripts/bench/ncu_details.py "$OUT/format$f.csv"
  ncu -i "$OUT/format$f.ncu-rep" --csv --page source --print-source sass >"$OUT/format$f-sass.csv" 2>/dev/null || true
  python3 scripts/bench/ncu_sass_hotspots.py "$OUT/format$f-sass.csv" 28
done
