// SPDX-License-Identifier: Apache-2.0
#include "rpc/rpc_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kiln::test {

// KILN_TEST_CLI runs the process tests against another build of `kiln` (e.g. to check that a
// regression test fails on the code before its fix).
std::string kiln_cli() {
  const char* other = std::getenv("KILN_TEST_CLI");
  return other != nullptr && *other != '\0' ? other : KILN_CLI_PATH;
}

ChildProcess::ChildProcess(std::vector<std::string> argv) {
  static int counter = 0;
  log_path_ =
      std::filesystem::temp_directory_path() /
      ("kiln_rpc_test_" + std::to_string(getpid()) + "_" + std::to_string(++counter) + ".log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed: " + strerror(rc));
}

ChildProcess::~ChildProcess() {
  kill(SIGKILL);
  wait_for(std::chrono::seconds(10));
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

void ChildProcess::kill(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  wait_until(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      timeout);
  return status_;
}

bool ChildProcess::running() { return !wait_for(std::chrono::milliseconds(0)).has_value(); }

std::string ChildProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ChildProcess::wait_for_listen_port(std::chrono::milliseconds timeout) {
  static const std::regex kListening("listening on [^\\s]*:([0-9]+)");
  int port = -1;
  wait_until(
      [&] {
        std::smatch m;
        const std::string text = log();
        if (std::regex_search(text, m, kListening)) {
          port = std::stoi(m[1].str());
          return true;
        }
        return !running();
      },
      timeout);
  return port;
}

void add_asan_option_for_children([[maybe_unused]] const char* option) {
#if defined(__SANITIZE_ADDRESS__)
  const char* inherited = std::getenv("ASAN_OPTIONS");
  std::string options = inherited ? inherited : "";
  options += std::string(options.empty() ? "" : ":") + option;
  ::setenv("ASAN_OPTIONS", options.c_str(), 1);
#endif
}

bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (predicate()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace {
StartedProcess start(std::vector<std::string> argv) {
  StartedProcess out;
  out.process = std::make_unique<ChildProcess>(std::move(argv));
  out.port = out.process->wait_for_listen_port();
  if (out.port < 0) {
    throw std::runtime_error("the child did not report a listening port; its log:\n" +
                             out.process->log());
  }
  return out;
}
}  // namespace

StartedProcess start_tracker(std::vector<std::string> extra_args) {
  std::vector<std::string> argv = {kiln_cli(), "tracker", "--port", "0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  return start(std::move(argv));
}

std::string vector_add_run_config() {
  return std::string("module: ") + KILN_EXAMPLE_KERNEL_DIR +
         "/libvector_add.so\n"
         "function: vector_add\ndevice: cpu\nexport: tar\n"
         "evaluator: {number: 2, repeat: 2, min_repeat_ms: 0}\n"
         "inputs:\n  - {name: a, shape: [64], dtype: float32, init: arange}\n"
         "  - {name: b, shape: [64], dtype: float32, init: ones}\n"
         "  - {name: out, shape: [64], dtype: float32, init: zeros}\n"
         "  - {name: alpha, scalar: 2.0}\n";
}

std::vector<ProcessStat> children_of(pid_t parent) {
  std::vector<ProcessStat> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone meanwhile
    // The name may hold spaces and parentheses: it ends at the last ')'.
    const size_t open_paren = line.find('(');
    const size_t close_paren = line.rfind(')');
    if (open_paren == std::string::npos || close_paren == std::string::npos) continue;
    ProcessStat p;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close_paren + 1, " %c %d", &p.state, &ppid) != 2 ||
        ppid != parent) {
      continue;
    }
    p.pid = std::stoi(name);
    p.ppid = ppid;
    p.comm = line.substr(open_paren + 1, close_paren - open_paren - 1);
    out.push_back(std::move(p));
  }
  return out;
}

StartedProcess start_rpc_server(std::vector<std::string> extra_args) {
  std::vector<std::string> argv = {kiln_cli(), "rpc-server", "--port", "0",
                                   "--enable-test-functions"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  return start(std::move(argv));
}

int connect_from(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  const timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

bool closed_by(int fd, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[512];
    const ssize_t got = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

}  // namespace kiln::test
