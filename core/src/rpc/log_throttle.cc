// SPDX-License-Identifier: Apache-2.0
#include "rpc/log_throttle.h"

#include <fmt/format.h>

namespace kiln::rpc {

LogThrottle::LogThrottle(LogLevel level, std::string source, std::string what, int burst,
                         std::chrono::seconds interval)
    : level_(level),
      source_(std::move(source)),
      what_(std::move(what)),
      burst_(burst),
      interval_(interval) {}

void LogThrottle::roll(std::chrono::steady_clock::time_point now) {
  if (now - start_ < interval_) return;
  if (suppressed_ > 0) {
    kiln::log(level_, source_,
              fmt::format("... and {} more {} in the last {} s (not logged one by one)",
                          suppressed_, what_, interval_.count()));
  }
  start_ = now;
  logged_ = 0;
  suppressed_ = 0;
}

void LogThrottle::log(const std::string& message) {
  std::lock_guard lock(mu_);
  roll(std::chrono::steady_clock::now());
  if (logged_ < burst_) {
    ++logged_;
    kiln::log(level_, source_, message);
    return;
  }
  ++suppressed_;
}

void LogThrottle::flush() {
  std::lock_guard lock(mu_);
  if (suppressed_ > 0) {
    kiln::log(level_, source_,
              fmt::format("... and {} more {} (not logged one by one)", suppressed_, what_));
    suppressed_ = 0;
  }
}

long LogThrottle::suppressed() const {
  std::lock_guard lock(mu_);
  return suppressed_;
}

}  // namespace kiln::rpc
