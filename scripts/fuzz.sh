#!/usr/bin/env bash
# Fuzz, with libFuzzer under ASan + UBSan for a bounded time each (scripts/fuzz.sh [seconds], default 30):
#   safetensors_fuzz  the checkpoint parsers (safetensors header, model.safetensors.index.json);
#   api_request_fuzz  the server's request parsers (/v1/completions, /v1/chat/completions bodies);
#   jinja_fuzz        the chat-template engine (parse and render with tight limits).
# Seeds are written fresh on every run: valid inputs and a few broken variants of each.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$(nproc)" --target safetensors_fuzz api_request_fuzz jinja_fuzz
root=build/fuzz/corpus
rm -rf "$root" && mkdir -p "$root/safetensors" "$root/api" "$root/jinja"
python3 - "$root" <<'PY'
import json, struct, sys, os, glob
root = sys.argv[1]
def write(sub, name, data):
    with open(os.path.join(root, sub, name), "wb") as f:
        f.write(data)
def st(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
good = st({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
           "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
           "__metadata__": {"format": "pt"}}, bytes(22))
for name, data in {
    "st_good": b"\x00" + good,
    "st_short": b"\x00" + good[:30],
    "st_gap": b"\x00" + st({"a": {"dtype": "F16", "shape": [4], "data_offsets": [2, 10]}}, bytes(10)),
    "st_bigheader": b"\x00" + struct.pack("<Q", 1 << 40) + b"{}",
    "idx_good": b"\x01" + json.dumps({"metadata": {"total_size": 22}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                                                   "b": "model-00002-of-00002.safetensors"}}).encode(),
    "idx_escape": b"\x01" + json.dumps({"weight_map": {"a": "../etc/passwd"}}).encode(),
}.items():
    write("safetensors", name, data)
completion = {"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "n": 2,
              "stop": ["\n", "END"], "seed": 3, "logprobs": 2, "stream": True, "stream_options": {"include_usage": True},
              "presence_penalty": 0.5, "frequency_penalty": -0.5, "ignore_eos": False, "stop_token_ids": [0]}
chat = {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                                   {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function",
                                    "function": {"name": "f", "arguments": "{}"}}]},
                                   {"role": "tool", "content": "42", "tool_call_id": "1"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "auto",
        "logprobs": True, "top_logprobs": 3, "max_completion_tokens": 5, "chat_template_kwargs": {"enable_thinking": False}}
for name, (tag, body) in {
    "completion": (b"\x00", json.dumps(completion).encode()),
    "completion_tokens": (b"\x00", json.dumps({"prompt": [[1, 2, 3], [4]], "echo": True}).encode()),
    "completion_bad": (b"\x00", b'{"prompt": "x", "max_tokens": -1, "stop": [""]}'),
    "chat": (b"\x01", json.dumps(chat).encode()),
    "chat_bad": (b"\x01", b'{"messages": [{"role": "user"}], "top_logprobs": 2}'),
    "deep": (b"\x01", b"[" * 200 + b"]" * 200),
}.items():
    write("api", name, tag + body)
for path in glob.glob("tests/jinja/templates/*.jinja"):
    with open(path, "rb") as f:
        write("jinja", os.path.basename(path), f.read())
with open("models/minima-qwen3-23m/tokenizer_config.json") as f:
    write("jinja", "embedded", json.load(f)["chat_template"].encode())
PY
for target in safetensors_fuzz:safetensors api_request_fuzz:api jinja_fuzz:jinja; do
  bin=${target%%:*}
  echo "fuzz: $bin for ${secs} s"
  ./build/fuzz/fuzz/"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$root/${target##*:}" \
    2>&1 | tail -n 6
done
