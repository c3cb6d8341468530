#!/usr/bin/env bash
# Extract the corpus and word lists from Debian packages and pack them for the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 scripts/data/extract_corpus.py --out data
tar czf data/train-data.tar.gz -C data corpus words phrasings
ls -la data/train-data.tar.gz
