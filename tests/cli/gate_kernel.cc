// SPDX-License-Identifier: Apache-2.0
// libgate_a.so, libgate_b.so: work whose cost is set exactly, for the tests of `kiln ab` and
// `kiln compare` verdicts and for bench/gate_check.py (docs/benchmarks.md "A gate that can
// fail"). Both libraries are built from this file and differ only in their name (KILN_GATE_NAME):
// two different files with the same code, as a rebuild of an unchanged kernel is.
//   spin(units, parallel)  runs `units` units of a dependent multiply-add chain (2^14 steps
//                          each, about 20-30 us on a 2.6 GHz core), spread over the cpu plugin's
//                          threads one unit per chunk when `parallel` is non-zero, else on the
//                          calling thread. Its cost is proportional to `units`: 13 units where
//                          there were 10 is a 1.3x slowdown, with no cache or memory effect.
//   coin(us)               sleeps `us` or 4 x `us` microseconds, by the turns of a fixed
//                          pseudo-random sequence (its own in each library): calls
//                          so noisy that a few rounds cannot tell anything, the same way in
//                          every run.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "kiln/sdk/kernel.hpp"

#ifndef KILN_GATE_NAME
#error "KILN_GATE_NAME must name the library"
#endif

namespace {

constexpr int64_t kStepsPerUnit = int64_t{1} << 14;

// Where each unit's result goes, so that the chain is not optimized away.
std::atomic<uint64_t> sink{0};

double unit(int64_t index) {
  // A chain of dependent multiply-adds: each step waits for the previous one, so a unit costs
  // the same on any data and the compiler can neither vectorize nor shorten it.
  double x = 1.0 + static_cast<double>(index & 7) * 1e-3;
  for (int64_t i = 0; i < kStepsPerUnit; ++i) x = x * 0.999999 + 1e-6;
  return x;
}

// Units [begin, end).
void run(int64_t begin, int64_t end) {
  double total = 0;
  for (int64_t u = begin; u < end; ++u) total += unit(u);
  sink.fetch_add(static_cast<uint64_t>(total), std::memory_order_relaxed);
}

void spin(int64_t units, int64_t parallel) {
  if (units < 0) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "units must be >= 0, got " + std::to_string(units));
  }
  if (parallel != 0) {
    kiln::sdk::parallel_for(0, units, 1, [](int64_t begin, int64_t end) { run(begin, end); });
  } else {
    run(0, units);
  }
}

void coin(int64_t us) {
  // A linear congruential sequence (Knuth's MMIX constants) seeded by the library's name, so
  // that gate_a and gate_b draw different turns.
  static uint64_t state = [] {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (const char* c = KILN_GATE_NAME; *c != 0; ++c) {
      h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ULL;
    }
    return h;
  }();
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  const bool heads = ((state >> 33) & 1) != 0;
  std::this_thread::sleep_for(std::chrono::microseconds(heads ? us : 4 * us));
}

}  // namespace

KILN_EXPORT_FUNCTION(spin, spin);
KILN_EXPORT_FUNCTION(coin, coin);
KILN_KERNEL_LIBRARY(KILN_GATE_NAME, "spin");
