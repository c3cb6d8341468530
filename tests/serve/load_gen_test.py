#!/usr/bin/env python3
"""The offered-load tools on the CPU: scripts/bench/load_gen.py against `minimakv serve` (embedded
model, loopback, tiny loads) must complete every request and report consistent numbers, and
scripts/bench/sweep_report.py must turn two arms' JSON into the table."""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    binary = sys.argv[sys.argv.index("--bin") + 1]
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for arm in ("bf16", "minima"):
            srv = subprocess.Popen([binary, "serve", "--port", "0", "--kv", arm, "--kv-memory", "64MiB", "--reference-tokens", "512",
                                    "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                url = re.search(r"http://[\d.:]+", srv.stdout.readline()).group(0)
                out = os.path.join(tmp, f"sweep-{arm}.json")
                subprocess.run([sys.executable, os.path.join(ROOT, "scripts/bench/load_gen.py"), "--url", url, "--rates", "2", "4",
                                "--duration", "3", "--drain", "60", "--prompt-tokens", "96", "--output-tokens", "6", "--warmup",
                                "--json", out], check=True, timeout=300)
                outs.append(out)
            finally:
                srv.terminate()
                srv.wait(timeout=60)
        for out in outs:
            for r in json.load(open(out))["rows"]:
                assert r["requests"] > 0 and r["finished"] == r["requests"] and r["failed"] == 0, r
                assert r["output_tokens"] == 6 * r["requests"] and r["throughput_tok_s"] > 0, r
                t = r["ttft_s"]
                assert 0 < t["p50"] <= t["p90"] <= t["p99"], t
                assert r["tpot_s"]["count"] == r["requests"] and r["peak_running"] >= 0, r
        report = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/bench/sweep_report.py"), *outs], check=True,
                                capture_output=True, text=True).stdout
        assert report.count("| bf16 |") == 2 and report.count("| minima |") == 2 and "minima / bf16 throughput" in report, report
        print(report)


if __name__ == "__main__":
    main()
