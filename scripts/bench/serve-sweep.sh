#!/usr/bin/env bash
# The offered-load sweep on a GPU: for each KV arm, `minimakv serve` at one KV memory envelope on the
# Qwen3-8B geometry with dummy weights, driven by scripts/bench/load_gen.py (Poisson arrivals at each
# rate, 16K-token prompts so KV memory binds, fixed output lengths); one JSON per arm, the server's
# stderr (memory, pools, capacity per mode) beside it, then the table (sweep_report.py).
#   BUILD=build/gpu-carry bash scripts/bench/serve-sweep.sh [outdir]
# Settings (environment): ARMS, RATES (req/s; RATES_<arm> overrides them for one arm), DURATION and DRAIN
# (s per rate), PROMPT, OUTPUT (tokens), ENVELOPE (--kv-memory), MODEL, SLO_TTFT / SLO_TPOT (goodput),
# EXTRA (more serve flags). Arrivals and prompts depend on the rate alone, so the arms are paired.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
BIN=$BUILD/apps/minimakv/minimakv
OUT=${1:-/tmp/serve-sweep}
ARMS=${ARMS:-bf16 fp8 minima}
RATES=${RATES:-0.05 0.1 0.2}
DURATION=${DURATION:-40}
DRAIN=${DRAIN:-15}
PROMPT=${PROMPT:-16384}
OUTPUT=${OUTPUT:-512}
ENVELOPE=${ENVELOPE:-3GiB}
MODEL=${MODEL:-bench/configs/qwen3-8b}
SLO_TTFT=${SLO_TTFT:-10}
SLO_TPOT=${SLO_TPOT:-0.05}
mkdir -p "$OUT"
source scripts/gpu-env.sh
for arm in $ARMS; do
  rates_var="RATES_$arm"
  rates=${!rates_var:-$RATES}
  echo "== $arm: serve --kv $arm --kv-memory $ENVELOPE, rates $rates, ${DURATION}+${DRAIN} s each" >&2
  listen=$(mktemp)
  "$BIN" serve --model "$MODEL" --dummy-weights --device cuda --kv "$arm" --kv-memory "$ENVELOPE" \
    --reference-tokens $((PROMPT + OUTPUT)) --max-running 64 --port 0 --shutdown-grace 5 ${EXTRA:-} \
    > "$listen" 2> "$OUT/serve-$arm.err" &
  pid=$!
  for _ in $(seq 1 240); do grep -q listening "$listen" 2>/dev/null && break; sleep 0.5; done
  if ! grep -q listening "$listen"; then
    echo "serve $arm did not start" >&2; cat "$OUT/serve-$arm.err" >&2; kill "$pid" 2>/dev/null || true; continue
  fi
  url=$(grep -o 'http://[0-9.:]*' "$listen")
  cat "$OUT/serve-$arm.err" >&2
  python3 scripts/bench/load_gen.py --url "$url" --rates $rates --duration "$DURATION" --drain "$DRAIN" \
    --prompt-tokens "$PROMPT" --output-tokens "$OUTPUT" --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --warmup \
    --json "$OUT/sweep-$arm.json" || echo "load_gen $arm exited $?" >&2
  kill -TERM "$pid"; wait "$pid" || echo "serve $arm exited $?" >&2
done
python3 scripts/bench/sweep_report.py "$OUT"/sweep-*.json | tee "$OUT/report.md"
