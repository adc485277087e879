#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the fuzz targets (VM readers, RPC session server, VM programs in a session, tracker,
# TVM library readers) with clang and libFuzzer in build-fuzz/ and runs each for a bounded
# time. Exits non-zero when a target finds a crash, a sanitizer error or a broken round trip
# (the reproducer is left in build-fuzz/fuzz-artifacts/), and when a harness could not set
# itself up (exit status 75, fuzz/fuzz_setup.h: its message names the cause; no reproducer,
# since that is no finding).
#
#   fuzz/run.sh                       # every target, KILN_FUZZ_SECONDS (default 60) each
#   fuzz/run.sh kiln_fuzz_vm_asm      # one target
#
# Environment: KILN_FUZZ_SECONDS (per target, default 60), KILN_FUZZ_JOBS (build jobs, default
# 2), KILN_FUZZ_PARALLEL (targets run at once, default KILN_FUZZ_JOBS), KILN_FUZZ_CC / KILN_FUZZ_CXX (default clang / clang++), KILN_FUZZ_BUILD_DIR (default
# <repo>/build-fuzz). Needs clang and its libFuzzer runtime (Debian: clang and
# libclang-rt-14-dev, or clang-15 and libclang-common-15-dev). Reports are symbolized with
# ASAN_SYMBOLIZER_PATH (default: the first of llvm-symbolizer, -14, -15 on PATH).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${KILN_FUZZ_SECONDS:-60}"
jobs="${KILN_FUZZ_JOBS:-2}"
cc="${KILN_FUZZ_CC:-clang}"
cxx="${KILN_FUZZ_CXX:-clang++}"

# target, seed corpus, -max_len, dictionary (or "")
targets=(
  "kiln_fuzz_vm_binary $root/fuzz/corpus/vm_binary 16384 -"
  "kiln_fuzz_vm_asm $root/fuzz/corpus/vm_asm 8192 $root/fuzz/vm_asm.dict"
  "kiln_fuzz_rpc_session $root/fuzz/corpus/rpc_session 65536 $root/fuzz/rpc_session.dict"
  "kiln_fuzz_vm_session $root/fuzz/corpus/vm_session 8192 $root/fuzz/vm_session.dict"
  "kiln_fuzz_tracker_message $root/fuzz/corpus/tracker_message 65536 $root/fuzz/tracker_message.dict"
  "kiln_fuzz_tvm_blob $root/fuzz/corpus/tvm_blob 32768 -"
)
selected=("$@")

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DKILN_UNITY_BUILD=ON
fi
names=()
for t in "${targets[@]}"; do names+=("${t%% *}"); done
cmake --build "$build" -j "$jobs" --target "${names[@]}"

# Symbolized reports: llvm-symbolizer under any of Debian's names (llvm-15, which pocl and
# hipcc pull in, has only llvm-symbolizer-15).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer llvm-symbolizer-14 llvm-symbolizer-15; do
    if command -v "$s" >/dev/null; then
      ASAN_SYMBOLIZER_PATH=$(command -v "$s")
      export ASAN_SYMBOLIZER_PATH
      break
    fi
  done
fi
# A hostile Alloc may ask for any size: the allocator must fail it, not abort the process.
# intercept_tls_get_addr=0: see tools/dev.sh (LeakSanitizer's tracer crash on dynamic TLS).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:intercept_tls_get_addr=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
# The suppressions of tools/lsan.supp (vendor runtimes, glibc's thread-exit bookkeeping).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tools/lsan.supp}"
# Each target in its own process, KILN_FUZZ_PARALLEL at a time (default: the build jobs; each
# fuzzer uses one core); each writes to its own log, shown when it ends.
parallel="${KILN_FUZZ_PARALLEL:-$jobs}"
logs="$build/fuzz-logs"
artifacts="$build/fuzz-artifacts"
mkdir -p "$logs" "$artifacts"

fuzz_one() {  # fuzz_one <name> <seeds> <max_len> <dict>: runs one target; exit status as libFuzzer's
  local name=$1 seeds=$2 max_len=$3 dict=$4
  local corpus="$build/fuzz-corpus/$name"  # new inputs go here; the seeds stay untouched
  mkdir -p "$corpus"
  local args=(-max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
              -print_final_stats=1 -artifact_prefix="$artifacts/$name-")
  if [ "$dict" != "-" ]; then args+=(-dict="$dict"); fi
  "$build/bin/$name" "${args[@]}" "$corpus" "$seeds" >"$logs/$name.log" 2>&1
}

report() {  # report <name> <exit status>: prints the end of its log and the verdict
  local name=$1 rc=$2
  if [ "$rc" -eq 0 ]; then
    tail -n 12 "$logs/$name.log"
    echo "== $name: no crash (log: $logs/$name.log)"
  elif [ "$rc" -eq 75 ]; then
    tail -n 20 "$logs/$name.log"
    echo "== $name: NOT RUN: the harness could not set itself up (not a finding; the" \
         "'kiln fuzz:' line above names the cause)" >&2
    status=1
  else
    tail -n 80 "$logs/$name.log"
    echo "== $name: FAILED (reproducer in $artifacts/; rerun with $build/bin/$name <file>)" >&2
    status=1
  fi
}

status=0
declare -A running=()  # pid -> target name
wait_for_one() {
  local pid rc=0
  wait -n -p pid "${!running[@]}" || rc=$?
  report "${running[$pid]}" "$rc"
  unset "running[$pid]"
}
for t in "${targets[@]}"; do
  read -r name seeds max_len dict <<<"$t"
  if [ ${#selected[@]} -gt 0 ] && [[ ! " ${selected[*]} " == *" $name "* ]]; then continue; fi
  while [ ${#running[@]} -ge "$parallel" ]; do wait_for_one; done
  echo "== $name: ${seconds}s, -max_len=$max_len, seeds $seeds"
  fuzz_one "$name" "$seeds" "$max_len" "$dict" &
  running[$!]=$name
done
while [ ${#running[@]} -gt 0 ]; do wait_for_one; done
exit "$status"
