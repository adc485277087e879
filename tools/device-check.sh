#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One command that checks Kiln's CUDA backend on a real NVIDIA GPU (docs/device-check.md):
# builds (or reuses, or unpacks) the CUDA plugin and the tools, then runs the CUDA backend
# tests, kiln-conformance on the GPU with the example PTX, the TVM CUDA fixture, `kiln run` of
# the CUDA example configs checked against numpy, the effect of the device L2 flush, and CUDA
# event timing against kernels of known length and the host clock. Prints one summary table
# and exits 1 if any check failed, else 0. Without a GPU it says so in one line and exits 0.
#
#   tools/device-check.sh [options]
#
#   --build-dir DIR      the build tree to use, build or unpack into (default: <repo>/build)
#   --log-dir DIR        where each check's log goes (default: $OUT if set, else
#                        /tmp/kiln-device-check)
#   --no-build           use the build tree as it is: no cmake, no ninja
#   --bundle FILE        first unpack FILE (made by --make-bundle) into the build dir
#   --make-bundle FILE   pack what the checks need from the build tree into FILE (.tar.xz),
#                        for a GPU machine that cannot build Kiln, and exit
#   --only LIST          run only these checks (comma-separated; build and devices always run)
#   --timeout SECONDS    one time limit for every check (default: each check's own, below)
#   --driver LIB         the CUDA driver to probe and use (default: $KILN_DEVICE_CHECK_DRIVER,
#                        else libcuda.so.1); any other value gets a plugin set of its own
#   --summary-from FILE  print the summary table of FILE (rows: name TAB PASS|FAIL|SKIP TAB
#                        detail) and exit as a full run would: 1 if a row failed
#   --list               list the checks and their time limits, and exit
# Environment: KILN_DEVICE_CHECK_PYTHON, a Python with numpy (default: python3, then
# <build>/.venv-tvm/bin/python, <build>/.venv-py/bin/python); KILN_DEVICE_CHECK_DRIVER.

# The checks are called by name (check_$name), which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

SELF=$(realpath "${BASH_SOURCE[0]}")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
HELPER=$ROOT/tools/device_check/device_check.py
DEFAULT_DRIVER=libcuda.so.1

# Every check in order, with its time limit in seconds (a check past it is killed and fails).
CHECK_ORDER=(build devices cuda_tests conformance tvm_cuda examples l2_flush event_timing)
declare -A CHECK_LIMIT=([build]=600 [devices]=60 [cuda_tests]=300 [conformance]=180
  [tvm_cuda]=180 [examples]=180 [l2_flush]=120 [event_timing]=120)
declare -A CHECK_WHAT=(
  [build]="build, reuse or unpack the tree; its binaries and libraries must load"
  [devices]="kiln devices lists the GPU as cuda:0"
  [cuda_tests]="kiln_cuda_tests, every CudaGpu test run (not skipped)"
  [conformance]="kiln-conformance --device cuda --require-device with vector_add.ptx"
  [tvm_cuda]="TVM's CUDA fixtures: kiln_tvm_tests TvmCudaLibrary.* and kiln run, vs numpy"
  [examples]="kiln run of configs/runs/cuda_{vector_add,relu,matmul}.yaml vs numpy"
  [l2_flush]="cache_flush_device_l2 makes an L2-sized vector add slower than a hot one"
  [event_timing]="CUDA events around busy-wait kernels of 0.1/1/10 ms, and the host clock")

# The build targets the checks use (those the tree lacks are left out).
BUILD_TARGETS=(kiln_tool kiln_conformance_tool kiln_rpc_session cpu package cuda
  kiln_cuda_fake_driver kiln_cuda_tests kiln_tvm_tests kiln_example_kernels
  kiln_cuda_example_kernels)

