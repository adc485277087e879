#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's two Quick start commands:
#   bash tools/dev.sh demo   install, build (build/, with the Python package in build/python),
#                            list devices, run and time vector add on the CPU from
#                            configs/runs/vector_add.yaml (kiln run -> local_run), then the same
#                            from Python (examples/python/local_run.py, kiln.testing.local_run)
#   bash tools/dev.sh test   install, build with -Werror (KILN_WERROR=ON) and run the whole test
#                            suite (ctest, but for its in-tree pytest run), build the wheel,
#                            repair it with auditwheel and check it in a minimal Debian 12 root
#                            (tools/wheel-check.sh), install it into the virtual environment and
#                            run the pytest suite against it, run clang-tidy on the C++ files
#                            changed since the base (tools/clang-tidy-changed.sh), then build and
#                            test again in a Debug + ASan + UBSan build (build-asan/), then run
#                            each fuzz target for KILN_FUZZ_SECONDS (default 60; build-fuzz/, clang)
# Python: a virtual environment (build/.venv-tvm; build/.venv-py with KILN_SKIP_TVM=1), made
# from Debian's /usr/bin/python3, holds nanobind, scikit-build-core, pytest and numpy, and
# apache-tvm from PyPI, which compiles the TVM interop fixtures and is the peer of the interop
# tests (KILN_SKIP_TVM=1: not installed; those tests skip and say why).
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

# Each step of `test` says how long it took, and the whole run ends with the list: CI's budget
# (40 minutes on 2 cores) is spent here, and the list says where.
phase_times=()
phase() {  # phase <name> <command...>: runs the command, records "<seconds> s  <name>"
  local name=$1 start=$SECONDS
  shift
  "$@"
  phase_times+=("$((SECONDS - start)) s  $name")
  echo "dev.sh: $name took $((SECONDS - start)) s" >&2
}
phase_summary() {
  echo "dev.sh: time per step (total ${SECONDS} s):" >&2
  printf '  %s\n' "${phase_times[@]}" >&2
}

build() {  # build <dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

# Debian's interpreter, named by path, not whatever `python3` comes first on PATH: on a machine
# with pyenv, conda or a /usr/local build first on PATH the virtual environments would be made
# from that Python instead, with its headers and its own (often newer) pip, and a run there
# would prove nothing about a fresh Debian 12, whose only python3 is this one (its venvs get
# ensurepip's pip 23.0.1). So the venvs, the extension's headers (python3-dev) and the tests'
# own Python (find_package(Python3), with python3-numpy) are Debian's on every machine.
# tools/install-deps.sh installs python3, python3-venv and python3-dev.
debian_python=/usr/bin/python3

# The virtual environment of the Python package (its build and tests) and of the TVM release
# the interop fixtures are compiled with (unless KILN_SKIP_TVM=1); prints its python. One made
# from another interpreter (an older build/ made with pyenv's python3, say) is made again.
# Nothing here or in the scripts it runs needs a pip newer than the venv's own (pip options
# from pip 22.1 or older only: --config-settings, not -C, which came in 23.1).
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
  if [ ! -x "$debian_python" ]; then
    echo "dev.sh: $debian_python (Debian's python3) is missing; the" \
      "virtual environments are made from it: run tools/install-deps.sh (as root)" >&2
    return 1
  fi
  # The installation a venv was made from is its sys.base_prefix (/usr for Debian's).
  local base="import sys; print(sys.base_prefix)"
  local want have
  want=$("$debian_python" -c "$base")
  have=$("$venv/bin/python" -c "$base" 2>/dev/null || true)
  local clear=()
  if [ -e "$venv" ] && [ "$have" != "$want" ]; then
    echo "dev.sh: $venv was made from ${have:-an interpreter that no longer runs}, not" \
      "$debian_python: making it again" >&2
    clear=(--clear)
  elif "$venv/bin/python" -c "import nanobind, pytest, numpy, scipy, mypy" >/dev/null 2>&1 &&
    { [ "${KILN_SKIP_TVM:-0}" = "1" ] ||
      "$venv/bin/python" -c "import tvm, cloudpickle, psutil" >/dev/null 2>&1; }; then
    echo "$venv/bin/python"
    return 0
  fi
  # Checked here: `set -e` does not reach into the $(python_venv) of the callers.
  "$debian_python" -m venv "${clear[@]}" "$venv" >&2 ||
    { echo "dev.sh: $debian_python -m venv $venv failed" >&2; return 1; }
  "$venv/bin/python" -m pip install -q "${packages[@]}" >&2 ||
    { echo "dev.sh: pip could not install ${packages[*]} into $venv (its errors are above)" >&2
      return 1; }
  echo "$venv/bin/python"
}

