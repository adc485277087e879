// SPDX-License-Identifier: Apache-2.0
#include "open_error.h"

#include <linux/perf_event.h>

#include <cerrno>
#include <cstring>

namespace kiln::perf {
namespace {

// "perf_event_paranoid=2", or "perf_event_paranoid unknown" when it could not be read.
std::string paranoid_text(std::optional<int> paranoid) {
  return paranoid ? "perf_event_paranoid=" + std::to_string(*paranoid)
                  : std::string("perf_event_paranoid unknown");
}

// Why `error` keeps `event` from being counted, without the event name.
std::string reason(const PerfEvent& event, int error, bool pmu_missing) {
  const bool hardware = event.type == PERF_TYPE_HARDWARE;
  const std::string code = " (" + errno_name(error) + ")";
  switch (error) {
    case ENOENT:
    case ENODEV:
      if (!hardware) return "not supported by this kernel" + code;
      return (pmu_missing ? "no hardware PMU exposed" : "not counted by this CPU's PMU") + code;
    case EOPNOTSUPP:
      return "not supported by " + std::string(hardware ? "this CPU's PMU" : "this kernel") + code;
    case EACCES:
      return "not permitted" + code +
             "; allow it with `sysctl kernel.perf_event_paranoid=1` or CAP_PERFMON";
    case EPERM:
      return "not permitted" + code +
             "; perf_event_open may be blocked (e.g. by a container's seccomp profile)";
    case ENOSYS:
      return "perf_event_open is not available in this kernel" + code;
    case EMFILE:
    case ENFILE:
      return "too many open files" + code;
    default:
      return std::string(std::strerror(error)) + code;
  }
}

}  // namespace

std::string open_error_message(const PerfEvent& event, int error, std::optional<int> paranoid,
                               bool pmu_missing) {
  return "event '" + std::string(event.name) +
         "' unavailable: " + reason(event, error, pmu_missing) + "; " + paranoid_text(paranoid);
}

std::string kernel_only_message(const PerfEvent& event, int error, std::optional<int> paranoid) {
  return "event '" + std::string(event.name) +
         "' unavailable: it happens in kernel mode only, which this process may not count (" +
         errno_name(error) + " without exclude_kernel; with it the count is always 0); " +
         paranoid_text(paranoid) +
         "; allow it with `sysctl kernel.perf_event_paranoid=1` or CAP_PERFMON";
}

std::string errno_name(int error) {
  switch (error) {
    case ENOENT:
      return "ENOENT";
    case ENODEV:
      return "ENODEV";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case EINVAL:
      return "EINVAL";
    case ENOSYS:
      return "ENOSYS";
    case EMFILE:
      return "EMFILE";
    case ENFILE:
      return "ENFILE";
    case EBUSY:
      return "EBUSY";
    case E2BIG:
      return "E2BIG";
    case ENOMEM:
      return "ENOMEM";
    case ENOSPC:
      return "ENOSPC";
    default:
      return "errno " + std::to_string(error);
  }
}

}  // namespace kiln::perf
