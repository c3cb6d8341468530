#!/usr/bin/env bash
# One training run of the embedded model on a GPU machine (PyTorch, transformers, tokenizers installed).
# Expects data/train-data.tar.gz made by scripts/data/pack-train-data.sh. Writes the exported model and
# its log under ${OUT:-out}/model. Usage:
#   MINUTES=8 INIT=models/minima-qwen3-23m bash scripts/train/gpu-train.sh   (INIT empty: from scratch)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
MODEL=${MODEL:-models/minima-qwen3-23m}
work=$(mktemp -d)
tar xzf data/train-data.tar.gz -C "$work"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
args=(--data "$work" --tokenizer "$MODEL/tokenizer.json" --out "$OUT/model" --minutes "${MINUTES:-8}"
      --seed "${SEED:-1}")
if [[ -n "${INIT:-}" ]]; then args+=(--init "$INIT"); fi
PYTHONUNBUFFERED=1 python3 scripts/train/train.py "${args[@]}" ${EXTRA_ARGS:-}
rm -f "$OUT/model/generation_config.json" "$OUT/model/tokenizer.json"
ls -la "$OUT/model"
