#!/usr/bin/env bash
# The prefill kernel lab: variant builds of paged_prefill.cu (with the tile body it includes) set by
# macros, each a cuda_prefill_bench linked against the release build's library with only that object
# replaced, then run side by side on the GPU. Every variant's bench checks each (kernel, arm) against the
# fp64 reference before timing it, and the wgmma and mma.sync consumers are both variants of every build.
#   build (development machine, after building SRC):
#     bash scripts/bench/prefill-lab.sh build NAME[=MACRO[+MACRO...]] ...
#     e.g. base stages2=MINIMAKV_PREFILL_STAGES=2
#   run (GPU machine): bash scripts/bench/prefill-lab.sh run [bench args...]
#     runs every variant's cuda_prefill_bench (default args --quick) into OUT and prints one table:
#     config, arm (layout and kernel), then each variant's TFLOP/s.
# SRC=build/release, LAB=build/prefill-lab, OUT=build/prefill-lab-out.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${SRC:-build/release}
LAB=${LAB:-build/prefill-lab}
OUT=${OUT:-build/prefill-lab-out}
source scripts/bench/lab-lib.sh
mode=${1:?build or run}; shift
if [[ $mode == build ]]; then
  for spec in "$@"; do
    name=${spec%%=*}; macros=""
    [[ $spec == *=* ]] && macros=${spec#*=}
    mdefs=""
    for m in ${macros//+/ }; do mdefs+=" -D$m"; done
    dir="$LAB/$name"
    # shellcheck disable=SC2086
    lab_build "$SRC" minimakv_cuda_prefill src/cuda/paged_prefill.cu cuda_prefill_bench "$dir" $mdefs
    echo "${macros:-default}" >"$dir/macros"
    echo "built $dir (${macros:-default})"
  done
  exit 0
fi
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(--quick)
lab_run cuda_prefill_bench "$LAB" "$OUT" "${args[@]}"
grep -H "FAILED" "$OUT"/*.log || true
python3 scripts/bench/lab_table.py "$OUT" "$LAB" tflops max macros variants
