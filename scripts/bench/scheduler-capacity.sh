#!/usr/bin/env bash
# Peak concurrency at one KV envelope (issue target: minima >= 4.5x bf16 at 16K-token requests, every
# request completing) and the scheduler's own cost per step against an 8B decode step, on a GPU:
#   BUILD=build/gpu-carry bash scripts/bench/scheduler-capacity.sh [outdir]
# Parts (PARTS="small big overhead"): small = the embedded model, 16K-token requests, 512 MiB;
# big = Qwen3-8B geometry with dummy weights, 16K-token requests, 8 GiB; overhead = the 8B model
# decoding 64 requests of 1K prompt + 256 tokens (minima). Each replay's JSON lands in outdir.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
BIN=$BUILD/apps/minimakv/minimakv
OUT=${1:-/tmp/scheduler-capacity}
PARTS=${PARTS:-small big overhead}
mkdir -p "$OUT"
source scripts/gpu-env.sh
run() {  # name, trace, extra args...
  local name=$1 trace=$2; shift 2
  echo "== $name" >&2
  "$BIN" replay --trace "$trace" --device cuda --json "$@" > "$OUT/$name.json" || echo "replay $name exited $?" >&2
}
if [[ " $PARTS " == *" small "* ]]; then
  "$BIN" make-trace --requests 24 --rate 0 --prompt-tokens 16128 --output-tokens 256 --seed 1 --out "$OUT/t16k.jsonl"
  for kv in bf16 fp8 minima; do
    run "small-$kv" "$OUT/t16k.jsonl" --kv $kv --kv-memory 512MiB --max-running 64
  done
fi
if [[ " $PARTS " == *" big "* ]]; then
  "$BIN" make-trace --requests 20 --rate 0 --prompt-tokens 16128 --output-tokens 256 --seed 2 --out "$OUT/t16k-big.jsonl"
  for kv in bf16 minima; do
    run "big-$kv" "$OUT/t16k-big.jsonl" --model bench/configs/qwen3-8b --dummy-weights --kv $kv --kv-memory 8GiB \
      --max-running 64
  done
fi
if [[ " $PARTS " == *" overhead "* ]]; then
  "$BIN" make-trace --requests 64 --rate 0 --prompt-tokens 1024 --output-tokens 256 --seed 3 --out "$OUT/tdecode.jsonl"
  run "overhead-minima" "$OUT/tdecode.jsonl" --model bench/configs/qwen3-8b --dummy-weights --kv minima \
    --kv-memory 16GiB --max-running 64
fi
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"{'run':<18}{'finished':>9}{'peak run':>9}{'cap@ref':>8}{'preempt':>8}{'makespan s':>11}{'TTFT p50 s':>11}{'step p50 ms':>12}{'loop p50 us':>12}{'loop/step':>10}")
for name in sorted(os.listdir(out)):
    if not name.endswith(".json"): continue
    try: j = json.load(open(os.path.join(out, name)))
    except Exception as e: print(name, "unreadable", e); continue
    s = j["summary"]; kv = j["kv"]
    cap = j["capacity"]["modes"][kv]["max_requests"]
    step, loop = s["step_ms"]["p50"], s["loop_overhead_us"]["p50"]
    print(f"{name[:-5]:<18}{s['finished']:>5}/{s['requests']:<3}{s['peak_running']:>9}{cap:>8}{s['preemptions']:>8}{s['makespan_s']:>11.1f}"
          f"{s['ttft_s']['p50']:>11.2f}{step:>12.2f}{loop:>12.1f}{loop / 1e3 / step if step else 0:>10.2%}")
for group in ("small", "big"):
    b, m = os.path.join(out, f"{group}-bf16.json"), os.path.join(out, f"{group}-minima.json")
    if os.path.exists(b) and os.path.exists(m):
        pb = json.load(open(b))["summary"]["peak_running"]; pm = json.load(open(m))["summary"]["peak_running"]
        print(f"{group}: peak concurrency minima / bf16 = {pm} / {pb} = {pm / max(1, pb):.2f}x")
PY
