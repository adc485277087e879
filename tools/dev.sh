#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's two Quick start commands:
#   bash tools/dev.sh demo   install, build (build/, with the Python package in build/python),
#                            list devices, run and time vector add on the CPU from
#                            configs/runs/vector_add.yaml (kiln run -> local_run), then the same
#                            from Python (examples/python/local_run.py, kiln.testing.local_run)
#   bash tools/dev.sh test   install, build with -Werror (KILN_WERROR=ON) and run the whole test
#                            suite (ctest, with the Python package's pytest suite), build the wheel,
#                            repair it with auditwheel and check it in a minimal Debian 12 root
#                            (tools/wheel-check.sh), install it into the virtual environment and
#                            run the pytest suite against it, run clang-tidy on the C++ files
#                            changed since the base (tools/clang-tidy-changed.sh), then build and
#                            test again in a Debug + ASan + UBSan build (build-asan/), then run
#                            each fuzz target for KILN_FUZZ_SECONDS (default 60; build-fuzz/, clang)
# Python: a virtual environment (build/.venv-tvm; build/.venv-py with KILN_SKIP_TVM=1) holds
# nanobind, scikit-build-core, pytest and numpy, and apache-tvm from PyPI, which compiles the TVM
# interop fixtures and is the peer of the interop tests (KILN_SKIP_TVM=1: not installed; those
# tests skip and say why).
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

# The virtual environment of the Python package (its build and tests) and of the TVM release
# the interop fixtures are compiled with (unless KILN_SKIP_TVM=1); prints its python.
python_venv() {
  local venv=$PWD/build/.venv-tvm
  # scipy: compare.py's test; mypy: tests/python/test_types.py (stubs, documented snippets)
  local packages=(nanobind scikit-build-core pytest numpy scipy "mypy>=2.4")
  if [ "${KILN_SKIP_TVM:-0}" = "1" ]; then
    venv=$PWD/build/.venv-py
  else
    # tvm-ffi 0.1.15 crashes TVM 0.27's save_json (MetaSchedule); cloudpickle and psutil are
    # MetaSchedule's builder and search (docs/tuning.md).
    packages+=(apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post0 cloudpickle psutil)
  fi
  if ! "$venv/bin/python" -c "import nanobind, pytest, numpy, scipy, mypy" >/dev/null 2>&1 ||
    { [ "${KILN_SKIP_TVM:-0}" != "1" ] &&
      ! "$venv/bin/python" -c "import tvm, cloudpickle, psutil" >/dev/null 2>&1; }; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q "${packages[@]}" >&2
  fi
  echo "$venv/bin/python"
}

# The CMake options that build the Python package with `python` and point the TVM interop
# fixtures at it (or at nothing with KILN_SKIP_TVM=1).
python_options() {
  local python=$1
  local tvm=$python
  if [ "${KILN_SKIP_TVM:-0}" = "1" ]; then tvm=""; fi
  echo "-DKILN_BUILD_PYTHON=ON -DPython_EXECUTABLE=$python -DKILN_TVM_PYTHON=$tvm"
}

case "${1:-}" in
  demo)
    bash tools/install-deps.sh
    mkdir -p build
    python=$(KILN_SKIP_TVM=1 python_venv)
    # shellcheck disable=SC2046  # the options are words
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo $(KILN_SKIP_TVM=1 python_options "$python")
    ./build/bin/kiln devices
    ./build/bin/kiln run configs/runs/vector_add.yaml
    PYTHONPATH=$PWD/build/python "$python" examples/python/local_run.py
    echo "Python: PYTHONPATH=$PWD/build/python $python, or pip install . (docs/python.md)"
    ;;
  test)
    bash tools/install-deps.sh
    mkdir -p build
    python=$(python_venv)
    # shellcheck disable=SC2046
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON $(python_options "$python")
    (cd build && ctest --output-on-failure -j "$jobs")
    # The wheel (libkiln, plugins, the tool and the extension inside the package), packaged
    # from build/ (what was just tested, stripped; no second compile), repaired with auditwheel
    # and checked in a minimal Debian 12 root (tools/wheel-check.sh), then installed here and
    # tested from outside the source tree so that the installed package is the one imported.
    KILN_WHEEL_FROM_BUILD=build bash tools/wheel-check.sh "$python" build/dist
    "$python" -m pip install -q --force-reinstall --no-deps build/dist/kiln_runtime-*manylinux*.whl
    (cd build && KILN_TEST_INSTALLED=1 KILN_BUILD_DIR=$PWD "$python" -m pytest -q -p no:cacheprovider \
      -rs ../tests/python)
    if [ "${KILN_SKIP_TIDY:-0}" != "1" ]; then
      KILN_TIDY_BUILD_DIR=build KILN_TIDY_JOBS="$jobs" bash tools/clang-tidy-changed.sh
    fi
    if [ "${KILN_SKIP_ASAN:-0}" != "1" ]; then
      # No Python package here: the interpreter is not built with the sanitizers.
      build build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF \
        -DKILN_WERROR=ON "-DKILN_TVM_PYTHON=$([ "${KILN_SKIP_TVM:-0}" = "1" ] || echo "$python")"
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
