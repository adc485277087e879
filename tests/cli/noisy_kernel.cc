// SPDX-License-Identifier: Apache-2.0
// libnoisy.so: a deliberately noisy function for the noise verdict's CLI test. nap(us) sleeps
// `us` microseconds on even calls and 4 x `us` on odd ones, so its repeats spread (CV far above
// the 10% threshold) and the measuring thread is off the CPU for nearly the whole measurement.
#include <chrono>
#include <cstdint>
#include <thread>

#include "kiln/sdk/kernel.hpp"

namespace {

void nap(int64_t us) {
  static int64_t calls = 0;
  std::this_thread::sleep_for(std::chrono::microseconds(calls++ % 2 == 0 ? us : 4 * us));
}

}  // namespace

KILN_EXPORT_FUNCTION(nap, nap);
KILN_KERNEL_LIBRARY("noisy", nullptr);
