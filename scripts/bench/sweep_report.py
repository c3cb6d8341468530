#!/usr/bin/env python3
"""The offered-load sweep's table (markdown) and plot, from load_gen.py's JSON files (one per arm):
  sweep_report.py sweep-bf16.json sweep-fp8.json sweep-minima.json [--plot out.png]
Per rate: each arm's throughput, p99 TTFT, TPOT p50, goodput, peak running requests, preemptions and
failures; then minima's ratios to bf16 at the rates where bf16 is saturated (its p99 TTFT past the SLO,
or requests still queued when the run ended)."""
import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    arms = {}
    for f in a.files:
        arm = os.path.basename(f).removeprefix("sweep-").removesuffix(".json")
        arms[arm] = json.load(open(f))
    any_args = next(iter(arms.values()))["args"]
    print(f"prompt {any_args['prompt_tokens']} tokens, output {any_args['output_tokens']} tokens, {any_args['duration']} s of "
          f"arrivals + {any_args['drain']} s drain per rate; goodput: TTFT <= {any_args['slo_ttft']} s and TPOT <= "
          f"{any_args['slo_tpot'] * 1e3:.0f} ms\n")
    print("| rate (req/s) | arm | finished / sent | cut | failed | throughput (tok/s) | TTFT p50 / p99 (s) | TPOT p50 (ms) | "
          "goodput (req/s) | peak running | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rates = sorted({r["rate"] for d in arms.values() for r in d["rows"]})
    by = {(arm, r["rate"]): r for arm, d in arms.items() for r in d["rows"]}
    for rate in rates:
        for arm in arms:
            r = by.get((arm, rate))
            if not r:
                continue
            t = r["ttft_s"]
            tpot = r["tpot_s"]["p50"]
            print(f"| {rate:g} | {arm} | {r['finished']} / {r['requests']} | {r['unfinished']} | {r['failed']} | "
                  f"{r['throughput_tok_s']:.1f} | {t['p50'] or 0:.2f} / {t['p99'] or 0:.2f} | "
                  f"{(tpot or 0) * 1e3:.1f} | {r['goodput_req_s']:.3f} | {r['peak_running']:.0f} | {r['preemptions']:.0f} |")
    if "bf16" in arms and "minima" in arms:
        print()
        for rate in rates:
            b, m = by.get(("bf16", rate)), by.get(("minima", rate))
            if not b or not m:
                continue
            saturated = b["unfinished"] > 0 or (b["ttft_s"]["p99"] or 0) > any_args["slo_ttft"]
            tr = m["throughput_tok_s"] / b["throughput_tok_s"] if b["throughput_tok_s"] else float("inf")
            lat = (b["ttft_s"]["p99"] or 0) / (m["ttft_s"]["p99"] or 1e-9)
            print(f"rate {rate:g}: bf16 {'saturated' if saturated else 'not saturated'}; minima / bf16 throughput {tr:.2f}x, "
                  f"p99 TTFT {lat:.2f}x lower; failed requests: bf16 {b['failed']}, minima {m['failed']}")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for arm, d in arms.items():
            xs = [r["rate"] for r in d["rows"]]
            ax[0].plot(xs, [r["throughput_tok_s"] for r in d["rows"]], marker="o", label=arm)
            ax[1].plot(xs, [r["ttft_s"]["p99"] or 0 for r in d["rows"]], marker="o", label=arm)
        ax[0].set_xlabel("offered load (requests/s)")
        ax[0].set_ylabel("output tokens/s")
        ax[0].set_title("throughput")
        ax[1].set_xlabel("offered load (requests/s)")
        ax[1].set_ylabel("seconds")
        ax[1].set_yscale("log")
        ax[1].set_title("p99 time to first token")
        for x in ax:
            x.grid(alpha=0.3)
            x.legend()
        fig.suptitle(f"Qwen3-8B geometry, {any_args['prompt_tokens']}-token prompts, {any_args['output_tokens']} output tokens")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
