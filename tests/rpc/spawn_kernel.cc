// SPDX-License-Identifier: Apache-2.0
// libspawn.so: kernels that start processes the way uploaded code may, and leave them running
// (issue 37, item 3). relay_test.cc checks that the session's whole process tree ends with the
// session and that nothing it started keeps the session's socket (and the server's slot).
//   orphan(detach)  forks twice: the grandchild runs `sleep 126`, orphaned at once (its parent
//                   exits), with every descriptor this process holds that is not close-on-exec;
//                   with detach != 0 it calls setsid() first, leaving the session's process
//                   group. Returns the grandchild's pid.
//   shell()         system("sleep 126 &"), as the attack did; returns system's status.
//   leave(how)      ends the session's process from inside a call, as uploaded code may:
//                   0 `_exit(3)`; 1 `exit(3)` (atexit handlers and static destructors run while
//                   the session's other threads still do); 2 `abort()`. Never returns.
//                   session_slot_property_test.cc checks that the slot comes back.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "kiln/sdk/kernel.hpp"

namespace {

int64_t orphan(int64_t detach) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "pipe failed");
  const pid_t child = ::fork();
  if (child < 0) throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "fork failed");
  if (child == 0) {
    if (detach != 0) ::setsid();
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::execl("/bin/sleep", "sleep", "126", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const int64_t pid = grandchild;
    (void)!::write(report[1], &pid, sizeof(pid));
    ::_exit(0);
  }
  ::close(report[1]);
  int64_t pid = -1;
  while (::read(report[0], &pid, sizeof(pid)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (pid <= 0) throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "the orphan did not start");
  return pid;
}

int64_t shell() { return std::system("sleep 126 &"); }

int64_t leave(int64_t how) {
  if (how == 0) ::_exit(3);
  if (how == 1) std::exit(3);
  std::abort();
}

}  // namespace

KILN_EXPORT_FUNCTION(orphan, orphan);
KILN_EXPORT_FUNCTION(shell, shell);
KILN_EXPORT_FUNCTION(leave, leave);
KILN_KERNEL_LIBRARY("spawn", "orphan");
