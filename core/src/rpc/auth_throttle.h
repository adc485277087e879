// SPDX-License-Identifier: Apache-2.0
// How fast a server checks tokens (docs/rpc.md, "Tokens"). Guesses are bounded per address
// and, once guessing is seen from many addresses, across all of them; a client that proved
// the token recently is never held back by guesses from other addresses.
#ifndef KILN_SRC_RPC_AUTH_THROTTLE_H_
#define KILN_SRC_RPC_AUTH_THROTTLE_H_

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace kiln::rpc {

class AuthThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  // Wrong tokens one address may try in kWindow before its checks are spaced kAddressSpacing
  // apart.
  static constexpr int kFreeFailuresPerAddress = 5;
  // Wrong tokens from all addresses in kWindow before checks from addresses that have not
  // proved the token within kTrustedFor are spaced kGlobalSpacing apart (at most 10 guesses a
  // second however many addresses an attacker rotates through).
  static constexpr int kFreeFailuresOverall = 50;
  static constexpr auto kWindow = std::chrono::seconds(60);
  static constexpr auto kAddressSpacing = std::chrono::seconds(2);
  static constexpr auto kGlobalSpacing = std::chrono::milliseconds(100);
  static constexpr auto kTrustedFor = std::chrono::hours(1);

  // Reserves the time at which the handshake from `ip` may have its token checked: `now`
  // unless the rules above space it; the caller waits until then. nullopt, reserving nothing,
  // when that would be at or past `deadline` (the caller refuses the connection): refused
  // connections do not push later ones further back.
  std::optional<Clock::time_point> admit(const std::string& ip, Clock::time_point now,
                                         Clock::time_point deadline);
  // Records the outcome of a check from `ip`.
  void record(const std::string& ip, bool ok, Clock::time_point now);

 private:
  struct Address {
    int failures = 0;
    Clock::time_point window_start{};
    Clock::time_point next_check{};
    Clock::time_point trusted_until{};
  };
  void forget_old(Clock::time_point now);  // bounds the table (under mu_)
  std::mutex mu_;
  std::map<std::string, Address> addresses_;
  int failures_ = 0;
  Clock::time_point window_start_{};
  Clock::time_point next_global_check_{};
};

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_AUTH_THROTTLE_H_
