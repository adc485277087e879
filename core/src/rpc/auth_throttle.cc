// SPDX-License-Identifier: Apache-2.0
#include "rpc/auth_throttle.h"

#include <algorithm>

namespace kiln::rpc {

namespace {
constexpr size_t kMaxAddresses = 4096;
}

std::optional<AuthThrottle::Clock::time_point> AuthThrottle::admit(const std::string& ip,
                                                                   Clock::time_point now,
                                                                   Clock::time_point deadline) {
  std::lock_guard lock(mu_);
  Clock::time_point at = now;
  auto it = addresses_.find(ip);
  const bool trusted = it != addresses_.end() && it->second.trusted_until > now;
  const bool spaced_here = it != addresses_.end() && now - it->second.window_start < kWindow &&
                           it->second.failures >= kFreeFailuresPerAddress;
  const bool spaced_overall =
      !trusted && now - window_start_ < kWindow && failures_ >= kFreeFailuresOverall;
  if (spaced_here) at = std::max(at, it->second.next_check);
  if (spaced_overall) at = std::max(at, next_global_check_);
  if (at >= deadline) return std::nullopt;
  if (spaced_here) it->second.next_check = at + kAddressSpacing;
  if (spaced_overall) next_global_check_ = at + kGlobalSpacing;
  return at;
}

void AuthThrottle::record(const std::string& ip, bool ok, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (ok) {
    Address& a = addresses_[ip];
    a.failures = 0;
    a.trusted_until = now + kTrustedFor;
    forget_old(now);
    return;
  }
  if (now - window_start_ >= kWindow) {
    window_start_ = now;
    failures_ = 0;
  }
  ++failures_;
  Address& a = addresses_[ip];
  if (now - a.window_start >= kWindow) {
    a.window_start = now;
    a.failures = 0;
  }
  ++a.failures;
  forget_old(now);
}

void AuthThrottle::forget_old(Clock::time_point now) {
  if (addresses_.size() <= kMaxAddresses) return;
  std::erase_if(addresses_, [&](const auto& kv) {
    const Address& a = kv.second;
    return a.trusted_until <= now && now - a.window_start >= kWindow && a.next_check <= now;
  });
  // Still full (a flood of fresh addresses): the ones not trusted go first.
  if (addresses_.size() > kMaxAddresses) {
    std::erase_if(addresses_, [&](const auto& kv) { return kv.second.trusted_until <= now; });
  }
}

}  // namespace kiln::rpc
