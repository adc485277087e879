// SPDX-License-Identifier: Apache-2.0
// run_supervised (supervised.h). Signals are taken synchronously (sigtimedwait) so that the
// parent never dies between the child's start and its end, and forwards what it receives.
#include "supervised.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "kiln/detail/wait_status.h"
#include "kiln/error.h"

extern char** environ;

namespace kiln::tool {

int run_supervised(const std::vector<std::string>& args, const std::string& what) {
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&forwarded, sig);
  sigset_t previous;
  ::pthread_sigmask(SIG_BLOCK, &forwarded, &previous);

  std::vector<std::string> argv_storage = {"kiln"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &previous);  // the child gets the mask the user gave kiln
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t child = -1;
  std::vector<char*> envp;
  std::string marker = "KILN_SUPERVISED=1";  // the child's crash note leaves the remedy to us
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(marker.data());
  envp.push_back(nullptr);
  const int spawned =
      ::posix_spawn(&child, "/proc/self/exe", nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw RuntimeError(fmt::format("cannot start the worker process: {}", std::strerror(spawned)));
  }

  int last_forwarded = 0;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    const timespec tick{0, 50 * 1000 * 1000};
    const int sig = ::sigtimedwait(&forwarded, nullptr, &tick);
    if (sig > 0) {
      last_forwarded = sig;
      ::kill(child, sig);
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WTERMSIG(status);
  if (sig == last_forwarded) {
    // Interrupted by the user: end as an interrupted kiln would.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  std::fprintf(stderr, "kiln: %s %s in its worker process\n", what.c_str(),
               detail::describe_wait_status(status).c_str());
  return kExitRuntime;
}

}  // namespace kiln::tool
