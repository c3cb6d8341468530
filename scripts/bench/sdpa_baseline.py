"""Dense BF16 decode with PyTorch's scaled_dot_product_attention, as an outside yardstick for our kernels.

Same geometries as bench/cuda/decode_bench.cu: one query per sequence, K/V of `tokens` positions, GQA.
Timed with CUDA events after warm-up; median and min-max of the repetitions; GB/s counts K and V bytes.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from cuda_timing import event_times_ms

CONFIGS = [
    ("canary b2 59008 h24/4 d256", 2, 59008, 24, 4, 256),
    ("b1 32K h32/8 d128", 1, 32768, 32, 8, 128),
    ("b8 32K h32/8 d128", 8, 32768, 32, 8, 128),
    ("b32 32K h32/8 d128", 32, 32768, 32, 8, 128),
    ("b1 128K h32/8 d128", 1, 131072, 32, 8, 128),
    ("b8 128K h32/8 d128", 8, 131072, 32, 8, 128),
    ("b32 128K h32/8 d128", 32, 131072, 32, 8, 128),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for name, b, t, hq, hkv, d in (CONFIGS[:2] if a.quick else CONFIGS):
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        times = [t * 1e3 for t in event_times_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                                   3, max(20, a.reps))]
        mb = 2 * k.numel() * 2 / 1e6
        med = times[len(times) // 2]
        rows.append({"config": name, "arm": "torch-sdpa-bf16", "mb": mb, "us_median": med, "us_min": times[0],
                     "us_max": times[-1], "gbps": mb * 1e6 / (med * 1e-6) / 1e9})
        del q, k, v
        torch.cuda.empty_cache()
    print(f"torch {torch.__version__}")
    print("| config | arm | MB read | time us (median) | min-max | GB/s |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['arm']} | {r['mb']:.1f} | {r['us_median']:.1f} | {r['us_min']:.1f}-{r['us_max']:.1f} | "
              f"{r['gbps']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
