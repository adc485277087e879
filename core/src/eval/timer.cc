// SPDX-License-Identifier: Apache-2.0
#include "eval/timer.h"

#include <fmt/format.h>

#include <mutex>
#include <set>

#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::eval {

Timer::Timer(Ref<DeviceBackend> backend, int32_t device_id)
    : backend_(std::move(backend)), device_id_(device_id) {
  if (backend_->has_timer()) {
    device_timer_ = backend_->timer_create(device_id_);
    return;
  }
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(backend_->name()).second) {
    log(LogLevel::kWarn, "evaluator",
        fmt::format("No timer implementation for {}, using default timer instead. It may be "
                    "inaccurate or have extra overhead.",
                    backend_->name()));
  }
}

Timer::~Timer() {
  if (device_timer_ != nullptr) backend_->timer_destroy(device_timer_);
}

void Timer::start() {
  if (device_timer_ != nullptr) {
    backend_->timer_start(device_timer_);
    return;
  }
  backend_->synchronize(device_id_);
  start_ = std::chrono::steady_clock::now();
}

void Timer::stop() {
  if (device_timer_ != nullptr) {
    backend_->timer_stop(device_timer_);
    return;
  }
  backend_->synchronize(device_id_);
  stop_ = std::chrono::steady_clock::now();
}

int64_t Timer::elapsed_ns() {
  const int64_t ns =
      device_timer_ != nullptr
          ? backend_->timer_elapsed_ns(device_timer_)
          : std::chrono::duration_cast<std::chrono::nanoseconds>(stop_ - start_).count();
  if (ns < 0) {
    throw RuntimeError(
        fmt::format("{} timer read a negative duration ({} ns)", backend_->name(), ns));
  }
  return ns;
}

}  // namespace kiln::eval
