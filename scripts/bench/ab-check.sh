#!/usr/bin/env bash
# A refactor's GPU check: two packed builds (scripts/gpu-pack.sh) of the same engine, before and after,
# must compute the same thing at the same speed. Parts (PARTS, default all):
#   tests    - the GPU test suite of the new build (cuda_tests)
#   identity - prompt logits (SHA-256 of their JSON) and greedy tokens of both builds on the embedded
#              model and two 8B geometries with dummy weights, in bf16 and minima KV (the embedded
#              model's minima follows its kv_profile.json, which builds before 3ae7ae3 ignore: compare
#              minima across that commit with the same layout, e.g. both after it)
#   decode   - the decode-kernel benchmark (cuda_decode_bench --quick) of both builds, alternating
#   engine   - decode step and prefill of both builds at Qwen3-8B geometry, alternating (REPS times)
#   kernels  - Nsight Compute: the new build's kernels of one decode step at 8K, batch 1, bf16 KV
#   OLD=dir NEW=dir (packed builds); OUT=dir (default build/ab-check). The table is printed last.
#   OLD_ENV / NEW_ENV: NAME=VALUE settings each side runs with (space-separated), so that one build can
#   be compared with itself across a run-time switch, e.g. OLD=NEW=build/gpu-carry OLD_ENV=MINIMAKV_CUDA_OVERLAP=0.
set -euo pipefail
cd "$(dirname "$0")/../.."
PARTS=" ${PARTS:-tests identity decode engine kernels} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
OLD=${OLD:?packed build before the change}
NEW=${NEW:?packed build after the change}
OUT=${OUT:-build/ab-check}
REPS=${REPS:-2}
mkdir -p "$OUT"
BUILD=$NEW source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee -a "$OUT/gpu.txt"
OLD_ENV=${OLD_ENV:-}
NEW_ENV=${NEW_ENV:-}
run() {  # build args... (each build with its own libraries first on the path, and its side's settings)
  local b=$1 settings=$NEW_ENV; shift
  [[ "$side" == old ]] && settings=$OLD_ENV
  # shellcheck disable=SC2086  # the settings are words on purpose
  env $settings LD_LIBRARY_PATH="$b/runtime-libs:$LD_LIBRARY_PATH" "$@"
}
tests_rc=0
side=new
if part tests; then
  echo "== GPU tests (new build)"
  run "$NEW" "$NEW/tests/cuda_tests" --gtest_brief=1 >"$OUT/cuda_tests.log" 2>&1 || tests_rc=$?
  grep -E "Failure|FAILED|^\[  PASSED|tests ran" "$OUT/cuda_tests.log" | head -n 20
