// SPDX-License-Identifier: Apache-2.0
// Helpers for the RPC tests: child processes (kiln tracker / kiln rpc-server / clients) that
// are always killed and reaped, and bounded waits.
#ifndef KILN_TESTS_RPC_RPC_TEST_UTIL_H_
#define KILN_TESTS_RPC_RPC_TEST_UTIL_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::test {

// A listening TCP socket on 127.0.0.1 (an ephemeral port) with `backlog`, which nothing
// accepts unless the test does: for peers that connect and then hear nothing.
struct LoopbackListener {
  explicit LoopbackListener(int backlog = 64) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(fd, backlog) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
    }
  }
  ~LoopbackListener() { ::close(fd); }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  int port() const { return ntohs(address.sin_port); }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&address); }

  int fd = -1;
  sockaddr_in address{};
};

// A TCP socket from loopback address `source` (any of 127.0.0.0/8: a client from another
// address, for per-address limits) connected to 127.0.0.1:`port`, with 10 s socket timeouts;
// -1 on failure.
int connect_from(const char* source, int port);

// Whether the peer closed `fd` by `deadline` (what it sent before is read and skipped).
bool closed_by(int fd, std::chrono::steady_clock::time_point deadline);

// The kiln command-line tool under test.
std::string kiln_cli();

// A child process started with posix_spawn, stdout and stderr going to a log file. The
// destructor sends SIGKILL and reaps it, so a failing test leaves nothing running.
class ChildProcess {
 public:
  // `argv[0]` is the program path. The log goes to a fresh file in the temporary directory.
  explicit ChildProcess(std::vector<std::string> argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` (no-op once reaped).
  void kill(int sig = SIGKILL);
  // Waits up to `timeout` for the child to exit; its exit code, or 128 + signal, or nullopt
  // when still running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  bool running();
  // Everything the child wrote so far.
  std::string log() const;
  const std::filesystem::path& log_path() const { return log_path_; }
  // Waits up to `timeout` for a line "listening on <host>:<port>" in the log; the port, or -1
  // when the child exited or the time passed.
  int wait_for_listen_port(std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::filesystem::path log_path_;
};

// In a sanitizer build (CI's second pass), appends `option` ("handle_segv=0") to
// $ASAN_OPTIONS, so that the children this test process starts from now on run with it; a
// no-op in other builds, whose children ignore ASAN_OPTIONS anyway.
void add_asan_option_for_children(const char* option);

// Polls `predicate` every 20 ms until it holds or `timeout` passes; returns whether it held.
bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

// The lines of a `kiln run` config that times the example vector_add on the CPU (2 x 2 runs,
// 64 floats), up to its `remote:` section, which each test writes after them.
std::string vector_add_run_config();

// One process as /proc/<pid>/stat describes it.
struct ProcessStat {
  pid_t pid = -1;
  std::string comm;  // the name in parentheses (at most 15 characters)
  char state = 0;    // 'R', 'S', ... 'Z' for a zombie
  pid_t ppid = -1;
};
// The processes whose parent is `parent` now, zombies included.
std::vector<ProcessStat> children_of(pid_t parent);

// Starts `kiln tracker --port 0` and returns it with its port.
struct StartedProcess {
  std::unique_ptr<ChildProcess> process;
  int port = -1;
};
StartedProcess start_tracker(std::vector<std::string> extra_args = {});
// Starts `kiln rpc-server --port 0 <extra_args>` and waits for its port.
StartedProcess start_rpc_server(std::vector<std::string> extra_args = {});

}  // namespace kiln::test

#endif  // KILN_TESTS_RPC_RPC_TEST_UTIL_H_
