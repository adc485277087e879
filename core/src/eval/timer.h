// SPDX-License-Identifier: Apache-2.0
// Timers the evaluator uses: the backend's timer slots when it has them, else synchronize plus
// the host's steady clock (SPEC.md §1.5), with a one-time warning per device type.
#ifndef KILN_SRC_EVAL_TIMER_H_
#define KILN_SRC_EVAL_TIMER_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "kiln/device_backend.h"

namespace kiln::eval {

class Timer {
 public:
  // Uses `backend`'s timer for device `device_id` when it has one.
  Timer(Ref<DeviceBackend> backend, int32_t device_id);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void start();
  void stop();
  // Nanoseconds between start and stop; may block until the device reaches stop. A negative
  // reading (a broken or wrapped timer) is an error, not a silent wrong answer.
  int64_t elapsed_ns();
  // "device" or "wall".
  const char* kind() const { return device_timer_ != nullptr ? "device" : "wall"; }

 private:
  Ref<DeviceBackend> backend_;
  int32_t device_id_;
  void* device_timer_ = nullptr;
  std::chrono::steady_clock::time_point start_, stop_;
};

}  // namespace kiln::eval

#endif  // KILN_SRC_EVAL_TIMER_H_