fi
if part identity; then
  echo "== identity: prompt logits and greedy tokens, old vs new"
  for model in models/minima-qwen3-23m bench/configs/qwen3-8b bench/configs/llama-3.1-8b; do
    extra=""; [[ "$model" == bench/* ]] && extra="--dummy-weights"
    for kv in bf16 minima; do
      for side in old new; do
        b=$OLD; [[ $side == new ]] && b=$NEW
        run "$b" "$b/apps/minimakv/minimakv" generate --device cuda --model "$model" $extra --kv "$kv" \
          --prompt-file README.md --prompt-tokens 600 --max-tokens 8 --json --prompt-logits \
          >"$OUT/id-$(basename "$model")-$kv-$side.json" 2>/dev/null || echo "{}" >"$OUT/id-$(basename "$model")-$kv-$side.json"
      done
    done
  done
fi
if part decode; then
  echo "== decode kernels, old and new alternating"
  for ((r = 1; r <= REPS; r++)); do
    for side in old new; do
      b=$OLD; [[ $side == new ]] && b=$NEW
      run "$b" "$b/bench/cuda_decode_bench" --quick --json "$OUT/decode-$side-r$r.json" >"$OUT/decode-$side-r$r.log" 2>&1 || true
    done
  done
fi
if part engine; then
  echo "== engine at Qwen3-8B geometry, old and new alternating"
  for ((r = 1; r <= REPS; r++)); do
    for cfg in "bf16 8192 1" "minima 16384 4"; do
      read -r kv ctx batch <<<"$cfg"
      for side in old new; do
        b=$OLD; [[ $side == new ]] && b=$NEW
        run "$b" "$b/apps/minimakv/minimakv" generate --device cuda --model bench/configs/qwen3-8b --dummy-weights \
          --kv "$kv" --prompt-file README.md --prompt-tokens $((ctx - 64)) --batch "$batch" --max-tokens 64 \
          --ignore-eos --json >"$OUT/engine-$kv-$ctx-b$batch-$side-r$r.json" \
          2>"$OUT/engine-$kv-$ctx-b$batch-$side-r$r.log" || tail -n 3 "$OUT/engine-$kv-$ctx-b$batch-$side-r$r.log"
      done
    done
  done
fi
if part kernels && command -v ncu >/dev/null; then
  echo "== kernels of a decode step (8K, batch 1, bf16 KV, new build)"
  LD_LIBRARY_PATH="$NEW/runtime-libs:$LD_LIBRARY_PATH" CONTEXT=8192 KV=bf16 BATCH=1 SKIP=${SKIP:-13000} COUNT=${COUNT:-700} \
    BIN="$NEW/apps/minimakv/minimakv" TEXT=README.md MODEL_ARGS="--model bench/configs/qwen3-8b --dummy-weights" \
    OUT="$OUT/kernels" bash scripts/bench/engine-kernels.sh | tee "$OUT/kernels.txt" | head -n 30 || true
fi
python3 - "$OUT" "$tests_rc" <<'PY'
import glob, hashlib, json, os, statistics, sys
out, tests_rc = sys.argv[1], int(sys.argv[2])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return {}
ids = sorted(glob.glob(f"{out}/id-*-old.json"))
if ids:
    print("\nidentity (old vs new): model, kv, logits equal, tokens equal")
    for p in ids:
        a, b = load(p), load(p.replace("-old.json", "-new.json"))
        h = lambda d: hashlib.sha256(json.dumps(d.get("prompt_logits")).encode()).hexdigest()[:12]
        ok = bool(a) and bool(b)
        print(f"  {os.path.basename(p)[3:-9]:<28} {ok and h(a) == h(b)!s:<6} {ok and a.get('tokens') == b.get('tokens')!s:<6}"
              + ("" if ok else "  (a run failed)"))
dec = sorted(glob.glob(f"{out}/decode-old-r*.json"))
if dec:
    rows = {}
    for side in ("old", "new"):
        for p in sorted(glob.glob(f"{out}/decode-{side}-r*.json")):
            for x in (load(p) or []):
                key = (x["config"], x["arm"])
                rows.setdefault(key, {"old": [], "new": []})[side].append(x["us_median"])
    print("\ndecode kernels, median us (old / new, ratio)")
    for (shape, arm), v in rows.items():
        if v["old"] and v["new"]:
            o, n = statistics.median(v["old"]), statistics.median(v["new"])
            print(f"  {shape:<40} {arm:<10} {o:9.1f} {n:9.1f}  {n / o:5.3f}")
eng = sorted(glob.glob(f"{out}/engine-*-old-r*.json"))
if eng:
    print("\nengine, Qwen3-8B dummy: step ms median and prefill tok/s (old / new per repetition)")
    for p in eng:
        a, b = load(p), load(p.replace("-old-", "-new-"))
        if "step_ms" not in a or "step_ms" not in b:
            print(f"  {os.path.basename(p)}: a run failed"); continue
        sa, sb = a["step_ms"]["median"], b["step_ms"]["median"]
        print(f"  {os.path.basename(p)[7:-12]:<22} step {sa:7.2f} {sb:7.2f} ({sb / sa:5.3f})  "
              f"prefill {a.get('prefill_tokens_per_s', 0):8.0f} {b.get('prefill_tokens_per_s', 0):8.0f}")
print(f"\ncuda_tests rc {tests_rc}")
PY
