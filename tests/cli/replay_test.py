#!/usr/bin/env python3
"""A small trace replayed on the embedded model (CPU), and its JSON checked for consistency.

For bf16 and minima at the same KV envelope (tight enough that requests queue): every request
finishes with exactly the trace's output length and prompt length; each request's latencies are
ordered (0 <= queue <= TTFT <= end-to-end); the summary's counts are the sums of the requests';
the peak concurrency is within [1, max_running] and minima's capacity report holds at least as many
requests as bf16's. Also checks that a malformed trace line is refused with its line number.
  replay_test.py --bin build/release/apps/minimakv/minimakv
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    seed = random.randrange(1 << 30)
    print("seed", seed)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        subprocess.run([args.bin, "make-trace", "--requests", "6", "--rate", "20", "--prompt-tokens", "150", "500",
                        "--output-tokens", "4", "12", "--seed", str(seed), "--out", trace], check=True)
        lines = [json.loads(l) for l in open(trace)]
        check(len(lines) == 6, "make-trace wrote 6 lines")
        check(all(a["arrival"] <= b["arrival"] for a, b in zip(lines, lines[1:])), "arrivals are sorted")
        reports = {}
        for kv in ("bf16", "minima"):
            r = subprocess.run([args.bin, "replay", "--trace", trace, "--kv", kv, "--kv-memory", "5MiB",
                                "--max-step-tokens", "256", "--max-running", "4", "--json"],
                               capture_output=True, text=True, timeout=600)
            check(r.returncode == 0, f"{kv}: replay exits 0 ({r.stderr.strip()[-300:]})")
            j = json.loads(r.stdout)
            reports[kv] = j
            reqs, s = j["requests"], j["summary"]
            check(len(reqs) == 6 and s["finished"] == 6, f"{kv}: every request finished")
            for req, line in zip(reqs, lines):
                check(req["finish_reason"] == "length", f"{kv}: finish reason {req['finish_reason']}")
                check(req["output_tokens"] == line["output_tokens"], f"{kv}: output length as the trace says")
                check(req["prompt_tokens"] == line["prompt_tokens"], f"{kv}: prompt length as the trace says")
                check(0 <= req["queue_s"] <= req["ttft_s"] <= req["e2e_s"], f"{kv}: latencies ordered {req}")
                check(req["itl_mean_s"] >= 0, f"{kv}: inter-token latency non-negative")
            check(s["output_tokens"] == sum(q["output_tokens"] for q in reqs), f"{kv}: output tokens add up")
            check(s["prompt_tokens"] == sum(q["prompt_tokens"] for q in reqs), f"{kv}: prompt tokens add up")
            check(s["preemptions"] == sum(q["preemptions"] for q in reqs), f"{kv}: preemptions add up")
            check(s["itl_s"]["count"] == sum(q["output_tokens"] - 1 for q in reqs), f"{kv}: one gap per later token")
            check(1 <= s["peak_running"] <= 4, f"{kv}: peak running {s['peak_running']}")
            check(s["ttft_s"]["p50"] <= s["ttft_s"]["p90"] <= s["ttft_s"]["p99"], f"{kv}: percentiles ordered")
            pools = j["capacity"]["pools"]
            used = sum(p["bytes"] for p in pools.values())
            check(used <= j["capacity"]["kv_memory_bytes"], f"{kv}: pools within the envelope")
            print(f"{kv}: peak running {s['peak_running']}, preemptions {s['preemptions']}, "
                  f"TTFT p50 {s['ttft_s']['p50'] * 1e3:.1f} ms, makespan {s['makespan_s']:.2f} s")
        cap = reports["minima"]["capacity"]["modes"]
        check(cap["minima"]["max_requests"] >= cap["bf16"]["max_requests"], "minima holds at least bf16's requests")
        bad = os.path.join(tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 2}\n{"arrival": -1, "prompt": "x", "output_tokens": 1}\n')
        r = subprocess.run([args.bin, "replay", "--trace", bad], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "bad.jsonl:2" in r.stderr and "arrival" in r.stderr, f"bad line refused: {r.stderr}")
    print("replay: all checks passed")


if __name__ == "__main__":
    main()
