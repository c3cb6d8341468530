#!/usr/bin/env python3
"""End-to-end tests of `minimakv serve` on the embedded model (CPU), driven by the official `openai`
client, with independent references: `tokenizers` for token counts, jinja2 for the chat prompt, the
CLI's `generate` for greedy text, and the server's own /metrics for pages.

Every server binds 127.0.0.1 on a free port; every request has a timeout; the whole run is bounded.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "models", "minima-qwen3-23m")
M = "minima-qwen3-23m"
sys.path.insert(0, os.path.join(ROOT, "tests", "jinja"))
import jinja_parity_test  # noqa: E402  (transformers' template environment, for the reference render)

NEEDLE = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you "
          "about the numbers afterwards.\nThe grass is green. The sky is blue. One of the special magic numbers for "
          "{key} is: {value}.\nThe sun is yellow. Here we go. There and back again.\nWhat are all the special magic "
          "numbers for {key} mentioned in the provided text? The special magic numbers for {key} mentioned in the "
          "provided text are")

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    else:
        print("ok:", what, flush=True)


class Server:
    def __init__(self, binary, *extra, timeout=120):
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", "--kv-memory", "256MiB", "--reference-tokens", "2048",
                                      "--threads", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("server did not start: " + line + self.proc.stderr.read())
        self.host, self.port = m.group(1), int(m.group(2))
        self.base = f"http://{self.host}:{self.port}"
        self.stderr_lines = []
        threading.Thread(target=lambda: self.stderr_lines.extend(self.proc.stderr), daemon=True).start()
        self.deadline = time.time() + timeout

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, timeout=60, max_retries=0)

    def raw(self, method, path, body=b"", headers=None, read=True):
        """One HTTP request on a fresh socket; returns (status, headers, body)."""
        s = socket.create_connection((self.host, self.port), timeout=30)
        h = {"Host": "localhost", "Content-Length": str(len(body)), "Connection": "close", "Content-Type": "application/json"}
        h.update(headers or {})
        s.sendall((f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + body)
        if not read:
            return s
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        hdrs = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line)
        if hdrs.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while rest:
                size_s, _, rest = rest.partition(b"\r\n")
                size = int(size_s, 16)
                if size == 0:
                    break
                out += rest[:size]
                rest = rest[size + 2:]
            rest = out
        return status, hdrs, rest

    def metrics(self):
        status, _, body = self.raw("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def stop(self, grace=10):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def wait_metrics(srv, ok, tries=100):
    """Whether /metrics satisfies ok within tries x 0.1 s (gauges that settle after the HTTP answer)."""
    for _ in range(tries):
        if ok(srv.metrics()):
            return True
        time.sleep(0.1)
    return False


def metric(m, name, **labels):
    total = 0.0
    for k, v in m.items():
        if k.split("{")[0] == name and all(f'{a}="{b}"' in k for a, b in labels.items()):
            total += v
    return total


def cli_greedy(binary, prompt, n):
    out = subprocess.run([binary, "generate", "--prompt", prompt, "--max-tokens", str(n), "--kv", "minima", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    t0 = time.time()
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    with open(os.path.join(MODEL, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    rng = random.Random()
    key, value = rng.choice(["amber-harbor", "quiet-violet", "lunar-fjord"]), str(rng.randint(1000000, 9999999))
    prompt = NEEDLE.format(key=key, value=value)

    srv = Server(a.bin, "--shutdown-grace", "3")
    c = srv.client()
    try:
        # ---- models, health
        models = c.models.list()
        check([m.id for m in models.data] == ["minima-qwen3-23m"], "/v1/models lists the served model")
        check(srv.raw("GET", "/health")[0] == 200, "/health answers 200")

        # ---- completion: greedy text equals the CLI's, usage counts equal the tokenizers library's
        r = c.completions.create(model=M, prompt=prompt, max_tokens=16, temperature=0)
        ref = cli_greedy(a.bin, prompt, 16)
        check(r.choices[0].text == ref["text"], f"greedy completion equals `minimakv generate` ({r.choices[0].text!r})")
        check(value in r.choices[0].text, "the embedded model retrieves the needle through the server")
        n_prompt = len(tok.encode(prompt).ids)
        check(r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == 16 and r.usage.total_tokens == n_prompt + 16,
              f"usage counts (prompt {r.usage.prompt_tokens} == tokenizers' {n_prompt})")
        check(r.choices[0].finish_reason == "length", "finish_reason length at max_tokens")

        # ---- streaming: the deltas concatenate to the same text; include_usage sends a final usage chunk
        chunks = list(c.completions.create(model=M, prompt=prompt, max_tokens=16, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == r.choices[0].text, "streamed completion text equals the non-streamed one")
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16 and not chunks[-1].choices,
              "stream_options.include_usage: a last chunk with usage and no choices")

        # ---- stop strings: the text ends right before the first occurrence
        full = r.choices[0].text
        stop = full[len(full) // 2: len(full) // 2 + 2]
        rs = c.completions.create(model=M, prompt=prompt, max_tokens=16, temperature=0, stop=[stop, "\u2603never"])
        check(rs.choices[0].text == full[:full.index(stop)] and rs.choices[0].finish_reason == "stop",
              f"stop string {stop!r} cuts the text before it")
        rs2 = c.completions.create(model=M, prompt=prompt, max_tokens=16, temperature=0, stop=stop, stream=True)
        check("".join(ch.choices[0].text for ch in rs2 if ch.choices) == full[:full.index(stop)], "stop string while streaming")

        # ---- seeded sampling is reproducible; n choices; logprobs
        kw = dict(prompt="The kernel", max_tokens=24, temperature=1.0, top_p=0.95, top_k=50)
        s1 = c.completions.create(model=M, seed=1234, extra_body={"top_k": 50}, **{k: v for k, v in kw.items() if k != "top_k"})
        s2 = c.completions.create(model=M, seed=1234, extra_body={"top_k": 50}, **{k: v for k, v in kw.items() if k != "top_k"})
        s3 = c.completions.create(model=M, seed=99, extra_body={"top_k": 50}, **{k: v for k, v in kw.items() if k != "top_k"})
        check(s1.choices[0].text == s2.choices[0].text, "the same seed gives the same sample")
        check(s1.choices[0].text != s3.choices[0].text, "another seed gives another sample")
        rn = c.completions.create(model=M, prompt="The kernel", max_tokens=8, temperature=1.0, n=3, seed=7)
        check(sorted(ch.index for ch in rn.choices) == [0, 1, 2] and rn.usage.completion_tokens == 24, "n=3 returns three choices")
        rl = c.completions.create(model=M, prompt=prompt, max_tokens=6, temperature=0, logprobs=3)
        lp = rl.choices[0].logprobs
        check(len(lp.tokens) == 6 and all(x <= 0 for x in lp.token_logprobs) and all(len(t) >= 1 for t in lp.top_logprobs)
              and "".join(lp.tokens) == rl.choices[0].text, "completion logprobs: one entry per token, the tokens spell the text")

        # ---- chat: the prompt is the template as jinja2 renders it
        msgs = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": prompt}]
        rc = c.chat.completions.create(model="minima-qwen3-23m", messages=msgs, max_tokens=12, temperature=0, logprobs=True,
                                       top_logprobs=2)
        want = jinja_parity_test.reference(cfg["chat_template"], {"messages": msgs, "add_generation_prompt": True,
                                                                 "bos_token": cfg["bos_token"], "eos_token": cfg["eos_token"]})
        check(rc.usage.prompt_tokens == len(tok.encode(want["output"]).ids), "chat prompt tokens equal jinja2's render, tokenized")
        check(rc.choices[0].message.role == "assistant" and len(rc.choices[0].logprobs.content) == rc.usage.completion_tokens
              and all(t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in rc.choices[0].logprobs.content),
              "chat completion with logprobs")
        deltas = list(c.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0, stream=True))
        check(deltas[0].choices[0].delta.role == "assistant"
              and "".join(d.choices[0].delta.content or "" for d in deltas) == rc.choices[0].message.content,
              "streamed chat: role first, then the same content")
        try:
            c.chat.completions.create(model=M, messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}], max_tokens=2)
            check(False, "the template's raise_exception becomes a 400")
        except openai.BadRequestError as e:
            check("minima-qwen3-23m takes" in str(e), "the template's raise_exception becomes a 400")

        # ---- 16 concurrent clients all complete
        def one(i):
            cl = srv.client()
            out = cl.completions.create(model=M, prompt=f"Item {i}: the", max_tokens=32, temperature=0.7, seed=i,
                                        extra_body={"ignore_eos": True}, stream=(i % 2 == 0))
            if i % 2 == 0:
                return sum(1 for ch in out if ch.choices and ch.choices[0].finish_reason == "length")
            return int(out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 32)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            done = list(ex.map(one, range(16), timeout=240))
        check(sum(done) == 16, f"16 concurrent clients complete ({sum(done)}/16)")
        # A client has its last chunk before the server retires the request: the gauges settle shortly after.
        check(wait_metrics(srv, lambda m: metric(m, "minimakv:num_requests_running") == 0
                           and metric(m, "minimakv:request_success_total", finished_reason="length") >= 16),
              "/metrics: nothing running afterwards, the requests counted")

        # ---- a client that disconnects mid-stream has its request aborted and its pages freed
        before = srv.metrics()
        sock = srv.raw("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 5000, "stream": True,
                                                               "ignore_eos": True}).encode(), read=False)
        got = b""
        while got.count(b"data:") < 5:
            got += sock.recv(4096)
        mid = srv.metrics()
        check(metric(mid, "minimakv:num_requests_running") == 1, "the streaming request is running")
        sock.close()
        freed = wait_metrics(srv, lambda m: metric(m, "minimakv:num_requests_running") == 0
                             and metric(m, "minimakv:kv_cache_request_pages") == 0
                             and metric(m, "minimakv:request_success_total", finished_reason="abort")
                             > metric(before, "minimakv:request_success_total", finished_reason="abort"))
        check(freed, "a disconnect aborts the request and frees its pages (/metrics)")

        # ---- malformed requests get OpenAI-style 4xx errors and the server keeps serving
        cases = [
            ("POST", "/v1/completions", b"{not json", 400, None),
            ("POST", "/v1/completions", b"[1, 2]", 400, None),
            ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": "many"}).encode(), 400, "max_tokens"),
            ("POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": 9}).encode(), 400, "temperature"),
            ("POST", "/v1/completions", json.dumps({"prompt": "x", "stop": [1]}).encode(), 400, "stop"),
            ("POST", "/v1/completions", json.dumps({"prompt": "x", "model": "gpt-9"}).encode(), 404, "model"),
            ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 40000}).encode(), 400, "prompt"),
            ("POST", "/v1/completions", json.dumps({"prompt": [9999999]}).encode(), 400, "prompt"),
            ("POST", "/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "messages"),
            ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400,
             "messages[0].role"),
            ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(),
             400, "messages[0].content"),
            ("POST", "/v1/completions", b"[" * 100000 + b"]" * 100000, 400, None),
            ("POST", "/v1/completions", json.dumps({"prompt": "x" * (20 << 20)}).encode(), 413, None),
            ("GET", "/v1/completions", b"", 404, None),
            ("POST", "/v1/nothing", b"{}", 404, None),
        ]
        for method, path, body, status, param in cases:
            st, hdrs, out = srv.raw(method, path, body)
            err = json.loads(out)["error"] if out else {}
            ok = st == status and isinstance(err.get("message"), str) and err.get("type") and (param is None or err.get("param") == param)
            check(ok, f"{method} {path} {body[:40]!r}... -> {st} {err.get('param')} (want {status} {param})")
        # random bodies: mutations of valid requests and bytes; each answered 200 or with a 4xx error object
        values = [None, True, -1, 0, 3, 2.5, 1e30, "", "x", "\u00e9\ud83d\ude00", [], [1], ["a"], {}, {"a": 1}, [[1, 2]], "\x00"]
        base_c = {"model": M, "prompt": "Hi", "max_tokens": 2, "temperature": 0.5, "stop": ["\n"], "n": 1, "seed": 1,
                  "logprobs": 1, "stream": False, "top_p": 0.9, "top_k": 5, "echo": False, "presence_penalty": 0.1}
        base_chat = {"model": M, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "logprobs": True,
                     "top_logprobs": 1, "stream": True, "stream_options": {"include_usage": True}, "tools": [], "tool_choice": "auto"}
        statuses = {}
        for i in range(200):
            chat = i % 2 == 1
            body = dict(base_chat if chat else base_c)
            for _ in range(rng.randint(1, 3)):
                k = rng.choice(list(body) + ["extra", "messages", "prompt"])
                body[k] = rng.choice(values + [[{"role": rng.choice(["user", "x", 1]), "content": rng.choice(values)}]])
                if k in ("max_tokens", "max_completion_tokens") and not (isinstance(body[k], int) and body[k] <= 4):
                    body[k] = rng.choice([-5, "x", 1e20, 40000, True])  # never a long generation
            raw = json.dumps(body).encode()
            if rng.random() < 0.2:
                raw = raw[: rng.randint(0, len(raw))]
            if rng.random() < 0.1:
                raw = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 64)))
            st, _, out = srv.raw("POST", "/v1/chat/completions" if chat else "/v1/completions", raw)
            statuses[st] = statuses.get(st, 0) + 1
            if st != 200:
                err = json.loads(out)["error"]
                if not (400 <= st < 500 and err["message"] and err["type"]):
                    check(False, f"random body {raw[:80]!r} -> {st} {out[:200]!r}")
        check(set(statuses) <= {200, 400, 404}, f"200 random request bodies answered 200 or 4xx: {statuses}")
        check(srv.raw("GET", "/health")[0] == 200 and c.completions.create(model=M, prompt="ok", max_tokens=2).usage.completion_tokens == 2,
              "the server keeps serving after the bad requests")
        m = srv.metrics()
        check(metric(m, "minimakv:http_errors_total", status="400") >= 9, "/metrics counts the errors")
        for name in ["minimakv:time_to_first_token_seconds_count", "minimakv:inter_token_latency_seconds_count",
                     "minimakv:e2e_request_latency_seconds_count", "minimakv:kv_cache_usage_perc", "minimakv:kv_capacity_requests",
                     "minimakv:kv_cache_tier_bytes", "minimakv:prefix_cache_hits_total", "minimakv:num_preemptions_total",
                     "minimakv:attention_calls_total", "minimakv:prompt_tokens_total", "minimakv:generation_tokens_total"]:
            check(any(k.split("{")[0] == name for k in m), f"/metrics has {name}")

        # ---- SIGTERM while a request streams: it ends, the process exits 0
        sock = srv.raw("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 4000, "stream": True,
                                                               "ignore_eos": True}).encode(), read=False)
        sock.recv(4096)
        rc_ = srv.stop(grace=30)
        rest = b""
        sock.settimeout(10)
        try:
            while True:
                part = sock.recv(65536)
                if not part:
                    break
                rest += part
        except socket.timeout:
            pass
        check(rc_ == 0, f"SIGTERM: exit code 0 (got {rc_})")
        check(b"data: [DONE]" in rest and b'"finish_reason":"abort"' in rest,
              "SIGTERM: the in-flight stream is aborted after the grace period and ends with [DONE]")
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()

    # ---- API key
    keyed = Server(a.bin, "--api-key", "s3cret")
    try:
        try:
            keyed.client("wrong").completions.create(model=M, prompt="x", max_tokens=1)
            check(False, "a wrong API key is refused with 401")
        except openai.AuthenticationError:
            check(True, "a wrong API key is refused with 401")
        check(keyed.client("s3cret").completions.create(model=M, prompt="x", max_tokens=1).usage.completion_tokens == 1,
              "the right API key is accepted")
        check(keyed.raw("GET", "/health")[0] == 200, "/health needs no key")
    finally:
        keyed.stop()

    print(f"{len(FAILURES)} failures in {time.time() - t0:.1f} s")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
