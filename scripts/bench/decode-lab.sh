#!/usr/bin/env bash
# The decode kernel lab: variant builds of the split kernel's tuning (tile tokens and tiles in flight per
# page format, the loop order, optionally CTAs per SM), each a cuda_decode_bench linked against the release build's library with only
# paged_decode.cu (with the split body it includes, decode_split.cuh) recompiled, timed side by side on
# the GPU (the variants' correctness: build the chosen one as the default and run cuda_tests).
#   build (development machine, after building SRC):
#     bash scripts/bench/decode-lab.sh build NAME=BF16TT/A,FP8TT/A,TQ3TT/A[+MACRO...] ...
#     e.g. f16a3=16/1,16/3,32/1 or mb4=16/1,32/1,32/1+MINIMAKV_DECODE_MIN_BLOCKS=4 (every kernel; or
#     MINIMAKV_DECODE_MIN_BLOCKS_f for format index f at head_dim <= 128); "-" keeps a format's
#     production tiling at every head_dim (e.g. seq=-,-,-+MINIMAKV_DECODE_PIPE_2=0: TQ3 sequential;
#     -,-,- alone is the production build). LAB_SRCROOT=dir builds from another source tree, e.g.
#     `git worktree add /tmp/before HEAD~1` and LAB_SRCROOT=/tmp/before ... build before=-,-,-
#   run (GPU machine): bash scripts/bench/decode-lab.sh run [bench args...]
#     runs every variant's cuda_decode_bench (default args --quick) into OUT and prints one table:
#     config, arm, then the median µs of each variant.
# SRC=build/release, LAB=build/decode-lab, OUT=build/decode-lab-out.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${SRC:-build/release}
LAB=${LAB:-build/decode-lab}
OUT=${OUT:-build/decode-lab-out}
source scripts/bench/lab-lib.sh
mode=${1:?build or run}; shift
if [[ $mode == build ]]; then
  for spec in "$@"; do
    name=${spec%%=*}; tiling=${spec#*=}; macros=""
    if [[ $tiling == *+* ]]; then macros=${tiling#*+}; tiling=${tiling%%+*}; fi
    IFS=, read -r t0 t1 t2 <<<"$tiling"
    defs=""
    for m in ${macros//+/ }; do defs+=" -D$m"; done
    i=0
    for t in "$t0" "$t1" "$t2"; do
      [[ $t == - ]] || defs+=" -DMINIMAKV_DECODE_TT_$i=${t%/*} -DMINIMAKV_DECODE_AHEAD_$i=${t#*/}"
      i=$((i + 1))
    done
    [[ -z $defs ]] || defs="-DMINIMAKV_DECODE_LAB$defs"
    dir="$LAB/$name"
    # shellcheck disable=SC2086
    lab_build "$SRC" minimakv_cuda src/cuda/paged_decode.cu cuda_decode_bench "$dir" $defs
    echo "$tiling${macros:+ +$macros}" >"$dir/tiling"
    echo "built $dir ($tiling)"
  done
  exit 0
fi
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(--quick)
lab_run cuda_decode_bench "$LAB" "$OUT" "${args[@]}"
python3 scripts/bench/lab_table.py "$OUT" "$LAB" us_median min tiling \
  "variants (tile tokens / tiles ahead for bf16, fp8, tq3)" d2d-copy
