// SPDX-License-Identifier: Apache-2.0
#include "perf_counter.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::perf {

PerfCounter::PerfCounter(PerfCounter&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

PerfCounter& PerfCounter::operator=(PerfCounter&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

PerfCounter::~PerfCounter() { close(); }

void PerfCounter::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int PerfCounter::open(const PerfEvent& event, CountingScope scope, PerfCounter* counter) {
  perf_event_attr attr;
  // Zeroed in full: the kernel rejects (E2BIG) non-zero bytes past the layout it knows.
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = event.type;
  attr.config = event.config;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  attr.disabled = 0;  // counting starts now; start/stop only read
  attr.inherit = 1;
  const bool user_only = scope == CountingScope::kUserOnly;
  attr.exclude_kernel = user_only ? 1 : 0;
  attr.exclude_hv = user_only ? 1 : 0;
  // CLOEXEC: a program the host starts (a compiler, a subprocess) must not inherit counters.
  const long fd = ::syscall(SYS_perf_event_open, &attr, /*pid=*/0, /*cpu=*/-1, /*group_fd=*/-1,
                            PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return errno != 0 ? errno : EINVAL;
  *counter = PerfCounter(static_cast<int>(fd));
  return 0;
}

CounterReading PerfCounter::read(const char* event_name) const {
  uint64_t values[3] = {0, 0, 0};
  const ssize_t n = ::read(fd_, values, sizeof(values));
  if (n != static_cast<ssize_t>(sizeof(values))) {
    const int error = n < 0 ? errno : 0;
    throw sdk::Error(KILN_ERROR_RUNTIME,
                     std::string("reading perf counter '") + event_name + "' failed: " +
                         (n < 0 ? std::string(std::strerror(error))
                                : "short read of " + std::to_string(n) + " bytes"));
  }
  return CounterReading{values[0], values[1], values[2]};
}

}  // namespace kiln::perf
