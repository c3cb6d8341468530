#!/usr/bin/env bash
# Stage prebuilt GPU binaries and the non-system shared libraries they link (Highway, xxHash) into one
# directory, for a GPU machine that has the CUDA toolkit but not the Debian development packages:
#   bash scripts/gpu-pack.sh [build/release] [build/gpu-carry]; then BUILD=build/gpu-carry bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-build/release}
DST=${2:-build/gpu-carry}
cmake --build "$SRC" -j"$(nproc)" --target cuda_tests cuda_decode_bench cuda_gemm_bench minimakv
rm -rf "$DST" && mkdir -p "$DST/tests" "$DST/bench" "$DST/apps/minimakv" "$DST/runtime-libs"
cp "$SRC/tests/cuda_tests" "$DST/tests/"
cp "$SRC/bench/cuda_decode_bench" "$SRC/bench/cuda_gemm_bench" "$DST/bench/"
cp "$SRC/apps/minimakv/minimakv" "$DST/apps/minimakv/"
for lib in libhwy.so.1 libxxhash.so.0; do
  path=$(ldd "$DST/tests/cuda_tests" | awk -v l="$lib" '$1 == l {print $3}')
  [[ -n "$path" ]] && cp -L "$path" "$DST/runtime-libs/"
done
du -sh "$DST"
