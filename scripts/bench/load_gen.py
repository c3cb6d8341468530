#!/usr/bin/env python3
"""Offered-load generator for an OpenAI-compatible server (`minimakv serve`, or any other).

For each rate in --rates (requests/s): Poisson arrivals for --duration seconds, each a streaming
/v1/completions request whose prompt is --prompt-tokens random token ids (seeded; no prefix is shared,
so the prefix cache cannot help) and whose output is exactly --output-tokens tokens (ignore_eos). The
requests still running --drain seconds after the last arrival are cut (counted as unfinished, not as
failed). Reported per rate: throughput (output tokens per second over the run), request throughput,
TTFT / TPOT / ITL p50, p90, p99 (TTFT of a request that never got a token counts as the time it
waited, a lower bound), goodput under --slo-ttft and --slo-tpot, queue time and preemptions from the
server's /metrics, and the peak number of running requests (/metrics polled every 0.25 s).

Standard library only (asyncio, raw HTTP/1.1), so it runs wherever Python 3 does:
  load_gen.py --url http://127.0.0.1:8000 --rates 0.1 0.2 --duration 60 --json out.json
"""
import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import time
import urllib.parse


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs):
    return {"p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99),
            "mean": statistics.fmean(xs) if xs else None, "count": len(xs)}


async def http_get(host, port, path, timeout=10):
    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    w.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), timeout)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size_s, _, rest = rest.partition(b"\r\n")
            size = int(size_s or b"0", 16)
            if size == 0:
                break
            out += rest[:size]
            rest = rest[size + 2:]
        body = out
    return body.decode(errors="replace")


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def metric(m, name, **labels):
    return sum(v for k, v in m.items() if k.split("{")[0] == name and all(f'{a}="{b}"' in k for a, b in labels.items()))


def histogram_quantiles(before, after, name, qs):
    """Quantiles of a Prometheus histogram's observations between two scrapes (bucket interpolation)."""
    buckets = {}
    for k, v in after.items():
        if k.startswith(name + "_bucket{"):
            le = re.search(r'le="([^"]+)"', k).group(1)
            buckets[float("inf") if le == "+Inf" else float(le)] = v - before.get(k, 0.0)
    if not buckets:
        return {}
    edges = sorted(buckets)
    total = buckets[edges[-1]]
    out = {}
    for q in qs:
        if total <= 0:
            out[f"p{q}"] = None
            continue
        target, prev_edge, prev_count = total * q / 100.0, 0.0, 0.0
        for e in edges:
            if buckets[e] >= target:
                span = buckets[e] - prev_count
                frac = (target - prev_count) / span if span > 0 else 0.0
                out[f"p{q}"] = prev_edge + (e - prev_edge) * frac if e != float("inf") else prev_edge
                break
            prev_edge, prev_count = e, buckets[e]
    return out


class Result:
    def __init__(self, idx, arrival):
        self.idx, self.arrival = idx, arrival
        self.first = None
        self.chunk_times = []
        self.end = None
        self.tokens = 0
        self.status = None
        self.error = None
        self.finish_reason = None


async def one_request(host, port, model, prompt, out_tokens, res, timeout, api_key):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": out_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}}).encode()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        w.write(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
        res.status = int(head.split(b" ")[1])
        if res.status != 200:
            res.error = (await r.read()).decode(errors="replace")[:300]
            w.close()
            return
        buf = b""
        while True:  # chunked transfer encoding carrying SSE events
            size_line = await asyncio.wait_for(r.readuntil(b"\r\n"), timeout)
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                break
            data = await r.readexactly(size + 2)
            buf += data[:-2]
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                payload = event[6:]
                now = time.perf_counter()
                if payload == b"[DONE]":
                    res.end = now
                    continue
                j = json.loads(payload)
                if "error" in j:
                    res.error = str(j["error"])[:300]
                    continue
                if j.get("usage"):
                    res.tokens = j["usage"]["completion_tokens"]
                for ch in j.get("choices", []):
                    if ch.get("text"):
                        if res.first is None:
                            res.first = now
                        res.chunk_times.append(now)
                    if ch.get("finish_reason"):
                        res.finish_reason = ch["finish_reason"]
        w.close()
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - a failed request is data
        res.error = f"{type(e).__name__}: {e}"


