#!/usr/bin/env bash
# Prefill attention on one GPU, one call: the prefill GPU tests, our kernel over whole 16K and 32K
# prompts in every KV layout (each arm checked against the fp64 reference first) and PyTorch's SDPA at
# the same geometries, then one table of TFLOP/s and the ratios to SDPA measured in the same run.
#   BUILD=dir (prebuilt: dir/tests/cuda_tests, dir/bench/cuda_prefill_bench; scripts/gpu-pack.sh)
#   OUT=dir (JSON and logs; default build/prefill-attention); CHUNK (default 4096); QUICK=1 (16K only);
#   TESTS=0 skips the GPU tests; BENCH_ARGS adds arguments to cuda_prefill_bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
OUT=${OUT:-build/prefill-attention}
CHUNK=${CHUNK:-4096}
mkdir -p "$OUT"
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee -a "$OUT/gpu.txt"
tests_rc=0
if [[ "${TESTS:-1}" == 1 ]]; then
  echo "== prefill GPU tests"
  "$BUILD/tests/cuda_tests" --gtest_brief=1 --gtest_filter='GpuPrefill*' >"$OUT/prefill-tests.log" 2>&1 || tests_rc=$?
  grep -E "Failure|FAILED|error:|Expected|Which is|worst|engine-like|^\[  PASSED|tests ran" "$OUT/prefill-tests.log" | head -n 30
fi
echo "== our prefill attention (chunks of $CHUNK)"
bench_rc=0
# shellcheck disable=SC2086
"$BUILD/bench/cuda_prefill_bench" --chunk "$CHUNK" ${QUICK:+--quick} --json "$OUT/ours.json" ${BENCH_ARGS:-} \
  >"$OUT/ours.txt" 2>&1 || bench_rc=$?
grep -E "relative L2|FAILED|GPU:" "$OUT/ours.txt" || true
echo "== PyTorch SDPA"
python3 scripts/bench/sdpa_prefill.py ${QUICK:+--quick} --json "$OUT/sdpa.json" >"$OUT/sdpa.txt" 2>&1 || cat "$OUT/sdpa.txt"
python3 - "$OUT" <<'PY'
import json, os, re, sys
out = sys.argv[1]
ours = json.load(open(f"{out}/ours.json")) if os.path.exists(f"{out}/ours.json") else []
# SDPA has no pages: a geometry's row serves every page size of it (the name without its " pN").
geometry = lambda name: re.sub(r" p\d+$", "", name)
sdpa = {geometry(r["config"]): r for r in json.load(open(f"{out}/sdpa.json"))} if os.path.exists(f"{out}/sdpa.json") else {}
print("\n| config | arm | ms (median) | min-max | TFLOP/s | SDPA ms (backend) | SDPA TFLOP/s | ours / SDPA TFLOP/s |")
print("|---|---|---|---|---|---|---|---|")
for r in ours:
    s = sdpa.get(geometry(r["config"]))
    ref = f"{s['ms_median']:.2f} ({s['backend']}) | {s['tflops']:.1f} | {r['tflops'] / s['tflops']:.2f}" if s else "- | - | -"
    print(f"| {r['config']} | {r['arm']} | {r['ms_median']:.2f} | {r['ms_min']:.2f}-{r['ms_max']:.2f} | {r['tflops']:.1f} | {ref} |")
PY
echo "tests rc=$tests_rc bench rc=$bench_rc"
exit $((tests_rc || bench_rc))
