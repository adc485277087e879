// SPDX-License-Identifier: Apache-2.0
#include "worker_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "kiln/detail/wait_status.h"
#include "kiln/error.h"
#include "worker_events.h"

extern char** environ;

namespace kiln::conformance {
namespace {

using Clock = std::chrono::steady_clock;

// How often the supervisor looks at its worker between events: the latency of noticing that a
// worker died or passed its deadline.
constexpr int kPollMs = 100;

// ---- SIGINT / SIGTERM: caught while workers run, so that the worker group dies with the run ----

volatile sig_atomic_t g_caught_signal = 0;
int g_signal_pipe_write = -1;

void on_stop_signal(int sig) {
  if (g_caught_signal == 0) g_caught_signal = sig;
  const int saved_errno = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

// Catches SIGINT and SIGTERM for its lifetime (a self-pipe wakes poll), then restores the
// previous handlers, so that a second Ctrl-C while the report is written acts as usual.
class StopSignals {
 public:
  StopSignals() {
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw RuntimeError(fmt::format("kiln-conformance: pipe2: {}", std::strerror(errno)));
    }
    g_caught_signal = 0;
    g_signal_pipe_write = pipe_[1];
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    // A signal the tool was started ignoring (SIGINT under nohup or `cmd &`) stays ignored.
    ::sigaction(SIGINT, nullptr, &old_int_);
    ::sigaction(SIGTERM, nullptr, &old_term_);
    if (old_int_.sa_handler != SIG_IGN) ::sigaction(SIGINT, &action, nullptr);
    if (old_term_.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &action, nullptr);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_signal_pipe_write = -1;
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int fd() const { return pipe_[0]; }
  int caught() const { return g_caught_signal; }

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// ---- one worker process ----

// A running worker: its pid, which is also its process group, and the read end of its events.
struct Worker {
  pid_t pid = -1;
  int events_fd = -1;
};

// Starts /proc/self/exe with `argv` in a process group of its own (so that killing the group
// also kills whatever a plugin started), its events pipe on kWorkerEventFd and SIGINT, SIGTERM
// and SIGPIPE at their defaults. posix_spawn, not fork: the parent is multi-threaded (plugins'
// threads), and only exec gives the worker a clean process.
Worker spawn_worker(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw RuntimeError(
        fmt::format("kiln-conformance: pipe2 for a worker: {}", std::strerror(errno)));
  }
  // Away from kWorkerEventFd, so that the dup2 below always makes a copy without O_CLOEXEC.
  const int write_end = ::fcntl(fds[1], F_DUPFD_CLOEXEC, kWorkerEventFd + 7);
  ::close(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end, kWorkerEventFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The worker shares stdout and stderr: what the parent printed goes first.
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(write_end);
  if (rc != 0) {
    ::close(fds[0]);
    throw RuntimeError(
        fmt::format("kiln-conformance: cannot start a worker (posix_spawn of "
                    "/proc/self/exe): {}",
                    std::strerror(rc)));
  }
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return Worker{pid, fds[0]};
}

// Whether `pid` has ended, without reaping it: its process group stays valid for the kill that
// follows.
bool has_ended(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

// Kills the worker's process group and reaps the worker; returns its wait status. Gives up
// after a few seconds on a worker the kernel will not let die (a driver call in D state): the
// run must still end.
int kill_and_reap(const Worker& worker) {
  ::kill(-worker.pid, SIGKILL);
  int status = 0;
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (true) {
    const pid_t r = ::waitpid(worker.pid, &status, WNOHANG);
    if (r == worker.pid) return status;
    if (r < 0 && errno != EINTR) return status;
    if (Clock::now() > until) return W_EXITCODE(0, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Reads what is in `fd` now into `buffer`; false on end of file or an error.
bool read_available(int fd, std::string& buffer) {
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// `filter` less the tests in `ended`, as GoogleTest reads filters: "POSITIVE[-NEGATIVE]", each
// a ':'-separated list of patterns.
std::string filter_without(const std::string& filter, const std::vector<std::string>& ended) {
  if (ended.empty()) return filter;
  const size_t dash = filter.find('-');
  std::string positive = dash == std::string::npos ? filter : filter.substr(0, dash);
  std::string negative = dash == std::string::npos ? "" : filter.substr(dash + 1);
  if (positive.empty()) positive = "*";
  for (const std::string& name : ended) {
    if (!negative.empty()) negative += ":";
    negative += name;
  }
  return positive + "-" + negative;
}

// "plugin stub (library /x/libstub.so) on device stub:0": where a test of `suite` ran.
std::string where(const std::string& suite, const std::vector<Target>& targets) {
  const auto it = std::find_if(targets.begin(), targets.end(),
                               [&suite](const Target& t) { return t.suite() == suite; });
  if (it == targets.end()) return "an unknown target";
  const std::string plugin = it->plugin ? fmt::format("plugin {} (library {})", it->plugin->name,
                                                      it->plugin->library.string())
                                        : std::string("no plugin");
  if (it->kind == Target::Kind::kCollector) {
    return fmt::format("{}, collector {} on the host (cpu:0)", plugin, it->name);
  }
  return fmt::format("{} on device {}:0", plugin, it->name);
}

// What one worker did and how it ended.
struct WorkerLife {
  std::optional<TestOutcome> current;  // started, not ended
  Clock::time_point current_since;
  bool started_a_test = false;
  bool done = false;              // wrote the done event: every test it was given ended
  bool test_timed_out = false;    // killed: `current` passed its deadline
  bool worker_timed_out = false;  // killed: no event within the deadline outside a test
  int interrupted_by = 0;         // killed: the run got SIGINT/SIGTERM
  int wait_status = 0;
};

// Records `outcome` in `run`, replacing an earlier outcome of the same test (--gtest_repeat).
void record(WorkerRun& run, std::vector<std::string>& ended, TestOutcome outcome) {
  const std::string name = outcome.full_name();
  const auto it = std::find_if(run.outcomes.begin(), run.outcomes.end(),
                               [&name](const TestOutcome& o) { return o.full_name() == name; });
  if (it != run.outcomes.end()) {
    *it = std::move(outcome);
    return;
  }
  run.outcomes.push_back(std::move(outcome));
  ended.push_back(name);
}

// Watches `worker` until it ends or is killed (deadline, signal), recording each test that
// ends in `run` and `ended`.
WorkerLife supervise(const Worker& worker, const WorkerOptions& options, const StopSignals& signals,
                     WorkerRun& run, std::vector<std::string>& ended) {
  WorkerLife life;
  std::string buffer;
  bool events_open = true;
  Clock::time_point last_event = Clock::now();
  const auto deadline = std::chrono::duration<double>(options.test_timeout_s);

  auto handle_lines = [&] {
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      last_event = Clock::now();
      WorkerEvent event;
      try {
        event = decode_worker_event(line);
      } catch (const Error& e) {
        run.run_errors.push_back(e.what());
        continue;
      }
      switch (event.kind) {
        case WorkerEvent::Kind::kStart:
          life.current = event.test;
          life.current_since = last_event;
          life.started_a_test = true;
          break;
        case WorkerEvent::Kind::kEnd:
          life.current.reset();
          record(run, ended, std::move(event.test));
          break;
        case WorkerEvent::Kind::kDone:
          life.done = true;
          break;
      }
    }
  };

  while (true) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {events_open ? worker.events_fd : -1, POLLIN, 0}};
    ::poll(fds, 2, kPollMs);
    if (signals.caught() != 0) {
      life.interrupted_by = signals.caught();
      life.wait_status = kill_and_reap(worker);
      // Tests that ended before the signal keep their results.
      read_available(worker.events_fd, buffer);
      handle_lines();
      return life;
    }
    if (events_open && fds[1].revents != 0) {
      events_open = read_available(worker.events_fd, buffer);
      handle_lines();
    }
    if (has_ended(worker.pid)) {
      // Its events are all in the pipe: read the rest before judging how it ended.
      life.wait_status = kill_and_reap(worker);
      read_available(worker.events_fd, buffer);
      handle_lines();
      return life;
    }
    if (options.test_timeout_s > 0) {
      const Clock::time_point now = Clock::now();
      if (life.current && now - life.current_since > deadline) {
        life.test_timed_out = true;
        life.wait_status = kill_and_reap(worker);
        return life;
      }
      if (!life.current && !life.done && now - last_event > deadline) {
        life.worker_timed_out = true;
        life.wait_status = kill_and_reap(worker);
        return life;
      }
    }
  }
}

// The crashed outcome of `test`, which was running when its worker died or was killed.
TestOutcome crashed(TestOutcome test, const std::string& what, Clock::time_point since,
                    const std::vector<Target>& targets) {
  test.status = TestOutcome::Status::kCrashed;
  test.elapsed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
  test.message =
      fmt::format("{} while running {}, {}", what, test.full_name(), where(test.suite, targets));
  return test;
}

}  // namespace

WorkerRun run_tests_in_workers(const WorkerOptions& options, const std::vector<Target>& targets) {
  WorkerRun run;
  std::vector<std::string> ended;  // full names of the tests that ended or crashed
  StopSignals signals;
  while (true) {
    std::vector<std::string> argv = options.argv;
    argv.push_back("--gtest_filter=" + filter_without(options.gtest_filter, ended));
    argv.push_back("--worker");
    argv.push_back(std::to_string(::getpid()));
    const Worker worker = spawn_worker(argv);
    WorkerLife life = supervise(worker, options, signals, run, ended);
    ::close(worker.events_fd);

    if (life.interrupted_by != 0) {
      run.interrupted_by = life.interrupted_by;
      return run;
    }
    const std::string how = kiln::detail::describe_wait_status(life.wait_status);
    if (life.current) {
      const std::string what =
          life.test_timed_out
              ? fmt::format(
                    "did not finish within {} s (--test-timeout); its worker process "
                    "group was killed (SIGKILL)",
                    options.test_timeout_s)
              : fmt::format("the worker process {}", how);
      TestOutcome outcome = crashed(*life.current, what, life.current_since, targets);
      std::printf("[  CRASHED ] %s (%lld ms)\n%s\nkiln-conformance: continuing in a fresh worker\n",
                  outcome.full_name().c_str(), static_cast<long long>(outcome.elapsed_ms),
                  outcome.message.c_str());
      std::fflush(stdout);
      record(run, ended, std::move(outcome));
      continue;
    }
    if (life.done) {
      // Every test ended. A worker killed by a signal after that crashed in a plugin's
      // shutdown or at exit, which no test covers: still a failure of the run.
      if (WIFSIGNALED(life.wait_status) && WTERMSIG(life.wait_status) != SIGKILL) {
        run.run_errors.push_back(fmt::format(
            "after its last test the worker process {} (in a plugin's shutdown or at exit)", how));
      }
      return run;
    }
    // Died or hung outside any test: while starting up (loading the plugins, resolving the
    // targets) or between two tests.
    const std::string phase =
        life.started_a_test ? "between two tests" : "while starting up, before its first test";
    run.run_errors.push_back(
        life.worker_timed_out
            ? fmt::format("a worker process sent nothing for {} s (--test-timeout) {} and was "
                          "killed (SIGKILL)",
                          options.test_timeout_s, phase)
            : fmt::format("a worker process {} {}", how, phase));
    std::printf("kiln-conformance: %s\n", run.run_errors.back().c_str());
    std::fflush(stdout);
    // A worker that ran no test would fail the same way again: stop, with the tests left unrun.
    if (!life.started_a_test) return run;
  }
}

}  // namespace kiln::conformance