async def run_rate(args, host, port, rate, seed):
    rng = random.Random(seed)
    before = parse_metrics(await http_get(host, port, "/metrics"))
    peak = {"running": 0.0}
    stop_poll = asyncio.Event()

    async def poll():
        while not stop_poll.is_set():
            try:
                m = parse_metrics(await http_get(host, port, "/metrics"))
                peak["running"] = max(peak["running"], metric(m, "minimakv:num_requests_running"))
            except Exception:  # noqa: BLE001 - a missed scrape only lowers the peak's resolution
                pass
            await asyncio.sleep(0.25)

    poller = asyncio.create_task(poll())
    t0 = time.perf_counter()
    tasks, results, t = [], [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t > args.duration:
            break
        prompt = [rng.randrange(2, args.vocab) for _ in range(args.prompt_tokens)]
        delay = t0 + t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        res = Result(len(results), time.perf_counter())
        results.append(res)
        tasks.append(asyncio.create_task(one_request(host, port, args.model, prompt, args.output_tokens, res,
                                                     args.duration + args.drain + 60, args.api_key)))
    deadline = t0 + args.duration + args.drain
    pending = [x for x in tasks if not x.done()]
    if pending:
        await asyncio.wait(pending, timeout=max(0.0, deadline - time.perf_counter()))
    for x in tasks:
        if not x.done():
            x.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    t_end = time.perf_counter()
    stop_poll.set()
    await poller
    after = parse_metrics(await http_get(host, port, "/metrics"))

    finished = [r for r in results if r.end is not None and r.error is None]
    failed = [r for r in results if r.error is not None]
    unfinished = [r for r in results if r.end is None and r.error is None]
    out_tokens = sum(r.tokens if r.end else len(r.chunk_times) for r in results)
    makespan = (max([r.end for r in finished], default=t_end) if not unfinished else t_end) - t0
    ttft = [(r.first if r.first else t_end) - r.arrival for r in results if r.error is None]
    tpot = [(r.end - r.first) / (r.tokens - 1) for r in finished if r.first and r.tokens > 1]
    itl = [b - a for r in results for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    good = [r for r in finished if r.first and (r.first - r.arrival) <= args.slo_ttft and r.tokens > 1
            and (r.end - r.first) / (r.tokens - 1) <= args.slo_tpot]
    return {
        "rate": rate, "requests": len(results), "finished": len(finished), "failed": len(failed), "unfinished": len(unfinished),
        "errors": [r.error for r in failed][:5],
        "makespan_s": makespan, "output_tokens": out_tokens, "throughput_tok_s": out_tokens / makespan if makespan > 0 else 0.0,
        "request_throughput": len(finished) / makespan if makespan > 0 else 0.0,
        "goodput_req_s": len(good) / makespan if makespan > 0 else 0.0,
        "ttft_s": summary(ttft), "tpot_s": summary(tpot), "itl_s": summary(itl),
        "queue_s": histogram_quantiles(before, after, "minimakv:request_queue_time_seconds", (50, 90, 99)),
        "preemptions": metric(after, "minimakv:num_preemptions_total") - metric(before, "minimakv:num_preemptions_total"),
        "peak_running": peak["running"],
    }


async def main_async(args):
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("load_gen: sends test traffic to loopback only")
    if not args.model:
        args.model = json.loads(await http_get(host, port, "/v1/models"))["data"][0]["id"]
    if args.warmup:  # one short request, so first-call costs (graph capture, allocations) stay out
        res = Result(-1, time.perf_counter())
        await one_request(host, port, args.model, [5] * min(args.prompt_tokens, 512), 8, res, 120, args.api_key)
    rows = []
    for rate in args.rates:  # seeded by the rate, so every arm gets the same arrivals and prompts at a rate
        row = await run_rate(args, host, port, rate, args.seed * 1000003 + round(rate * 1e6))
        rows.append(row)
        print(f"rate {rate:6.3f}/s: {row['finished']}/{row['requests']} finished ({row['unfinished']} cut, {row['failed']} failed), "
              f"{row['throughput_tok_s']:8.1f} tok/s, TTFT p50 {row['ttft_s']['p50'] or 0:7.2f} p99 {row['ttft_s']['p99'] or 0:7.2f} s, "
              f"TPOT p50 {1e3 * (row['tpot_s']['p50'] or 0):6.1f} ms, peak running {row['peak_running']:.0f}, "
              f"preemptions {row['preemptions']:.0f}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--rates", type=float, nargs="+", required=True)
    ap.add_argument("--duration", type=float, default=60, help="seconds of arrivals per rate")
    ap.add_argument("--drain", type=float, default=30, help="seconds after the last arrival before running requests are cut")
    ap.add_argument("--prompt-tokens", type=int, default=16384)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192, help="prompt token ids are drawn from [2, vocab)")
    ap.add_argument("--slo-ttft", type=float, default=10.0, help="goodput: time to first token at most this (s)")
    ap.add_argument("--slo-tpot", type=float, default=0.1, help="goodput: time per output token at most this (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
