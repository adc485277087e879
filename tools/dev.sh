#!/usr/bin/env bash
# The README's two Quick start commands:
#   bash tools/dev.sh demo   install, build (build/), list devices, run and time vector add on
#                            the CPU from configs/runs/vector_add.yaml (kiln run -> local_run)
#   bash tools/dev.sh test   install, build and run the whole test suite, then again in a
#                            Debug + ASan + UBSan build (build-asan/)
# Environment: KILN_JOBS (parallel build jobs, default: nproc), KILN_SKIP_ASAN=1 (test: skip
# the sanitizer configuration).
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
    ;;
  *)
    echo "usage: bash tools/dev.sh demo|test" >&2
    exit 2
    ;;
esac
