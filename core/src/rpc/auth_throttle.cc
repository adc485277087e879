// SPDX-License-Identifier: Apache-2.0
#include "rpc/auth_throttle.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace kiln::rpc {

namespace {
constexpr size_t kMaxSources = 4096;
}

std::string AuthThrottle::source_of(const std::string& ip) {
  in6_addr v6{};
  if (::inet_pton(AF_INET6, ip.c_str(), &v6) != 1) return ip;  // IPv4, or not an address
  std::memset(v6.s6_addr + 8, 0, 8);
  char text[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET6, &v6, text, sizeof(text)) == nullptr) return ip;
  return std::string(text) + "/64";
}

std::optional<AuthThrottle::Clock::time_point> AuthThrottle::admit(const std::string& source,
                                                                   Clock::time_point now,
                                                                   Clock::time_point deadline) {
  std::lock_guard lock(mu_);
  const auto it = sources_.find(source);
  const Source* s = it != sources_.end() ? &it->second : nullptr;
  const int failures = s != nullptr && now - s->window_start < kWindow ? s->failures : 0;
  const bool trusted = s != nullptr && s->trusted_until > now;
  // A source with no wrong token in the window and no check in progress is in its own lane;
  // the others share the guessing lane. Checks in progress count, so that one source cannot
  // open many connections at once to have them all checked in its own lane.
  const bool guessing = failures > 0 || (s != nullptr && s->checking > 0);
  const bool spaced_here = failures >= kFreeFailuresPerAddress;
  const bool spaced_overall =
      guessing && !trusted && now - window_start_ < kWindow && failures_ >= kFreeFailuresOverall;
  Clock::time_point at = now;
  if (spaced_here) at = std::max(at, s->next_check);
  if (spaced_overall) at = std::max(at, next_global_check_);
  if (at >= deadline) return std::nullopt;
  Source& entry = sources_[source];
  if (spaced_here) entry.next_check = at + kAddressSpacing;
  if (spaced_overall) next_global_check_ = at + kGlobalSpacing;
  ++entry.checking;
  forget_old(now);
  return at;
}

void AuthThrottle::record(const std::string& source, Outcome outcome, Clock::time_point now) {
  std::lock_guard lock(mu_);
  Source& s = sources_[source];
  if (s.checking > 0) --s.checking;
  switch (outcome) {
    case Outcome::kRight:
      s.failures = 0;
      s.trusted_until = now + kTrustedFor;
      break;
    case Outcome::kWrong:
      if (now - window_start_ >= kWindow) {
        window_start_ = now;
        failures_ = 0;
      }
      ++failures_;
      if (now - s.window_start >= kWindow) {
        s.window_start = now;
        s.failures = 0;
      }
      ++s.failures;
      break;
    case Outcome::kUndecided:
      break;
  }
  forget_old(now);
}

void AuthThrottle::forget_old(Clock::time_point now) {
  if (sources_.size() <= kMaxSources) return;
  // Never a source with a check in progress: its record() must find its count.
  std::erase_if(sources_, [&](const auto& kv) {
    const Source& s = kv.second;
    return s.checking == 0 && s.trusted_until <= now && now - s.window_start >= kWindow &&
           s.next_check <= now;
  });
  // Still full (a flood of fresh addresses): the ones not trusted go first.
  if (sources_.size() > kMaxSources) {
    std::erase_if(sources_, [&](const auto& kv) {
      return kv.second.checking == 0 && kv.second.trusted_until <= now;
    });
  }
}

}  // namespace kiln::rpc
