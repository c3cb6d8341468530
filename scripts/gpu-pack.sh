#!/usr/bin/env bash
# Stage prebuilt GPU binaries and the non-system shared libraries they link into one
# directory, for a GPU machine that has the CUDA toolkit but not the Debian development packages:
#   bash scripts/gpu-pack.sh [build/release] [build/gpu-carry]; then BUILD=build/gpu-carry bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-build/release}
DST=${2:-build/gpu-carry}
cmake --build "$SRC" -j"$(nproc)" --target cuda_tests racecheck_probe cuda_decode_bench cuda_prefill_bench cuda_gemm_bench minimakv
rm -rf "$DST" && mkdir -p "$DST/tests" "$DST/bench" "$DST/apps/minimakv" "$DST/runtime-libs"
cp "$SRC/tests/cuda_tests" "$SRC/tests/racecheck_probe" "$DST/tests/"
cp "$SRC/bench/cuda_decode_bench" "$SRC/bench/cuda_prefill_bench" "$SRC/bench/cuda_gemm_bench" "$DST/bench/"
cp "$SRC/apps/minimakv/minimakv" "$DST/apps/minimakv/"
# Every Debian library the binaries link (Highway, xxHash, fmt, PCRE2, cpp-httplib and its TLS and
# compression libraries, prometheus-cpp), but the C and C++ runtimes, which the GPU machine has.
ldd "$DST/tests/cuda_tests" "$DST/apps/minimakv/minimakv" | awk '$3 ~ /^\/(usr\/)?lib/ {print $3}' | sort -u | while read -r path; do
  case "$(basename "$path")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libdl.so*|libpthread.so*|librt.so*) ;;
    *) cp -L "$path" "$DST/runtime-libs/" ;;
  esac
done
du -sh "$DST"
