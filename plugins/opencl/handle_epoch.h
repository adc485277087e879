// SPDX-License-Identifier: Apache-2.0
// The release counter of kernels and streams. A launch skips the registry lookups for the
// kernel and stream its thread validated at the counter's current value (launcher.h), so every
// owner that releases a kernel (Modules) or a stream (Queues) advances it.
#ifndef KILN_PLUGINS_OPENCL_HANDLE_EPOCH_H_
#define KILN_PLUGINS_OPENCL_HANDLE_EPOCH_H_

#include <atomic>
#include <cstdint>

namespace kiln::opencl {

// One counter for the process, not one per plugin instance, so that a new instance at a
// destroyed one's address never sees an old value again. Lock-free; never decreases.
class HandleEpoch {
 public:
  HandleEpoch() = delete;

  // The current value (acquire): a kernel and stream found live after reading it stay live
  // while it is unchanged.
  static uint64_t current() noexcept { return value_.load(std::memory_order_acquire); }
  // Advances the counter (release). Called once a kernel or stream has left its registry.
  static void advance() noexcept { value_.fetch_add(1, std::memory_order_release); }

 private:
  static inline std::atomic<uint64_t> value_{1};
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_HANDLE_EPOCH_H_
