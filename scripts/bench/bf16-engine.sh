#!/usr/bin/env bash
# The BF16 engine at real model scale on one GPU, with dummy weights (bench/configs/), beside PyTorch
# measured in the same run; the table is printed last. Parts (PARTS, default all):
#   tests  - the GPU test suite (cuda_tests)
#   gemm   - each projection through the backend (BF16 tensor cores and fp32 SGEMM) and PyTorch's BF16
#            matmul at the same shapes; PyTorch's decode GEMV chain in a CUDA graph; copy bandwidth
#   decode - decode step at batch 1, 8K context, BF16 KV: BF16 weights vs fp32 weights (REPS alternating)
#   batch  - 32K context, batch 8: bf16 vs minima KV (decode tokens/s, prefill tokens/s)
#   big    - Qwen3-32B geometry at 32K with minima (weights on the device = checkpoint bytes)
#   BUILD=dir (prebuilt: dir/tests/cuda_tests, dir/bench/cuda_gemm_bench, dir/apps/minimakv/minimakv)
#   OUT=dir (JSON and logs; default build/bf16-engine)
set -euo pipefail
cd "$(dirname "$0")/../.."
PARTS=" ${PARTS:-tests gemm decode batch big} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
BUILD=${BUILD:-build/release}
OUT=${OUT:-build/bf16-engine}
REPS=${REPS:-3}
CFG=${CFG:-bench/configs/qwen3-8b}
mkdir -p "$OUT"
source scripts/gpu-env.sh
BIN="$BUILD/apps/minimakv/minimakv"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee -a "$OUT/gpu.txt"
gen() {  # config kv context batch new weights -> json on stdout
  "$BIN" generate --device cuda --model "$1" --dummy-weights --kv "$2" --prompt-file README.md \
    --prompt-tokens $(($3 - $5)) --batch "$4" --max-tokens "$5" --ignore-eos --weights "$6" --json
}
tests_rc=0
if part tests; then
  echo "== GPU tests"
  "$BUILD/tests/cuda_tests" --gtest_brief=1 >"$OUT/cuda_tests.log" 2>&1 || tests_rc=$?
  grep -E "Failure|FAILED|error:|Expected|Which is|rel L2|^\[  PASSED|tests ran" "$OUT/cuda_tests.log" | head -n 40
fi
if part gemm; then
  echo "== projections: ours (BF16, fp32) and PyTorch BF16"
  "$BUILD/bench/cuda_gemm_bench" --config "$CFG/config.json" --tokens 1,8,8192 --reps 5 >"$OUT/gemm-ours.jsonl"
  python3 scripts/bench/torch_engine_reference.py --config "$CFG/config.json" --tokens 8192 >"$OUT/torch-ref.jsonl"
fi
if part decode; then
  echo "== decode, batch 1, 8K context, bf16 KV: BF16 vs fp32 weights (and BF16 at 1K: the step without KV)"
  for ((r = 1; r <= REPS; r++)); do
    for wt in bf16 fp32; do gen "$CFG" bf16 8192 1 64 "$wt" >"$OUT/decode-$wt-r$r.json"; done
    gen "$CFG" bf16 1024 1 64 bf16 >"$OUT/decode1k-bf16-r$r.json"
  done
fi
if part batch; then
  echo "== 32K context, batch 8: bf16 vs minima KV (BF16 weights)"
  for kv in bf16 minima; do gen "$CFG" "$kv" 32768 8 64 bf16 >"$OUT/batch8-$kv.json"; done
  gen "$CFG" bf16 32768 1 16 bf16 >"$OUT/prefill32k-b1.json"
fi
if part big; then
  echo "== Qwen3-32B geometry, 32K, minima"
  gen bench/configs/qwen3-32b minima 32768 1 16 bf16 >"$OUT/qwen3-32b-minima.json" || echo "qwen3-32b run failed"
fi
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def jl(p):
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
ours, ref = jl(f"{out}/gemm-ours.jsonl"), jl(f"{out}/torch-ref.jsonl")
chains = [x for x in ours if "chain" in x]
ours = [x for x in ours if "dtype" in x]
r = {x["what"] + x.get("proj", ""): x for x in ref}
if ours and ref:
    print("\nprojection      n   ours bf16 ms  torch bf16 ms  ratio   ours fp32 ms  (TFLOP/s ours bf16)")
    for x in ours:
        if x["dtype"] != "bf16" or x["n"] != 8192: continue
        f = next(y for y in ours if y["dtype"] == "fp32" and y["proj"] == x["proj"] and y["n"] == x["n"])
        t = r["prefill_gemm" + x["proj"]]
        print(f"{x['proj']:<10} {x['n']:>6} {x['ms']:>12.3f} {t['ms']:>14.3f} {x['ms']/t['ms']:>6.2f} {f['ms']:>14.3f}  ({x['tflops']:.0f})")
