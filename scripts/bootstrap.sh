#!/usr/bin/env bash
# Install everything minima-kv needs on a fresh Debian 12 machine (run as root; idempotent).
# C++ toolchain and libraries from Debian; documentation packages that the training/evaluation text
# is extracted from; a Python venv (.venv) with the reference libraries the tests compare against.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build git pkg-config python3 python3-venv clang
      libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
      libfmt-dev libpcre2-dev libopenblas-dev libcpp-httplib-dev prometheus-cpp-dev
      python3.11-doc linux-doc-6.1 wordnet-base wamerican)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "bootstrap: Debian packages present (${#pkgs[@]})"

# Reference libraries the parity tests compare our C++ against (PyPI), in the project's own venv:
# tokenizers (the tokenizer), jinja2 (chat templates), openai (the server's client).
if [[ ! -x .venv/bin/python3 ]] || ! .venv/bin/python3 -c "import tokenizers, jinja2, openai" 2>/dev/null; then
  [[ -x .venv/bin/python3 ]] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "tokenizers>=0.20,<1" "jinja2>=3.1,<4" "openai>=1.40,<3"
fi
echo "bootstrap: reference venv .venv ($(.venv/bin/python3 -c 'import tokenizers, jinja2, openai
print("tokenizers", tokenizers.__version__, "jinja2", jinja2.__version__, "openai", openai.__version__)'))"

# The evaluation's held-out essay and key words (and the training text), extracted from the Debian
# packages above; regenerated only when missing.
if [[ ! -s data/corpus/essay.txt || ! -s data/words/eval_nouns.txt || ! -s data/phrasings/eval_needles.txt ]]; then
  python3 scripts/data/extract_corpus.py --out data
fi
echo "bootstrap: evaluation data in data/ ($(wc -l < data/words/eval_nouns.txt) evaluation nouns)"