usage() {
  sed -n '2,/^$/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
  echo "device-check: $*" >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# The summary table: one row per check, read from a TSV file (name, status, detail). A row that
# is not three fields with a status of PASS, FAIL or SKIP is itself a failure, and so is a file
# with no rows: a table that cannot be read never passes.
print_summary() {
  local file=$1
  [[ -r $file ]] || die "--summary-from: cannot read '$file'"
  awk -F'\t' '
    BEGIN { valid["PASS"]; valid["FAIL"]; valid["SKIP"]; w = 5 }
    /^[[:space:]]*$/ { next }
    {
      n++
      if (NF != 3 || $1 == "" || !($2 in valid)) {
        name[n] = "line " NR; status[n] = "FAIL"; detail[n] = "malformed row: " $0
      } else {
        name[n] = $1; status[n] = $2; detail[n] = $3
      }
      count[status[n]]++
      if (length(name[n]) > w) w = length(name[n])
    }
    END {
      if (n == 0) { print "device-check: FAIL: no checks ran (no rows in " FILENAME ")"; exit 1 }
      line = sprintf("%" w "s", ""); gsub(/ /, "-", line)
      printf "%-" w "s  %-6s  %s\n", "check", "result", "detail"
      printf "%s  ------  ------\n", line
      for (i = 1; i <= n; i++) printf "%-" w "s  %-6s  %s\n", name[i], status[i], detail[i]
      verdict = count["FAIL"] ? "FAIL" : "PASS"
      printf "device-check: %s: %d passed, %d failed, %d skipped\n", verdict,
        count["PASS"], count["FAIL"], count["SKIP"]
      exit count["FAIL"] ? 1 : 0
    }' "$file"
}

# ---------------------------------------------------------------------------------------------
# Is there a GPU? Prints why not, or nothing when there is one (or when nothing can tell: the
# devices row then says what kiln sees).
no_gpu_reason() {
  # /dev/dxg: WSL 2, whose GPUs have no /dev/nvidia* nodes.
  if [[ $DRIVER == "$DEFAULT_DRIVER" && ! -e /dev/dxg ]] &&
    ! compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
    echo "no /dev/nvidia[0-9]* device node"
    return
  fi
  if command -v python3 >/dev/null 2>&1; then
    local why rc=0
    why=$(python3 "$HELPER" probe "$DRIVER" 2>&1) || rc=$?
    if ((rc != 0)); then echo "${why:-the probe of $DRIVER failed (exit $rc)}" | tail -n 1; fi
    return
  fi
  if [[ $DRIVER == "$DEFAULT_DRIVER" ]] && command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || echo "nvidia-smi lists no GPU"
    return
  fi
  if [[ $DRIVER != "$DEFAULT_DRIVER" && ! -e $DRIVER ]]; then echo "$DRIVER does not exist"; fi
}

# ---------------------------------------------------------------------------------------------
# Inside a check (--run-check NAME, a child process under `timeout`): `row` records the verdict.
row() {  # row STATUS DETAIL...
  local detail="${*:2}"
  detail=${detail//$'\t'/ }
  detail=${detail//$'\n'/ }
  printf '%s\t%s\t%s\n' "$KDC_CHECK" "$1" "$detail" >"$KDC_LOG/$KDC_CHECK.row"
  echo "device-check: $KDC_CHECK: $1: $detail"
}

row_from_helper() {  # row_from_helper <helper subcommand and arguments>: its "STATUS\tdetail"
  local out rc=0
  out=$(python3 "$HELPER" "$@") || rc=$?
  local status=${out%%$'\t'*} detail=${out#*$'\t'}
  if ((rc != 0)) || [[ $status != PASS && $status != FAIL && $status != SKIP ]]; then
    row FAIL "tools/device_check/device_check.py $1 failed (exit $rc): $out"
  else
    row "$status" "$detail"
  fi
}

have() { command -v "$1" >/dev/null 2>&1; }

last_error_line() {  # the last line of a log that looks like an error, else its last line
  local line
  line=$(grep -E -i 'error|fail|fatal|cannot|not found' "$1" 2>/dev/null | tail -n 1 || true)
  [[ -n $line ]] || line=$(tail -n 1 "$1" 2>/dev/null || true)
  echo "${line:0:300}"
}

kiln() { "$KDC_BUILD/bin/kiln" "$@"; }

# Runs `kiln run --json CONFIG` into JSON (its stderr beside it, and in the log); returns its
# exit code and leaves a row-ready message in KILN_RUN_ERROR when it fails.
kiln_run_json() {  # kiln_run_json CONFIG JSON
  local rc=0
  kiln run --no-progress --json "$1" >"$2" 2>"$2.stderr" || rc=$?
  cat "$2.stderr"
  KILN_RUN_ERROR="kiln run $(basename "$1") exited $rc: $(last_error_line "$2.stderr")"
  return "$rc"
}

# ---- build ----------------------------------------------------------------------------------

# A copied tree's binaries name the folders they were built in (RUNPATH, the tests' data
# folders): where those do not exist on this machine, make them links to this checkout and
# this build tree. Nothing that exists is touched. Prints what it did.
link_built_paths() {  # link_built_paths SOURCE_DIR_THEN BUILD_DIR_THEN
  local src0=$1 build0=$2 build
  build=$(realpath "$KDC_BUILD")
  if [[ -n $src0 && $src0 != "$ROOT" && ! -e $src0 && ! -L $src0 ]]; then
    mkdir -p "$(dirname "$src0")" && ln -s "$ROOT" "$src0" && echo "linked $src0 -> $ROOT;"
  fi
  if [[ -n $build0 && ! -e $build0 && ! -L $build0 ]]; then
    mkdir -p "$(dirname "$build0")" && ln -s "$build" "$build0" && echo "linked $build0 -> $build;"
  elif [[ -n $build0 && -e $build0 && $(realpath "$build0") != "$build" ]]; then
    echo "note: its binaries name $build0, another tree;"
  fi
}

unpack_bundle() {  # prints what it did; fails with a message
  local bundle=$1 build=$KDC_BUILD
  [[ -r $bundle ]] || { echo "cannot read the bundle $bundle"; return 1; }
  if [[ -f $build/CMakeCache.txt ]]; then
    echo "will not unpack a bundle over the build tree $build (use --build-dir)"
    return 1
  fi
  mkdir -p "$build"
  if ! tar -xf "$bundle" -C "$build" --strip-components=1; then
    echo "tar could not unpack $bundle"
    return 1
  fi
  # Bundled libraries stand in only for those this system lacks (its own are newer and fit
  # its other libraries): the missing ones are linked into deps/, which goes on the path.
  rm -rf "$build/deps"
  mkdir -p "$build/deps"
  local lib soname used=0 total=0 system_libs
  system_libs=$( (ldconfig -p 2>/dev/null || true) | awk '{print $1}')
  for lib in "$build"/bundle-deps/*; do
    [[ -e $lib ]] || continue
    soname=$(basename "$lib")
    total=$((total + 1))
    if ! grep -qxF "$soname" <<<"$system_libs"; then
      ln -sf "$lib" "$build/deps/$soname"
      used=$((used + 1))
    fi
  done
  local info
  info=$(sed -n 's/^made=//p' "$build/BUNDLE_INFO" 2>/dev/null || true)
  echo "unpacked $(basename "$bundle") (made $info) into $build;" \
    "$used of $total bundled libraries used;"
}

# The targets of BUILD_TARGETS that the tree defines.
existing_targets() {
  if [[ -f $KDC_BUILD/build.ninja ]] && have ninja; then
    local all
    all=$(ninja -C "$KDC_BUILD" -t targets all 2>/dev/null | sed -n 's/: phony$//p')
    local t
    for t in "${BUILD_TARGETS[@]}"; do
      if grep -qxF "$t" <<<"$all"; then echo "$t"; fi
    done
  else
    printf '%s\n' "${BUILD_TARGETS[@]}"
  fi
}

cmake_build() {  # prints what it did; fails with a message
  local start=$SECONDS targets
  mapfile -t targets < <(existing_targets)
  ((${#targets[@]})) || { echo "the tree defines none of the targets"; return 1; }
  if ! cmake --build "$KDC_BUILD" --target "${targets[@]}" -j "$(nproc)" >&2; then
    echo "cmake --build failed"
    return 1
  fi
  echo "built ${#targets[@]} targets in $((SECONDS - start)) s;"
}

check_build() {
  local build=$KDC_BUILD how="" src0="" build0="" out
  if [[ -n $KDC_BUNDLE ]]; then
    out=$(unpack_bundle "$KDC_BUNDLE") || { row FAIL "$out"; return; }
    how=$out
    src0=$(sed -n 's/^source_dir=//p' "$build/BUNDLE_INFO")
    build0=$(sed -n 's/^build_dir=//p' "$build/BUNDLE_INFO")
  elif [[ -f $build/CMakeCache.txt ]]; then
    src0=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
    build0=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$build/CMakeCache.txt")
    if [[ $KDC_NO_BUILD == 1 ]]; then
      how="used $build as it is (--no-build);"
    elif [[ $(realpath -m "$src0") != "$ROOT" ]]; then
      how="used $build as it is (configured for $src0, not here);"
    elif ! have cmake; then
      how="used $build as it is (no cmake here);"
    else
      out=$(cmake_build) || true
      if [[ $out != built* ]]; then
        row FAIL "$out: $(last_error_line "$KDC_LOG/build.log")"
        return
      fi
      how=$out
    fi
  elif [[ -x $build/bin/kiln || $KDC_NO_BUILD == 1 ]]; then
    how="used $build as it is;"
  elif have cmake && have ninja; then
    echo "configuring a new tree in $build"
    if ! cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKILN_BUILD_BENCH=OFF >&2; then
      row FAIL "cmake could not configure $build: $(grep -m1 -A1 'CMake Error' \
        "$KDC_LOG/build.log" | tr '\n' ' ')"
      return
    fi
    out=$(cmake_build) || true
    if [[ $out != built* ]]; then
      row FAIL "$out: $(last_error_line "$KDC_LOG/build.log")"
      return
    fi
    how="configured and $out"
  else
    row FAIL "no build tree in $build, no --bundle, and no cmake and ninja to build one"
    return
  fi
  how+=" $(link_built_paths "$src0" "$build0")"

  local f missing=()
  for f in bin/kiln bin/kiln-conformance lib/kiln/plugins/libkiln_cuda.so \
    lib/kiln/plugins/cuda.yaml; do
    [[ -e $build/$f ]] || missing+=("$f")
  done
  if ((${#missing[@]})); then
    row FAIL "$build lacks ${missing[*]}"
    return
  fi
  local env_file=$KDC_LOG/build.env libpath=$build/lib
  [[ -d $build/deps ]] && libpath+=":$build/deps"
  {
    echo "export LD_LIBRARY_PATH='$libpath'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export KILN_EXAMPLES='$build/examples/kernels'"
  } >"$env_file"
  # shellcheck disable=SC1090
  source "$env_file"
  local unresolved=""
  if have ldd; then
    for f in bin/kiln bin/kiln-conformance bin/kiln_cuda_tests bin/kiln_tvm_tests \
      lib/kiln/plugins/libkiln_cuda.so lib/kiln/plugins/libkiln_cpu.so; do
      [[ -e $build/$f ]] || continue
      unresolved+=$(ldd "$build/$f" 2>/dev/null | awk '/not found/ {printf " %s", $1}')
    done
  fi
  if [[ -n $unresolved ]]; then
    row FAIL "${how} but these libraries are missing:$(tr ' ' '\n' <<<"$unresolved" |
      sort -u | tr '\n' ' ')"
    return
  fi
  local version
  if ! version=$(kiln --version 2>&1); then
    row FAIL "${how} but bin/kiln does not run: ${version:0:200}"
    return
  fi
  how=${how%"${how##*[![:space:]]}"}
  row PASS "$version: ${how%;}"
}

# ---- devices --------------------------------------------------------------------------------
check_devices() {
  local json=$KDC_LOG/devices.json rc=0
  kiln devices --json >"$json" || rc=$?
  if ((rc != 0)); then
    row FAIL "kiln devices exited $rc"
    return
  fi
  row_from_helper devices "$json"
}

# ---- cuda_tests -----------------------------------------------------------------------------
gtest_row() {  # gtest_row LABEL FILTER BINARY [helper options...]: runs BINARY, records a row
  local label=$1 filter=$2 bin=$3 json=$KDC_LOG/$KDC_CHECK.gtest.json rc=0
  shift 3
  rm -f "$json"
  (cd "$KDC_BUILD" && KILN_LOG=${KILN_LOG:-warn} KILN_TVM_FIXTURES=$KDC_BUILD/tvm_fixtures \
    "$bin" --gtest_filter="$filter" --gtest_output="json:$json") || rc=$?
  row_from_helper gtest --label "$label" --filter "$filter" --log "$KDC_LOG/$KDC_CHECK.log" \
    --json "$json" --exit-code "$rc" "$@"
}

check_cuda_tests() {
  local bin=$KDC_BUILD/bin/kiln_cuda_tests
  [[ -x $bin ]] || { row SKIP "kiln_cuda_tests is not built (KILN_BUILD_TESTS=OFF?)"; return; }
  gtest_row kiln_cuda_tests '*' "$bin" --gpu-suite CudaGpu
}

# ---- conformance ----------------------------------------------------------------------------
example_ptx_or_skip() {  # sets PTX to the example vector_add.ptx, or records a SKIP row
  PTX=$KDC_BUILD/examples/kernels/cuda/vector_add.ptx
  if [[ ! -f $PTX ]]; then
    row SKIP "the CUDA example kernels are not built ($PTX: nvcc was not found when the tree" \
      "was configured)"
    return 1
  fi
}

check_conformance() {
  example_ptx_or_skip || return 0
  local rc=0 out=$KDC_LOG/conformance
  "$KDC_BUILD/bin/kiln-conformance" --device cuda --require-device \
    --module "cuda:$PTX:ptx:vector_add" --report "$out.md" --report-json "$out.json" || rc=$?
  local line
  line=$(grep -E '^kiln-conformance [0-9.]+: ' "$KDC_LOG/conformance.log" | tail -n 1 || true)
  if ((rc == 0)); then
    row PASS "${line:-exit 0} (report: $out.md)"
  else
    row FAIL "kiln-conformance exited $rc: ${line:-$(last_error_line "$KDC_LOG/conformance.log")}"
  fi
}

# ---- tvm_cuda -------------------------------------------------------------------------------
check_tvm_cuda() {
  local fixtures=$KDC_BUILD/tvm_fixtures bin=$KDC_BUILD/bin/kiln_tvm_tests
  [[ -x $bin ]] || { row SKIP "kiln_tvm_tests is not built"; return; }
  if [[ ! -f $fixtures/manifest.json ]]; then
    local tvm_python
    tvm_python=$(sed -n 's/^KILN_TVM_PYTHON:FILEPATH=//p' "$KDC_BUILD/CMakeCache.txt" \
      2>/dev/null || true)
    [[ -n $tvm_python ]] || tvm_python=$KDC_BUILD/.venv-tvm/bin/python
    if [[ -x $tvm_python ]] && "$tvm_python" -c "import tvm" >/dev/null 2>&1; then
      echo "compiling the TVM fixtures with $tvm_python"
      bash "$ROOT/tests/tvm/build_fixtures.sh" "$fixtures" "$tvm_python" ||
        { row FAIL "tests/tvm/build_fixtures.sh failed"; return; }
    else
      row SKIP "no TVM fixtures in $fixtures and no Python with apache-tvm to compile them"
      return
    fi
  fi
  local skipped
  skipped=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
print("" if "matmul_cuda" in m["cases"] else m.get("skipped", {}).get("cuda", "not compiled"))' \
    "$fixtures/manifest.json")
  if [[ -n $skipped ]]; then
    row SKIP "the TVM that made the fixtures did not compile the CUDA ones: $skipped"
    return
  fi
  if ! python3 "$HELPER" nvrtc; then
    row SKIP "no NVRTC library here: TVM's CUDA fixtures are CUDA source compiled at load time"
    return
  fi
  gtest_row "TvmCudaLibrary (kiln_tvm_tests)" 'TvmCudaLibrary.*' "$bin" \
    --gpu-suite TvmCudaLibrary --require-ran
  local status
  status=$(cut -f2 "$KDC_LOG/$KDC_CHECK.row")
  [[ $status == PASS ]] || return 0
  local first_detail work=$KDC_LOG/tvm_cuda case runs=()
  first_detail=$(cut -f3 "$KDC_LOG/$KDC_CHECK.row")
  rm -rf "$work"
  mkdir -p "$work"
  for case in vadd_cuda matmul_cuda; do
    python3 "$HELPER" tvm-config --fixtures "$fixtures" --case "$case" "$work/$case.yaml"
    if ! kiln_run_json "$work/$case.yaml" "$work/$case.json"; then
      row FAIL "$first_detail; $KILN_RUN_ERROR"
      return
    fi
    runs+=("$case")
  done
  row PASS "$first_detail; kiln run ${runs[*]}: outputs equal TVM's numpy references"
}

# ---- examples -------------------------------------------------------------------------------
check_examples() {
  example_ptx_or_skip || return 0
  if [[ -z $KDC_PYTHON ]]; then
    row SKIP "no Python with numpy (set KILN_DEVICE_CHECK_PYTHON)"
    return
  fi
  local work=$KDC_LOG/examples kernel
  rm -rf "$work"
  mkdir -p "$work"
  for kernel in vector_add relu matmul; do
    "$KDC_PYTHON" "$HELPER" examples-config --kernel "$kernel" \
      "$ROOT/configs/runs/cuda_$kernel.yaml" "$work/cuda_$kernel.yaml"
    if ! kiln_run_json "$work/cuda_$kernel.yaml" "$work/$kernel.json"; then
      row FAIL "$KILN_RUN_ERROR"
      return
    fi
  done
  local out rc=0
  out=$("$KDC_PYTHON" "$HELPER" examples-check --dir "$work" vector_add relu matmul) || rc=$?
  if ((rc != 0)); then row FAIL "the numpy check failed (exit $rc): $out"; return; fi
  row "${out%%$'\t'*}" "${out#*$'\t'}"
}

# ---- l2_flush -------------------------------------------------------------------------------
check_l2_flush() {
  example_ptx_or_skip || return 0
  local l2
  l2=$(python3 "$HELPER" l2-bytes "$KDC_LOG/devices.json")
  ((l2 > 0)) || { row FAIL "cuda:0 reports no l2_cache_bytes"; return; }
  # Three float32 vectors filling half the L2: hot, they stay in it between calls.
  local n=$((l2 / 2 / 12 / 256 * 256))
  ((n >= 65536)) || n=65536
  local work=$KDC_LOG/l2_flush variant
  rm -rf "$work"
  mkdir -p "$work"
  for variant in hot flushed; do
    local preproc=""
    [[ $variant == flushed ]] && preproc=", f_preproc: cache_flush_device_l2"
    cat >"$work/$variant.yaml" <<EOF
# tools/device-check.sh l2_flush: vector_add on $((12 * n)) bytes of arguments, one call per
# timed batch, $variant.
module: $PTX
function: vector_add
device: cuda
evaluator: {number: 1, repeat: 50, min_repeat_ms: 0$preproc}
inputs:
  - {name: a, shape: [$n], dtype: float32, init: random, seed: 1, low: -1, high: 1}
  - {name: b, shape: [$n], dtype: float32, init: random, seed: 2, low: -1, high: 1}
  - {name: out, shape: [$n], dtype: float32, init: zeros}
  - {name: alpha, scalar: 0.5}
  - {name: n, scalar: $n}
  - {name: grid, scalar: $((n / 256))}
  - {name: block, scalar: 256}
EOF
    if ! kiln_run_json "$work/$variant.yaml" "$work/$variant.json"; then
      row FAIL "$KILN_RUN_ERROR"
      return
    fi
  done
  row_from_helper l2-check --hot "$work/hot.json" --flushed "$work/flushed.json" \
    --bytes $((12 * n)) --l2 "$l2"
}

# ---- event_timing ---------------------------------------------------------------------------
check_event_timing() {
  local work=$KDC_LOG/event_timing ns runs=()
  rm -rf "$work"
  mkdir -p "$work"
  cp "$ROOT/tools/device_check/busy_wait.ptx" "$ROOT/tools/device_check/busy_wait.ptx.json" \
    "$work/"
  # Shortest first: the first run absorbs the driver's JIT compilation of the PTX.
  for ns in 100000 1000000 10000000; do
    cat >"$work/busy_$ns.yaml" <<EOF
# tools/device-check.sh event_timing: one thread spinning $ns ns on %globaltimer.
module: busy_wait.ptx
function: busy_wait
device: cuda
evaluator: {number: 1, repeat: 10, min_repeat_ms: 0}
inputs:
  - {name: out, shape: [1], dtype: uint64, init: zeros}
  - {name: ns, scalar: $ns}
  - {name: grid, scalar: 1}
  - {name: block, scalar: 1}
outputs:
  - {name: out, save: busy_$ns.out.npy}
EOF
    if ! kiln_run_json "$work/busy_$ns.yaml" "$work/busy_$ns.json"; then
      row FAIL "$KILN_RUN_ERROR"
      return
    fi
    runs+=("$ns=$work/busy_$ns.json")
  done
  local npy=()
  [[ -n $KDC_PYTHON ]] && npy=(--npy)
  row_from_helper timing-check "${npy[@]}" "${runs[@]}"
}

# ---------------------------------------------------------------------------------------------
# --make-bundle: what the checks need from a built tree, stripped, with the shared libraries
# it loads beyond the C and C++ runtimes, as one .tar.xz for a machine that cannot build.
make_bundle() {
  local out build stage b
  out=$(realpath -m "$1")
  build=$(realpath "$BUILD_DIR")
  [[ -x $build/bin/kiln ]] || die "--make-bundle: $build/bin/kiln does not exist: build first"
  stage=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$stage'" EXIT
  b=$stage/kiln-device-bundle
  mkdir -p "$b/bin" "$b/lib" "$b/bundle-deps"
  local f
  for f in kiln kiln-conformance kiln-rpc-session kiln_cuda_tests kiln_tvm_tests; do
    [[ -e $build/bin/$f ]] && cp "$build/bin/$f" "$b/bin/"
  done
  cp -a "$build"/lib/libkiln*.so* "$b/lib/"
  for f in kiln kiln-tests share tvm_fixtures; do
    case $f in
      share | tvm_fixtures) [[ -d $build/$f ]] && cp -a "$build/$f" "$b/" ;;
      *) [[ -d $build/lib/$f ]] && cp -a "$build/lib/$f" "$b/lib/" ;;
    esac
  done
  (cd "$build" && find examples -type f ! -path '*/CMakeFiles/*' ! -name '*.cmake' \
    ! -name Makefile -print0 | tar --null -cf - -T -) | (cd "$b" && tar -xf -)
  local elf=()
  while IFS= read -r -d '' f; do
    if [[ $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; then elf+=("$f"); fi
  done < <(find "$b" -type f -print0)
  for f in "${elf[@]}"; do strip --strip-unneeded "$f" 2>/dev/null || true; done
  # Libraries beyond glibc and the compiler's runtimes, which every target has in newer forms.
  local dep
  while read -r dep; do
    if [[ -e $dep ]]; then cp -L "$dep" "$b/bundle-deps/"; fi
  done < <(for f in "${elf[@]}"; do ldd "$f" 2>/dev/null || true; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' |
    grep -v -E '/libkiln[^/]*\.so' |
    grep -v -F "$build/")
  {
    echo "source_dir=$ROOT"
    echo "build_dir=$build"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git -C "$ROOT" \
      describe --always --dirty 2>/dev/null || echo 'an unknown commit')"
  } >"$b/BUNDLE_INFO"
  local compress=(xz -T0 -6)
  have xz || compress=(gzip -6)
  tar -C "$stage" -cf - kiln-device-bundle | "${compress[@]}" >"$out"
  local count
  count=$(find "$b/bundle-deps" -type f | wc -l)
  echo "device-check: wrote $out ($(du -h "$out" | cut -f1); $count" \
    "libraries bundled); on the GPU machine: tools/device-check.sh --bundle $(basename "$out")"
}

# ---------------------------------------------------------------------------------------------
# Python with numpy, for the checks that compare with it.
find_numpy_python() {
  local p
  for p in "${KILN_DEVICE_CHECK_PYTHON:-}" python3 "$KDC_BUILD/.venv-tvm/bin/python" \
    "$KDC_BUILD/.venv-py/bin/python"; do
    [[ -n $p ]] || continue
    if "$p" -c "import numpy" >/dev/null 2>&1; then
      command -v "$p"
      return
    fi
  done
}

# Runs one check in a child process under its time limit and appends its row.
run_check() {
  local name=$1 limit=${TIMEOUT_ALL:-${CHECK_LIMIT[$1]}}
  local log=$KDC_LOG/$name.log rowf=$KDC_LOG/$name.row rc=0
  rm -f "$rowf"
  echo "device-check: $name: ${CHECK_WHAT[$name]} (log: $log)" >&2
  KDC_CHECK=$name timeout --kill-after=10 "$limit" bash "$SELF" --run-check "$name" \
    >"$log" 2>&1 </dev/null || rc=$?
  if [[ -s $rowf ]]; then
    if [[ $(cut -f2 "$rowf") == FAIL ]]; then
      printf '%s (log: %s)\n' "$(cat "$rowf")" "$log" >>"$ROWS"
    else
      cat "$rowf" >>"$ROWS"
    fi
  elif ((rc == 124 || rc == 137)); then
    printf '%s\tFAIL\ttimed out after %s s (log: %s)\n' "$name" "$limit" "$log" >>"$ROWS"
  else
    printf '%s\tFAIL\tended without a verdict (exit %s) (log: %s)\n' "$name" "$rc" "$log" >>"$ROWS"
  fi
  tail -n 1 "$ROWS" | cut -f2
}

skip_row() { printf '%s\tSKIP\t%s\n' "$1" "$2" >>"$ROWS"; }

main() {
  BUILD_DIR=$ROOT/build
  LOG_DIR=${OUT:-/tmp/kiln-device-check}
  DRIVER=${KILN_DEVICE_CHECK_DRIVER:-$DEFAULT_DRIVER}
  local no_build=0 bundle="" make_bundle_to="" only="" summary_from="" run_one=""
  TIMEOUT_ALL=""
  while (($#)); do
    case $1 in
      --build-dir) BUILD_DIR=${2:?--build-dir needs a folder}; shift ;;
      --log-dir) LOG_DIR=${2:?--log-dir needs a folder}; shift ;;
      --no-build) no_build=1 ;;
      --bundle) bundle=$(realpath "${2:?--bundle needs a file}"); shift ;;
      --make-bundle) make_bundle_to=${2:?--make-bundle needs a file}; shift ;;
      --only) only=${2:?--only needs a list}; shift ;;
      --timeout) TIMEOUT_ALL=${2:?--timeout needs seconds}; shift ;;
      --driver) DRIVER=${2:?--driver needs a library}; shift ;;
      --summary-from) summary_from=${2:?--summary-from needs a file}; shift ;;
      --run-check) run_one=${2:?}; shift ;;
      --list)
        local c
        for c in "${CHECK_ORDER[@]}"; do
          printf '%-13s %4s s  %s\n' "$c" "${CHECK_LIMIT[$c]}" "${CHECK_WHAT[$c]}"
        done
        exit 0 ;;
      -h | --help) usage; exit 0 ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
  done

  if [[ -n $run_one ]]; then  # a child of run_check; the environment says the rest
    "check_$run_one"
    exit 0
  fi
  if [[ -n $summary_from ]]; then
    print_summary "$summary_from" && exit 0 || exit 1
  fi
  if [[ -n $make_bundle_to ]]; then
    make_bundle "$make_bundle_to"
    exit 0
  fi
  if [[ -n $TIMEOUT_ALL && ! $TIMEOUT_ALL =~ ^[1-9][0-9]*$ ]]; then
    die "--timeout must be a whole number of seconds, not '$TIMEOUT_ALL'"
  fi
  local selected=() c
  if [[ -n $only ]]; then
    IFS=, read -r -a selected <<<"$only"
    for c in "${selected[@]}"; do
      [[ -n ${CHECK_LIMIT[$c]:-} ]] || die "--only: unknown check '$c' (see --list)"
    done
  fi

  # A path (not a bare library name for the loader to search) must survive the checks' cd.
  if [[ $DRIVER == */* ]]; then DRIVER=$(realpath -m "$DRIVER"); fi
  local why
  why=$(no_gpu_reason)
  if [[ -n $why ]]; then
    echo "device-check: no NVIDIA GPU here ($why); nothing to check"
    exit 0
  fi

  mkdir -p "$LOG_DIR"
  export KDC_LOG KDC_BUILD KDC_NO_BUILD=$no_build KDC_BUNDLE=$bundle KDC_PYTHON=""
  KDC_LOG=$(realpath "$LOG_DIR")
  KDC_BUILD=$(realpath -m "$BUILD_DIR")
  ROWS=$KDC_LOG/rows.tsv
  : >"$ROWS"
  rm -f "$KDC_LOG"/*.row "$KDC_LOG/build.env"
  echo "device-check: driver $DRIVER, build tree $KDC_BUILD, logs in $KDC_LOG" >&2

  local status
  status=$(run_check build)
  if [[ $status == PASS ]]; then
    # shellcheck disable=SC1091
    source "$KDC_LOG/build.env"
    KDC_PYTHON=$(find_numpy_python || true)
    if [[ $DRIVER != "$DEFAULT_DRIVER" ]]; then
      # The cuda plugin (and the rest of the checks) on this driver: a plugin set of its own.
      cat >"$KDC_LOG/plugins.yaml" <<EOF
# tools/device-check.sh --driver $DRIVER
search_paths: [$KDC_BUILD/lib/kiln/plugins]
plugins:
  - cpu
  - package
  - name: cuda
    options: {driver_library: '$DRIVER'}
EOF
      export KILN_PLUGIN_SET=$KDC_LOG/plugins.yaml
    fi
    status=$(run_check devices)
  fi
  for c in "${CHECK_ORDER[@]:2}"; do
    if ((${#selected[@]})) && ! printf '%s\n' "${selected[@]}" | grep -qxF "$c"; then
      continue
    fi
    if [[ $status != PASS ]]; then
      if ! grep -q "^devices"$'\t' "$ROWS"; then skip_row devices "needs the build (build row)"; fi
      skip_row "$c" "needs the build and a cuda device that kiln sees (rows above)"
      continue
    fi
    run_check "$c" >/dev/null
  done

  local rc=0
  print_summary "$ROWS" | tee "$KDC_LOG/summary.txt" || rc=$?
  exit "$rc"
}

main "$@"
