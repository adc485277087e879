// SPDX-License-Identifier: Apache-2.0
// libcalls.so: trivial functions that measure the cost of a call through Kiln and exercise
// its error path. No default function.
#include <chrono>
#include <cstdint>

#include "kiln/sdk/kernel.hpp"

namespace {

// Does nothing: the cost of a call with no arguments and no result.
void noop() {}

// Returns a + b + c (wrapping like int64 addition in two's complement): the cost of scalar
// arguments and a scalar result.
int64_t add3(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b) +
                              static_cast<uint64_t>(c));
}

// Reads only the ndim of three tensors (borrowed): the cost of passing tensors without
// touching their data. Throws kiln::sdk::Error(KILN_ERROR_VALUE) for a NULL tensor or a
// negative ndim, which also keeps the reads from being optimised away.
void touch3(DLTensor* a, DLTensor* b, DLTensor* c) {
  if (a == nullptr || b == nullptr || c == nullptr) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "touch3: a tensor is NULL");
  }
  if ((a->ndim | b->ndim | c->ndim) < 0) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "touch3: negative ndim");
  }
}

// Busy-waits for `ns` nanoseconds of wall time on one thread, so that CPU time and wall time
// agree: the calibrated load of the evaluator accuracy benchmark.
void spin(int64_t ns) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Always throws kiln::sdk::Error(KILN_ERROR_VALUE, "deliberate failure"), for tests of the
// error path from a kernel to the caller.
void fail_value() { throw kiln::sdk::Error(KILN_ERROR_VALUE, "deliberate failure"); }

}  // namespace

KILN_EXPORT_FUNCTION(noop, noop);
KILN_EXPORT_FUNCTION(add3, add3);
KILN_EXPORT_FUNCTION(touch3, touch3);
KILN_EXPORT_FUNCTION(spin, spin);
KILN_EXPORT_FUNCTION(fail_value, fail_value);
KILN_KERNEL_LIBRARY("calls", nullptr);

// The same work as plain C functions, looked up with dlsym: the floor the call-overhead
// benchmark measures Kiln's packed calls against (bench/call_overhead_bench.cc).
extern "C" KILN_EXPORT void kiln_bench_noop_plain() { noop(); }
extern "C" KILN_EXPORT int64_t kiln_bench_add3_plain(int64_t a, int64_t b, int64_t c) {
  return add3(a, b, c);
}
extern "C" KILN_EXPORT void kiln_bench_touch3_plain(DLTensor* a, DLTensor* b, DLTensor* c) {
  touch3(a, b, c);
}
