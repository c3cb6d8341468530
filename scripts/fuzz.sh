#!/usr/bin/env bash
# Fuzz the checkpoint parsers (safetensors header, model.safetensors.index.json) with libFuzzer under
# ASan + UBSan for a bounded time: scripts/fuzz.sh [seconds] (default 30). Seeds: a valid two-tensor
# safetensors image, a valid index, and a few broken variants, written fresh on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$(nproc)" --target safetensors_fuzz
corpus=build/fuzz/corpus
rm -rf "$corpus" && mkdir -p "$corpus"
python3 - "$corpus" <<'PY'
import json, struct, sys, os
out = sys.argv[1]
def st(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
good = st({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
           "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
           "__metadata__": {"format": "pt"}}, bytes(22))
seeds = {
    "st_good": b"\x00" + good,
    "st_short": b"\x00" + good[:30],
    "st_gap": b"\x00" + st({"a": {"dtype": "F16", "shape": [4], "data_offsets": [2, 10]}}, bytes(10)),
    "st_bigheader": b"\x00" + struct.pack("<Q", 1 << 40) + b"{}",
    "idx_good": b"\x01" + json.dumps({"metadata": {"total_size": 22}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                                                   "b": "model-00002-of-00002.safetensors"}}).encode(),
    "idx_escape": b"\x01" + json.dumps({"weight_map": {"a": "../etc/passwd"}}).encode(),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
PY
./build/fuzz/fuzz/safetensors_fuzz -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 "$corpus" \
  2>&1 | tail -n 12