# The CMake options that build the Python package with `python` and point the TVM interop
# fixtures at it (or at nothing with KILN_SKIP_TVM=1). FindPython's cached results (`_Python_*`)
# go each time: they are kept by the interpreter's path, so a venv made again at the same path
# from another Python would keep the old one's include directory.
python_options() {
  local python=$1
  local tvm=$python
  if [ "${KILN_SKIP_TVM:-0}" = "1" ]; then tvm=""; fi
  echo "-U _Python_* -DKILN_BUILD_PYTHON=ON -DPython_EXECUTABLE=$python -DKILN_TVM_PYTHON=$tvm" \
    "-DPython3_EXECUTABLE=$debian_python"
}

case "${1:-}" in
  demo)
    bash tools/install-deps.sh
    mkdir -p build
    python=$(KILN_SKIP_TVM=1 python_venv)
    # shellcheck disable=SC2046  # the options are words
    build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_UNITY_BUILD=ON \
      $(KILN_SKIP_TVM=1 python_options "$python")
    ./build/bin/kiln devices
    ./build/bin/kiln run configs/runs/vector_add.yaml
    PYTHONPATH=$PWD/build/python "$python" examples/python/local_run.py
    echo "Python: PYTHONPATH=$PWD/build/python $python, or pip install . (docs/python.md)"
    ;;
  test)
    trap phase_summary EXIT
    phase "install the Debian packages" bash tools/install-deps.sh
    mkdir -p build
    start=$SECONDS
    python=$(python_venv)
    phase_times+=("$((SECONDS - start)) s  the virtual environment")
    # Line tables only (-g1) in CI's two builds: backtraces and sanitizer reports still name
    # file and line, and the compile is 13% (-O2) to 28% (ASan, -O0) shorter than with -g; the
    # wheel packaged from build/ is stripped anyway.
    ci_release_flags="-O2 -g1 -DNDEBUG"
    # shellcheck disable=SC2046
    # Unity builds: about half the CPU time of a full build (docs/building.md, "Unity builds").
    phase "build build/" \
      build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON -DKILN_UNITY_BUILD=ON \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$ci_release_flags" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$ci_release_flags" \
      $(python_options "$python")
    # Everything but the in-tree pytest run (`python`): the same suite runs below against the
    # installed wheel, which is the stronger test (and the in-tree run would cost CI ~3 minutes
    # for nothing more). `cd build && ctest` still runs it for a developer.
    phase "ctest in build/ (without the pytest suite)" \
      ctest --test-dir build --output-on-failure -j "$jobs" -E '^python$'
    # The wheel (libkiln, plugins, the tool and the extension inside the package), packaged
    # from build/ (what was just tested, stripped; no second compile), repaired with auditwheel
    # and checked in a minimal Debian 12 root (tools/wheel-check.sh), then installed here and
    # tested from outside the source tree so that the installed package is the one imported.
    phase "the wheel, checked in a minimal Debian 12 root" \
      env KILN_WHEEL_FROM_BUILD=build bash tools/wheel-check.sh "$python" build/dist
    "$python" -m pip install -q --force-reinstall --no-deps build/dist/kiln_runtime-*manylinux*.whl
    phase "pytest against the installed wheel" \
      env -C build KILN_TEST_INSTALLED=1 KILN_BUILD_DIR="$PWD/build" \
      "$python" -m pytest -q -p no:cacheprovider -rs --durations=15 ../tests/python
    if [ "${KILN_SKIP_TIDY:-0}" != "1" ]; then
      phase "clang-tidy on the changed files" \
        env KILN_TIDY_BUILD_DIR=build KILN_TIDY_JOBS="$jobs" bash tools/clang-tidy-changed.sh
    fi
    if [ "${KILN_SKIP_ASAN:-0}" != "1" ]; then
      # No Python package here: the interpreter is not built with the sanitizers.
      phase "build build-asan/" \
        build build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF \
        -DKILN_UNITY_BUILD=ON \
        -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
        -DKILN_WERROR=ON "-DKILN_TVM_PYTHON=$([ "${KILN_SKIP_TVM:-0}" = "1" ] || echo "$python")" \
        "-DPython3_EXECUTABLE=$debian_python"
      # intercept_tls_get_addr=0: GCC 12's sanitizer runtime (as LLVM's before 17) takes a
      # dynamic TLS block of a dlopened library (plugins, PoCL) whose address is 16 mod 4096 for
      # a glibc-2.19 block with a header, reads a bogus range from before it, and LeakSanitizer's
      # exit-time scan then dies with "Tracer caught signal 11" (google/sanitizers#1322). It is
      # set in the environment so the `kiln` processes that tests start get it too.
      phase "ctest in build-asan/" \
        env ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 \
        LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp" \
        ctest --test-dir build-asan --output-on-failure -j "$jobs"
    fi
    if [ "${KILN_SKIP_FUZZ:-0}" != "1" ]; then
      phase "the fuzz targets (build and run)" \
        env KILN_FUZZ_JOBS="$jobs" KILN_FUZZ_SECONDS="${KILN_FUZZ_SECONDS:-60}" bash fuzz/run.sh
    fi
    ;;
  *)
    echo "usage: bash tools/dev.sh demo|test" >&2
    exit 2
    ;;
esac
