// SPDX-License-Identifier: Apache-2.0
// Logs a warning the first time its key comes up, so that conditions met on every profiled
// call or every init (an unavailable event, an overflow) are reported once, not per call.
#ifndef KILN_PLUGINS_PERF_WARN_ONCE_H_
#define KILN_PLUGINS_PERF_WARN_ONCE_H_

#include <mutex>
#include <set>
#include <string>

namespace kiln::perf {

// A set of keys already warned about. Thread-safe: collectors may be initialised and stopped
// on several threads at once.
class WarnOnce {
 public:
  // Logs `message` through the host (kiln::sdk::log at KILN_LOG_WARN) if `key` has not been
  // seen before by this object, and remembers `key`. Returns whether it logged. Throws only
  // std::bad_alloc.
  bool warn(const std::string& key, const std::string& message);

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_WARN_ONCE_H_
