#!/usr/bin/env python3
"""PyTorch yardsticks for the engine at a model's geometry (BF16 weights, random values).

- decode: the step's projection chain at batch 1 (q, k, v, o, gate, up, down per layer, then lm_head),
  cuBLAS GEMVs through torch.matmul, captured in a CUDA graph and replayed: the weight-streaming floor
  of a decode step without attention; and the same chain with q, k, v and gate, up concatenated into
  one matrix each (as vLLM's fused QKV and gate-up projections), which reads the same bytes;
- copy: device-to-device copy bandwidth (bytes read + written per second), to price the step's KV read;
- prefill: each projection's BF16 matmul at --tokens rows (median ms, TFLOP/s).
Timed with CUDA events after warm-up; medians over --reps. Prints JSON lines.
  torch_engine_reference.py --config bench/configs/qwen3-8b/config.json [--tokens 8192] [--reps 20]
"""
import argparse
import json

import torch


def timed(fn, reps, inner=1):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / inner)
    ms.sort()
    return ms[len(ms) // 2], ms[0], ms[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    c = json.load(open(a.config))
    H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    D = c.get("head_dim", H // c["num_attention_heads"])
    Q, KV, V = c["num_attention_heads"] * D, c["num_key_value_heads"] * D, c["vocab_size"]
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def w(o, i):
        return (torch.rand(o, i, device=dev, generator=g, dtype=torch.float32) * 0.07 - 0.035).to(bf)

    layers = [dict(q=w(Q, H), k=w(KV, H), v=w(KV, H), o=w(H, Q), gate=w(I, H), up=w(I, H), down=w(H, I))
              for _ in range(L)]
    head = w(V, H)
    weight_bytes = sum(t.numel() * 2 for l in layers for t in l.values()) + head.numel() * 2
    x = torch.randn(1, H, device=dev, dtype=bf)

    def chain():
        h = x
        for l in layers:
            q = h @ l["q"].T
            h @ l["k"].T
            h @ l["v"].T
            o = q @ l["o"].T  # q stands in for attention's output (shape [1, Q])
            gt = o @ l["gate"].T
            up = o @ l["up"].T
            h = (torch.nn.functional.silu(gt) * up) @ l["down"].T
        return h @ head.T

    def report_graph(what, fn):
        """Warms fn up on a side stream, captures it in a CUDA graph and prints the replay's timing."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        med, lo, hi = timed(graph.replay, a.reps)
        print(json.dumps({"what": what, "ms": med, "ms_min": lo, "ms_max": hi, "weight_bytes": weight_bytes,
                          "tb_per_s": weight_bytes / (med * 1e-3) / 1e12}), flush=True)

    report_graph("decode_chain_b1", chain)

    # The fused chain: each layer's q, k, v (and gate, up) as one matrix; the unfused copies are freed first.
    for l in layers:
        l["qkv"] = torch.cat([l.pop("q"), l.pop("k"), l.pop("v")])
        l["gate_up"] = torch.cat([l.pop("gate"), l.pop("up")])
    torch.cuda.empty_cache()

    def chain_fused():
        h = x
        for l in layers:
            qkv = h @ l["qkv"].T
            o = qkv[:, :Q] @ l["o"].T
            gu = o @ l["gate_up"].T
            h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]) @ l["down"].T
        return h @ head.T

    report_graph("decode_chain_b1_fused", chain_fused)

    src = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    med, lo, hi = timed(lambda: dst.copy_(src), a.reps)
    print(json.dumps({"what": "copy", "bytes": src.numel(), "ms": med,
                      "read_plus_write_tb_per_s": 2 * src.numel() / (med * 1e-3) / 1e12}), flush=True)
    del src, dst

    xn = {H: torch.randn(a.tokens, H, device=dev, dtype=bf), Q: torch.randn(a.tokens, Q, device=dev, dtype=bf),
          I: torch.randn(a.tokens, I, device=dev, dtype=bf)}
    l0 = layers[0]
    qkv, gate_up = l0["qkv"], l0["gate_up"]
    for name, wt in [("q", qkv[:Q]), ("k", qkv[Q:Q + KV]), ("v", qkv[Q + KV:]), ("o", l0["o"]), ("gate", gate_up[:I]),
                     ("up", gate_up[I:]), ("down", l0["down"]), ("lm_head", head)]:
        xi = xn[wt.shape[1]]
        med, lo, hi = timed(lambda: xi @ wt.T, max(5, a.reps // 2))
        flop = 2 * a.tokens * wt.shape[0] * wt.shape[1]
        print(json.dumps({"what": "prefill_gemm", "proj": name, "n": a.tokens, "in": wt.shape[1], "out": wt.shape[0],
                          "ms": med, "ms_min": lo, "ms_max": hi, "tflops": flop / (med * 1e-3) / 1e12}), flush=True)


if __name__ == "__main__":
    main()
