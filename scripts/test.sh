#!/usr/bin/env bash
# Build and run the whole test suite. Usage: scripts/test.sh [preset]   (default: release)
# Presets: release, debug-asan (AddressSanitizer + UBSan), tsan (ThreadSanitizer), gpu (needs a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
bash scripts/bootstrap.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j"$(nproc)"
ctest --preset "$preset" -j"$(nproc)"
