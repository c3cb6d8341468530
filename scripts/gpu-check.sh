#!/usr/bin/env bash
# GPU check: build the CUDA targets for Hopper (sm_90), run the GPU tests, compute-sanitizer on a subset,
# the decode benchmark and PyTorch's SDPA as an outside baseline; the benchmark table is printed last.
#   bash scripts/gpu-check.sh            # builds with the `gpu` preset (needs scripts/bootstrap.sh's packages)
#   BUILD=dir bash scripts/gpu-check.sh  # uses prebuilt binaries: dir/tests/cuda_tests, dir/bench/cuda_decode_bench,
#                                        # dir/apps/minimakv/minimakv
#                                        # (scripts/gpu-pack.sh makes such a dir, with the shared libraries they need)
# QUICK=1 runs the shorter benchmark. PARTS picks the parts (default: all of
# "tests sanitizer parity sdpa engine prefill decode"; "cpuattn" adds the CPU attention benchmark on the GPU
# machine's host cores, ATTN_CONTEXTS and ATTN_REPS pick its contexts and repetitions); ENGINE_CONTEXTS,
# ENGINE_BATCHES, ENGINE_REPS and ENGINE_GRAPHS go to scripts/bench/engine-speed.sh. Results (JSON, logs)
# go to $OUT when set, else to build/gpu-results.
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=" ${PARTS:-tests sanitizer parity sdpa engine prefill decode} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
OUT=${OUT:-build/gpu-results}
mkdir -p "$OUT"
if [[ -z "${BUILD:-}" ]]; then
  cmake --preset gpu >/dev/null
  cmake --build --preset gpu -j"$(nproc)" --target cuda_tests cuda_decode_bench cuda_prefill_bench minimakv
  BUILD=build/gpu
fi
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee -a "$OUT/gpu.txt"

tests_rc=0
if part tests; then
  echo "== GPU tests"
  "$BUILD/tests/cuda_tests" --gtest_brief=1 >"$OUT/cuda_tests.log" 2>&1 || tests_rc=$?
  grep -E "Failure|FAILED|error:|Expected|Which is|^\[  PASSED|tests ran" "$OUT/cuda_tests.log" | head -n 40
fi

san_rc=0
if part sanitizer && command -v compute-sanitizer >/dev/null && [[ "${SANITIZE:-1}" == 1 ]]; then
  echo "== compute-sanitizer (memcheck, racecheck) on the small GPU tests"
  small='GpuDecode.Every*:GpuDecode.Instrumentation*:GpuDecode.BadPlans*:GpuPrefill.Accounting*:GpuPrefill.BadPlans*:GpuPrefill.RecentFp8*:GpuPageWrites.*:GpuDecodeGraph.*:GpuCodec.*'
  # racecheck does not model bar.arrive as a release (the probe below shows it on a correct ring), so the
  # prefill tests, whose producer and consumer warps hand tiles over that way, run under memcheck only.
  no_named_barriers='GpuDecode.Every*:GpuDecode.Instrumentation*:GpuDecode.BadPlans*:GpuPrefill.BadPlans*:GpuPageWrites.*:GpuDecodeGraph.*:GpuCodec.*'
  for tool in memcheck racecheck; do
    filter=$small
    [[ $tool == racecheck ]] && filter=$no_named_barriers
    if compute-sanitizer --tool "$tool" --error-exitcode 3 "$BUILD/tests/cuda_tests" --gtest_brief=1 \
         --gtest_filter="$filter" >"$OUT/sanitizer-$tool.log" 2>&1; then
      echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -n 1 | sed 's/=* *//')"
    else
      san_rc=$?; echo "$tool: FAILED (rc $san_rc)"; tail -n 30 "$OUT/sanitizer-$tool.log"
    fi
  done
  if [[ -x "$BUILD/tests/racecheck_probe" ]]; then
    # racecheck reports the probe's hazard in some runs and not in others (it depends on the interleaving
    # it observes), so the probe runs five times.
    flagged=0
    for i in 1 2 3 4 5; do
      compute-sanitizer --tool racecheck "$BUILD/tests/racecheck_probe" >"$OUT/racecheck-probe-$i.log" 2>&1 || true
      grep -qE 'RACECHECK SUMMARY: [1-9]' "$OUT/racecheck-probe-$i.log" && flagged=$((flagged + 1))
    done
    echo "racecheck on a correct bar.arrive/bar.sync ring: hazards reported in $flagged of 5 runs" \
      "($(grep -o 'consumers read .*' "$OUT/racecheck-probe-1.log"))"
  fi
fi

parity_rc=0
if part parity; then
  echo "== engine parity with transformers on the CUDA backend (bf16 KV, random Qwen3/Llama + shipped model)"
  python3 scripts/parity/engine_parity.py --bin "$BUILD/apps/minimakv/minimakv" --device cuda \
    --out "$OUT/engine-parity-cuda.json" 2>&1 | tee "$OUT/engine-parity-cuda.txt" || parity_rc=$?
fi

if part sdpa; then
  echo "== PyTorch SDPA baseline"
  python3 scripts/bench/sdpa_baseline.py ${QUICK:+--quick} --json "$OUT/sdpa.json" 2>&1 | tee "$OUT/sdpa.txt" || true
fi

if part engine && [[ -f data/corpus/essay.txt ]]; then
  echo "== engine speed (CUDA backend, end to end)"
  CONTEXTS="${ENGINE_CONTEXTS:-16384 32768}" BATCHES="${ENGINE_BATCHES:-1 8}" REPS="${ENGINE_REPS:-5}" \
    GRAPHS="${ENGINE_GRAPHS:-1}" BIN="$BUILD/apps/minimakv/minimakv" \
    OUT="$OUT/engine" bash scripts/bench/engine-speed.sh | tee "$OUT/engine.txt"
elif part engine; then
  echo "== engine speed skipped: data/corpus/essay.txt missing (scripts/data/extract_corpus.py makes it)"
fi

if part cpuattn; then
  echo "== CPU attention on the host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  "$BUILD/apps/minimakv/minimakv" attn-bench --contexts ${ATTN_CONTEXTS:-32768 131072} --reps ${ATTN_REPS:-10} --seed 5 \
    --error-max-context 0 --json >"$OUT/cpu-attn.json"
  python3 - "$OUT/cpu-attn.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for r in rows:
    v = r["vs_bf16"]
    print(f"{r['context']:>7} {r['shape']:<12} {r['arm']:<6} t={r['threads']:<3} {r['median_us']:>9.0f} us"
          f" {r['gb_per_s']:6.2f} GB/s  vs bf16 {v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})")
PY
fi

if part prefill; then
  echo "== prefill attention against PyTorch SDPA"
  BUILD="$BUILD" OUT="$OUT/prefill" TESTS=0 bash scripts/bench/prefill-attention.sh | tail -n 40
fi

if part decode; then
  echo "== decode benchmark"
  "$BUILD/bench/cuda_decode_bench" ${QUICK:+--quick} --json "$OUT/decode.json" | tee "$OUT/decode.txt"
fi
echo "tests rc=$tests_rc sanitizer rc=$san_rc parity rc=$parity_rc"
exit $((tests_rc || san_rc || parity_rc))
