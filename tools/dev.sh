#!/usr/bin/env bash
# The README's two Quick start commands:
#   bash tools/dev.sh demo   install, build (build/), list devices, run and time vector add on
#                            the CPU from configs/runs/vector_add.yaml (kiln run -> local_run)
#   bash tools/dev.sh test   install, build with -Werror (KILN_WERROR=ON) and run the whole test
#                            suite, run clang-tidy on the C++ files changed since the base
#                            (tools/clang-tidy-changed.sh), then build and test again in a
#                            Debug + ASan + UBSan build (build-asan/), then run each of the three
#                            fuzz targets for KILN_FUZZ_SECONDS (default 60; build-fuzz/, clang)
#                            The TVM interop tests compile their fixtures with apache-tvm from PyPI,
#                            installed into build/.venv-tvm (KILN_SKIP_TVM=1: skip, they skip)
# Environment: KILN_JOBS (parallel build jobs, default: nproc), KILN_SKIP_ASAN=1 (test: skip
# the sanitizer configuration), KILN_SKIP_FUZZ=1 (test: skip the fuzz targets),
# KILN_SKIP_TIDY=1 (test: skip clang-tidy). See docs/building.md.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${KILN_JOBS:-$(nproc)}

# The sanitizers symbolize reports with llvm-symbolizer; Debian names it by version
# (llvm-symbolizer-14 from llvm-14, -15 from llvm-15, which pocl and hipcc pull in).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer llvm-symbolizer-14 llvm-symbolizer-15; do
    if command -v "$s" >/dev/null; then
      export ASAN_SYMBOLIZER_PATH
      ASAN_SYMBOLIZER_PATH=$(command -v "$s")
      break
    fi
  done
fi

build() {  # build <dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

# A virtual environment with the TVM release the interop fixtures are compiled with; prints the
# -D option that points the build at its Python.
tvm_venv() {
  local venv=$PWD/build/.venv-tvm
  if [ "${KILN_SKIP_TVM:-0}" = "1" ]; then
    echo "-DKILN_TVM_PYTHON="
    return
  fi
  if ! "$venv/bin/python" -c "import tvm" >/dev/null 2>&1; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q apache-tvm==0.27.0.post1 numpy >&2
  fi
  echo "-DKILN_TVM_PYTHON=$venv/bin/python"
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
    mkdir -p build
    tvm_python=$(tvm_venv)
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON "$tvm_python"
    (cd build && ctest --output-on-failure -j "$jobs")
    if [ "${KILN_SKIP_TIDY:-0}" != "1" ]; then
      KILN_TIDY_BUILD_DIR=build KILN_TIDY_JOBS="$jobs" bash tools/clang-tidy-changed.sh
    fi
    if [ "${KILN_SKIP_ASAN:-0}" != "1" ]; then
      build build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF \
        -DKILN_WERROR=ON "$tvm_python"
      # intercept_tls_get_addr=0: GCC 12's sanitizer runtime (as LLVM's before 17) takes a
      # dynamic TLS block of a dlopened library (plugins, PoCL) whose address is 16 mod 4096 for
      # a glibc-2.19 block with a header, reads a bogus range from before it, and LeakSanitizer's
      # exit-time scan then dies with "Tracer caught signal 11" (google/sanitizers#1322). It is
      # set in the environment so the `kiln` processes that tests start get it too.
      (cd build-asan && ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 \
        LSAN_OPTIONS="suppressions=$PWD/../tools/lsan.supp" ctest --output-on-failure -j "$jobs")
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
