// SPDX-License-Identifier: Apache-2.0
// How fast a server checks tokens (docs/rpc.md, "Tokens"). Every check is counted against its
// source (an IPv4 address, an IPv6 /64). A source that has not guessed wrong lately and has no
// check in progress has a lane of its own: its check runs at once, whatever other sources do,
// so guesses from elsewhere never shut out a token holder whose first flight verifies. Sources
// that guessed wrong are bounded each on its own and, once guessing is seen from many of them,
// together in one guessing lane; a source that proved the token recently never waits for it.
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
  // Wrong tokens one source may try in kWindow before its checks are spaced kAddressSpacing
  // apart.
  static constexpr int kFreeFailuresPerAddress = 5;
  // Wrong tokens from all sources in kWindow before the checks of sources in the guessing lane
  // (a wrong token within kWindow, or a check in progress) that have not proved the token
  // within kTrustedFor are spaced kGlobalSpacing apart (at most 10 a second however many
  // addresses an attacker rotates through, plus one per source and window in its own lane).
  static constexpr int kFreeFailuresOverall = 50;
  static constexpr auto kWindow = std::chrono::seconds(60);
  static constexpr auto kAddressSpacing = std::chrono::seconds(2);
  static constexpr auto kGlobalSpacing = std::chrono::milliseconds(100);
  static constexpr auto kTrustedFor = std::chrono::hours(1);

  // What a check came to.
  enum class Outcome {
    kRight,      // the peer proved the token
    kWrong,      // the peer does not hold it: a guess
    kUndecided,  // no answer either way (the peer left, timed out, was not TLS)
  };

  // The source checks from the peer address `ip` (as the server prints it) count against: the
  // address itself, or for IPv6 its /64 ("2001:db8:1:2::/64"; one host commonly holds a whole
  // /64). Anything that does not parse is its own source.
  static std::string source_of(const std::string& ip);

  // Reserves the time at which a check from `source` may run: `now` unless the rules above
  // space it; the caller waits until then, runs the check and calls record() once with its
  // outcome. nullopt, reserving nothing, when that would be at or past `deadline` (the caller
  // refuses the connection): refused connections do not push later ones further back.
  std::optional<Clock::time_point> admit(const std::string& source, Clock::time_point now,
                                         Clock::time_point deadline);
  // Records the outcome of a check admit() admitted from `source`.
  void record(const std::string& source, Outcome outcome, Clock::time_point now);

 private:
  struct Source {
    int failures = 0;  // wrong tokens since window_start
    int checking = 0;  // checks admitted and not recorded yet
    Clock::time_point window_start{};
    Clock::time_point next_check{};
    Clock::time_point trusted_until{};
  };
  void forget_old(Clock::time_point now);  // bounds the table (under mu_)
  std::mutex mu_;
  std::map<std::string, Source> sources_;
  int failures_ = 0;  // wrong tokens from all sources since window_start_
  Clock::time_point window_start_{};
  Clock::time_point next_global_check_{};
};

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_AUTH_THROTTLE_H_
