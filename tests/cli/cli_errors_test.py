#!/usr/bin/env python3
"""Bad input to the CLI gets a clear error naming the option or field, in well under a second.

Each case runs `minimakv` as a user would and requires: a non-zero exit, a message on stderr that
contains the expected fragment (the option, the field, the limit), and a wall time under one second
(the time to reject: no case may tokenize or load more than it needs). Also checks that the CLI finds
the embedded model and data from another working directory, and that `eval merge` joins runs of one
model's files under two paths (by their digest) and nothing else.
  cli_errors_test.py --bin build/release/apps/minimakv/minimakv [--time-limit 1.0]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "minima-qwen3-23m")


def run(binary, args, cwd=None, limit=1.0):
    t0 = time.perf_counter()
    r = subprocess.run([binary] + args, capture_output=True, cwd=cwd, timeout=limit * 20)
    return r, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--time-limit", type=float, default=1.0, help="seconds per case (sanitizer builds are slower)")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random()
        long_word = os.path.join(tmp, "long-word.txt")  # far beyond any context: rejected unread
        with open(long_word, "w") as f:
            f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1_000_000)))
        near_word = os.path.join(tmp, "near-word.txt")  # short enough in bytes to need encoding
        with open(near_word, "w") as f:
            f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(200_000)))
        empty = os.path.join(tmp, "empty.txt")
        open(empty, "w").close()
        bad_template = os.path.join(tmp, "bad.jinja")
        with open(bad_template, "w") as f:
            f.write("{% for m in messages %}{{ m.content }")
        trace = os.path.join(tmp, "trace.jsonl")
        with open(trace, "w") as f:
            f.write('{"arrival": 0, "prompt": "hi", "output_tokens": 2}\n')
        bad_trace = os.path.join(tmp, "bad-trace.jsonl")
        with open(bad_trace, "w") as f:
            f.write('{"arrival": 0, "prompt": "hi", "output_tokens": 2}\n{"arrival": 1, "output_tokens": 2}\n')
        bad_model = os.path.join(tmp, "bad-model")
        os.makedirs(bad_model)
        for f in os.listdir(MODEL):
            if f != "config.json":
                os.symlink(os.path.join(MODEL, f), os.path.join(bad_model, f))
        config = json.load(open(os.path.join(MODEL, "config.json")))
        bad_profile_model = os.path.join(tmp, "bad-profile-model")
        os.makedirs(bad_profile_model)
        for f in os.listdir(MODEL):
            if f != "kv_profile.json":
                os.symlink(os.path.join(MODEL, f), os.path.join(bad_profile_model, f))
        with open(os.path.join(bad_profile_model, "kv_profile.json"), "w") as f:
            f.write('{"version": 1, "tq4_layers": [0, 8]}')

        def eval_run(name, model, task, digest=None):  # an `eval niah --json` file of one task, two arms
            records = []
            for i in range(4):
                for arm in ("bf16", "minima"):
                    records.append({"task": task, "arm": arm, "length": 1024, "index": i,
                                    "score": float(rng.random() < 0.8), "output": " 1234567", "prompt_tokens": 1000,
                                    "reused_tokens": 0, "generated": 3, "prefill_s": 0.1, "decode_s": 0.1,
                                    "kv": {"recent": 1, "anchor": 0, "stale": 0, "block_tables": 8,
                                           "live_tokens": 1000, "bytes_per_token": 16.0, "reconciled": True}})
            run_json = {"model": model, "seed": 1, "device_name": "cpu", "niah": {"seed": 1, "records": records}}
            if digest:
                run_json["model_digest"] = digest
            path = os.path.join(tmp, name)
            json.dump(run_json, open(path, "w"))
            return path

        # Runs of one model's files under two paths (two machines) merge by digest; different files do not.
        same_a = eval_run("same-a.json", "/gpu/tmp/run8", "niah_single_1", "0123456789abcdef")
        same_b = eval_run("same-b.json", "/home/me/run8", "niah_single_2", "0123456789abcdef")
        other = eval_run("other.json", "/home/me/run8", "niah_single_3", "fedcba9876543210")
        no_digest = eval_run("no-digest.json", "/elsewhere/run8", "niah_multikey_1")

        def with_config(**edits):  # written just before its case runs
            def write():
                c = dict(config)
                c.update(edits)
                json.dump(c, open(os.path.join(bad_model, "config.json"), "w"))
            return ["generate", "--model", bad_model, "--prompt", "hi", "--max-tokens", "1"], write

        cases = [
            (["generate", "--prompt", "hi", "--temperature", "nan"], "--temperature"),
            (["generate", "--prompt", "hi", "--temperature", "inf"], "--temperature"),
            (["generate", "--prompt", "hi", "--top-p", "nan"], "--top-p"),
            (["generate", "--prompt", "hi", "--top-p", "-0.5"], "--top-p"),
            (["attn-bench", "--fp8-fraction", "nan"], "--fp8-fraction"),
            (["generate", "--prompt", "hi", "--checkpoint-interval", "-3"], "--checkpoint-interval"),
            (["generate", "--prompt", "hi", "--recent-window", "0"], "--recent-window"),
            (["generate", "--prompt", "hi", "--protected-layers", "-1"], "--protected-layers"),
            (["generate", "--prompt", "hi", "--protected-layers", "999"], "protected layer 999"),
            (["generate", "--prompt", "hi", "--tq4-layers", "x"], "TQ4 layers are layer numbers or 'none'"),
            (["generate", "--prompt", "hi", "--tq4-layers", "none,1"], "TQ4 layers are layer numbers or 'none'"),
            (["generate", "--prompt", "hi", "--tq4-layers", "99"], "TQ4 layer 99 out of range"),
            (["generate", "--model", bad_profile_model, "--prompt", "hi"], "kv_profile.json: tq4_layers: 8 is not a layer"),
            (["serve", "--tq4-layers", "1,x"], "--tq4-layers: TQ4 layers are layer numbers or 'none', got 'x'"),
            (["replay", "--trace", trace, "--tq4-layers", "-2"], "--tq4-layers: TQ4 layers are layer numbers"),
            (["calibrate", "--min-compression", "nan"], "--min-compression"),
            (["calibrate", "--min-gain", "2"], "--min-gain"),
            (["calibrate", "--write", "--out", os.path.join(tmp, "p.json")], "give --write or --out"),
            (["eval", "--lengths", "0", "--dry-run"], "--lengths"),
            (["generate", "--prompt", ""], "--prompt is empty"),
            (["replay", "--trace", trace, "--kv-memory", "150%"], "--kv-memory 150%"),
            (["replay", "--trace", trace, "--kv-memory", "50%"], "needs --device cuda"),
            (["replay", "--trace", trace, "--kv-memory", "1KiB"], "cannot hold one request"),
            (["replay", "--trace", bad_trace], "bad-trace.jsonl:2: give exactly one of 'prompt' and 'prompt_tokens'"),
            (["replay", "--trace", empty], "holds no request"),
            (["make-trace", "--prompt-tokens", "500", "100"], "bad prompt length range"),
            (["generate"], "exactly one of --prompt and --prompt-file"),
            (["generate", "--prompt", "hi", "--prompt-file", empty], "exactly one of --prompt and --prompt-file"),
            (["generate", "--prompt-file", empty], "is empty"),
            (["generate", "--prompt", "hi", "--prompt-logits"], "--prompt-logits needs --json"),
            (["generate", "--prompt-file", long_word], "exceeds the model's context"),
            (["generate", "--prompt-file", near_word], "exceeds the model's context"),
            (["generate", "--prompt", "hi", "--max-tokens", "1000000"], "leave no room"),
            (with_config(rms_norm_eps="0.5"), "'rms_norm_eps' must be a number"),
            (with_config(rope_theta="abc"), "'rope_theta' must be a number"),
            (with_config(hidden_size=512.5), "'hidden_size' must be an integer"),
            (with_config(num_hidden_layers="4"), "'num_hidden_layers' must be an integer"),
            (with_config(tie_word_embeddings="false"), "'tie_word_embeddings' must be true or false"),
            (["serve", "--kv-memory", "150%"], "--kv-memory 150%"),
            (["serve", "--kv-memory", "50%"], "needs --device cuda"),
            (["serve", "--kv-memory", "1KiB"], "cannot hold one request"),
            (["serve", "--chat-template", os.path.join(tmp, "missing.jinja")], "cannot read"),
            (["serve", "--chat-template", bad_template], "line 1"),
            (["serve", "--port", "70000"], "--port"),
            (["serve", "--shutdown-grace", "nan"], "--shutdown-grace"),
            (["serve", "--host", "10.255.255.1", "--port", "8123"], "cannot bind 10.255.255.1:8123"),
            (["eval", "merge", "--inputs", f"{same_a},{other}"], "differs in 'model_digest'"),
            (["eval", "merge", "--inputs", f"{same_a},{no_digest}"], "differs in 'model'"),
        ]
        for argv, fragment in cases:
            if isinstance(argv, tuple):
                argv, prepare = argv
                prepare()
            r, secs = run(binary, argv, limit=args.time_limit)
            err = r.stderr.decode(errors="replace")
            ok = r.returncode != 0 and fragment in err and secs < args.time_limit
            print(f"{'ok ' if ok else 'BAD'} {secs:6.3f} s  rc {r.returncode}  {' '.join(argv)[:70]!s:<72} {err.strip()[:90]}")
            if not ok:
                failures.append((argv, fragment, r.returncode, err, secs))
        # The embedded model and the data are found from any working directory.
        r, secs = run(binary, ["eval", "niah", "--quick", "--dry-run"], cwd=tmp)
        ok = r.returncode == 0 and b"examples" in r.stdout
        print(f"{'ok ' if ok else 'BAD'} {secs:6.3f} s  eval --dry-run from {tmp}")
        if not ok:
            failures.append((["eval from another directory"], "", r.returncode, r.stderr.decode(errors="replace"), secs))
        r, secs = run(binary, ["eval", "merge", "--inputs", f"{same_a},{same_b}"])
        ok = r.returncode == 0 and b"niah_single_1" in r.stdout and b"niah_single_2" in r.stdout
        print(f"{'ok ' if ok else 'BAD'} {secs:6.3f} s  eval merge of one model's runs under two paths")
        if not ok:
            failures.append((["eval merge by digest"], "", r.returncode, r.stderr.decode(errors="replace"), secs))
    for f in failures:
        print("FAILED:", f[0], "expected", repr(f[1]), "rc", f[2], "in", f"{f[4]:.3f} s", "stderr:", f[3][:300])
    print(f"cli errors: {len(cases) + 2 - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