chain = r.get("decode_chain_b1"); copy = r.get("copy")
fused = r.get("decode_chain_b1_fused")
if fused:
    print(f"PyTorch decode GEMV chain b1: {chain['ms']:.3f} ms; with fused qkv and gate-up {fused['ms']:.3f} ms")
    if fused["ms"] < chain["ms"]:
        chain = fused  # the floor: the faster of the two chains over the same weights
for x in chains:
    rows = x.get("rows_per_block")
    who = (f"ours (q, k, v and gate, up fused; " + ("a warp a row)" if rows == 1 else f"{rows} rows a block)")
           if rows is not None
           else f"cuBLAS BF16 -> {x['out']}")
    print(f"decode GEMV chain b1 in one CUDA graph, {who}: {x['ms']:.3f} ms [{x['ms_min']:.3f}, {x['ms_max']:.3f}]"
          + (f" (PyTorch's chain {chain['ms']:.3f} ms)" if chain else ""))
dec = {w: [json.load(open(p)) for p in sorted(glob.glob(f"{out}/decode-{w}-r*.json"))] for w in ("bf16", "fp32")}
if dec["bf16"]:
    print("\ndecode b1 8K bf16 KV: step ms median per run")
    for w, runs in dec.items():
        print(f"  weights {w}: " + ", ".join(f"{j['step_ms']['median']:.2f}" for j in runs))
    if chain and copy:
        kv_bytes = 8192 * 36 * 8 * 128 * 2 * 2  # tokens x layers x kv heads x head_dim x (K, V) x 2 bytes (qwen3-8b)
        floor = chain["ms"] + kv_bytes / (copy["read_plus_write_tb_per_s"] * 1e12) * 1e3
        b = statistics.median(j["step_ms"]["median"] for j in dec["bf16"])
        f = statistics.median(j["step_ms"]["median"] for j in dec["fp32"])
        print(f"  torch GEMV chain {chain['ms']:.2f} ms ({chain['tb_per_s']:.2f} TB/s) + KV at copy bandwidth "
              f"{kv_bytes / (copy['read_plus_write_tb_per_s'] * 1e12) * 1e3:.2f} ms = {floor:.2f} ms")
        print(f"  ours BF16 {b:.2f} ms = {b / floor:.2f}x the floor; fp32 weights {f:.2f} ms = {f / floor:.2f}x")
        k1 = [json.load(open(p))["step_ms"]["median"] for p in sorted(glob.glob(f"{out}/decode1k-bf16-r*.json"))]
        if k1:
            print(f"  ours BF16 at 1K context: " + ", ".join(f"{x:.2f}" for x in k1) + f" ms (torch chain {chain['ms']:.2f})")
    m = dec["bf16"][0].get("memory", {})
    print(f"  weights on device {m.get('weight_bytes', 0) / 2**30:.2f} GiB, checkpoint {m.get('checkpoint_bytes', 0) / 2**30:.2f} GiB")
for kv in ("bf16", "minima"):
    p = f"{out}/batch8-{kv}.json"
    if os.path.exists(p):
        j = json.load(open(p))
        pre = [x["prefill_s"] for x in j["results"]]
        print(f"32K b8 {kv:<6}: decode {j['decode_tokens_per_s']:.1f} tok/s (step {j['step_ms']['median']:.2f} ms), "
              f"prefill {32768 - 64:.0f} tokens in {statistics.median(pre):.2f} s per sequence, KV {j['kv_bytes_per_token']:.0f} B/token")
bp, mp = f"{out}/batch8-bf16.json", f"{out}/batch8-minima.json"
if os.path.exists(bp) and os.path.exists(mp):
    print(f"  minima / bf16 decode tokens/s: {json.load(open(mp))['decode_tokens_per_s'] / json.load(open(bp))['decode_tokens_per_s']:.2f}")
p = f"{out}/prefill32k-b1.json"
if os.path.exists(p):
    j = json.load(open(p))
    print(f"prefill 32K b1 bf16 KV: {j['prefill_tokens_per_s']:.0f} tokens/s")
p = f"{out}/qwen3-32b-minima.json"
if os.path.exists(p) and os.path.getsize(p):
    j = json.load(open(p)); m = j["memory"]
    print(f"qwen3-32b 32K minima: prefill {j['prefill_tokens_per_s']:.0f} tok/s, decode {j['decode_tokens_per_s']:.1f} tok/s, "
          f"weights {m['weight_bytes'] / 2**30:.2f} GiB (checkpoint {m['checkpoint_bytes'] / 2**30:.2f}), free {m.get('device_free_bytes', 0) / 2**30:.1f} GiB")
PY
echo "tests rc=$tests_rc"
exit $tests_rc
