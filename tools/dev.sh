#!/usr/bin/env bash
# The README's two Quick start commands:
#   bash tools/dev.sh demo   install, build (build/), list devices, run and time vector add on
#                            the CPU from configs/runs/vector_add.yaml (kiln run -> local_run)
#   bash tools/dev.sh test   install, build and run the whole test suite, then again in a
#                            Debug + ASan + UBSan build (build-asan/), then run each VM fuzz
#                            target for KILN_FUZZ_SECONDS (default 60; build-fuzz/, clang)
# Environment: KILN_JOBS (parallel build jobs, default: nproc), KILN_SKIP_ASAN=1 (test: skip
# the sanitizer configuration), KILN_SKIP_FUZZ=1 (test: skip the fuzz targets).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${KILN_JOBS:-$(nproc)}

build() {  # build <dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

case "${1:-}" in
  demo)
    bash tools/install-deps.sh
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
    ./build/bin/kiln devices
    ./build/bin/kiln run configs/runs/vector_add.yaml
    ;;
  test)
    bash tools/install-deps.sh
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
    (cd build && ctest --output-on-failure -j "$jobs")
    if [ "${KILN_SKIP_ASAN:-0}" != "1" ]; then
      build build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF
      (cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/../tools/lsan.supp" \
        ctest --output-on-failure -j "$jobs")
    fi
    if [ "${KILN_SKIP_FUZZ:-0}" != "1" ]; then
      KILN_FUZZ_JOBS="$jobs" KILN_FUZZ_SECONDS="${KILN_FUZZ_SECONDS:-60}" bash fuzz/run.sh
    fi
    ;;
  *)
    echo "usage: bash tools/dev.sh demo|test" >&2
    exit 2
    ;;
esac
