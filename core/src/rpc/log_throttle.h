// SPDX-License-Identifier: Apache-2.0
// Rate-limited logging for events a peer can provoke at will (refused handshakes, closed
// flooding connections): a flood must not fill the disk or drown the log.
#ifndef KILN_SRC_RPC_LOG_THROTTLE_H_
#define KILN_SRC_RPC_LOG_THROTTLE_H_

#include <chrono>
#include <mutex>
#include <string>

#include "kiln/logging.h"

namespace kiln::rpc {

// Logs the first `burst` events of each `interval` as they come; the rest of that interval
// are counted, and one summary line ("... and N more <what> in the last <interval> s") is
// logged when the next event after it arrives, or at flush(). Thread-safe.
class LogThrottle {
 public:
  // `source` as for kiln::log; `what` names the events in the summary ("refused handshakes").
  LogThrottle(LogLevel level, std::string source, std::string what, int burst = 10,
              std::chrono::seconds interval = std::chrono::seconds(10));
  ~LogThrottle() { flush(); }
  LogThrottle(const LogThrottle&) = delete;
  LogThrottle& operator=(const LogThrottle&) = delete;

  // Logs `message` now, or counts it for the summary.
  void log(const std::string& message);
  // Logs the summary of what was counted, if anything.
  void flush();
  // Events counted but not logged so far in this interval (for tests).
  long suppressed() const;

 private:
  void roll(std::chrono::steady_clock::time_point now);  // under mu_
  const LogLevel level_;
  const std::string source_;
  const std::string what_;
  const int burst_;
  const std::chrono::seconds interval_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point start_{};
  int logged_ = 0;
  long suppressed_ = 0;
};

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_LOG_THROTTLE_H_
