// SPDX-License-Identifier: Apache-2.0
#include "warn_once.h"

#include "kiln/c/abi.h"
#include "kiln/sdk/plugin.hpp"

namespace kiln::perf {

bool WarnOnce::warn(const std::string& key, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(key).second) return false;
  }
  // Outside the lock: the host's logger may be slow, and nothing here needs ordering.
  sdk::log(KILN_LOG_WARN, "%s", message.c_str());
  return true;
}

}  // namespace kiln::perf
