"""Causal prefill attention with PyTorch's scaled_dot_product_attention (BF16, GQA), the yardstick for our
prefill kernel: the same geometries and FLOP count as bench/cuda/prefill_bench.cu.

One whole prompt per call (batch 1, q/k/v of S tokens), timed with CUDA events after warm-up; median and
min-max. TFLOP/s counts the causal attention's useful work, 4 * q_heads * head_dim * S (S + 1) / 2.
The backend PyTorch picks (cuDNN or flash on Hopper) is reported beside each row.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from cuda_timing import event_times_ms

CONFIGS = [
    ("8b 16K h32/8 d128 p256", 16384, 32, 8, 128),
    ("d256 16K h24/4 p256", 16384, 24, 4, 256),
    ("8b 32K h32/8 d128 p256", 32768, 32, 8, 128),
    ("d256 32K h24/4 p256", 32768, 24, 4, 256),
]


def backend_used(q, k, v):
    """The first SDPA backend that accepts these inputs, in PyTorch's own priority order."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([b]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return b.name.lower()
        except RuntimeError:
            continue
    return "math"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for name, s, hq, hkv, d in (CONFIGS[:2] if a.quick else CONFIGS):
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
        times = event_times_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), 3,
                               max(10, a.reps))
        med = times[len(times) // 2]
        flops = 4.0 * hq * d * s * (s + 1) / 2
        rows.append({"config": name, "arm": "torch-sdpa-bf16", "backend": backend_used(q, k, v), "ms_median": med,
                     "ms_min": times[0], "ms_max": times[-1], "tflops": flops / (med * 1e-3) / 1e12})
        del q, k, v
        torch.cuda.empty_cache()
    print(f"torch {torch.__version__}")
    print("| config | arm | backend | ms (median) | min-max | TFLOP/s |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['arm']} | {r['backend']} | {r['ms_median']:.2f} | {r['ms_min']:.2f}-{r['ms_max']:.2f} | "
              f"{r['tflops']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
