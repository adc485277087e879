// SPDX-License-Identifier: Apache-2.0
// kiln/detail/wait_status.h.
#include "kiln/detail/wait_status.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstring>

namespace kiln::detail {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);  // glibc 2.32; strsignal's text is localised
  return abbrev != nullptr ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("died of {} (signal {})", signal_name(sig), sig);
  }
  return fmt::format("ended with wait status {}", status);
}

}  // namespace kiln::detail
