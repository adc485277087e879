// SPDX-License-Identifier: Apache-2.0
#include "subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

extern char** environ;

namespace kiln::package {
namespace {

// Closes a descriptor when it goes out of scope, unless release()d or closed first.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }
  int get() const { return fd_; }
  // Closes now (idempotent).
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Frees posix_spawn's file actions on every path out of run_process().
class FileActions {
 public:
  FileActions() { ::posix_spawn_file_actions_init(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  ~FileActions() { ::posix_spawn_file_actions_destroy(&actions_); }
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

// Throws kiln::sdk::Error(KILN_ERROR_RUNTIME) with `what` and strerror(error).
[[noreturn]] void throw_errno(const std::string& what, int error) {
  throw sdk::Error(KILN_ERROR_RUNTIME, what + ": " + std::strerror(error));
}

}  // namespace

std::string ProcessResult::describe() const {
  if (exited) return "exit status " + std::to_string(exit_code);
  const char* name = ::strsignal(signal);
  return "killed by signal " + std::to_string(signal) +
         (name != nullptr ? " (" + std::string(name) + ")" : "");
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) throw sdk::Error(KILN_ERROR_VALUE, "no program to run");
  int pipe_fds[2];
  // O_CLOEXEC: a program another thread starts meanwhile must not inherit the write end, or
  // the read below would wait for that unrelated program to exit.
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("cannot create a pipe", errno);
  Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);

  FileActions actions;
  // dup2 clears close-on-exec on the copies, so the child keeps exactly these.
  if (::posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0) !=
          0 ||
      ::posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDOUT_FILENO) != 0 ||
      ::posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDERR_FILENO) != 0) {
    throw sdk::Error(KILN_ERROR_RUNTIME, "cannot prepare to run " + argv[0]);
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = 0;
  // glibc reports a failed exec (e.g. ENOENT) here, as the return value.
  const int spawn_error =
      ::posix_spawnp(&pid, args[0], actions.get(), nullptr, args.data(), environ);
  if (spawn_error != 0) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE,
                     "cannot run '" + argv[0] + "': " + std::strerror(spawn_error));
  }
  write_end.close();  // so that the read sees end-of-file once the child is done

  ProcessResult result;
  bool truncated = false;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // the exit status below still tells what happened
    }
    // Keep reading past the limit: a child blocked on a full pipe would never exit.
    const size_t room = kMaxOutput - result.output.size();
    if (static_cast<size_t>(n) > room) truncated = true;
    result.output.append(buffer, std::min(static_cast<size_t>(n), room));
  }
  if (truncated) result.output += "\n[output cut after " + std::to_string(kMaxOutput) + " bytes]";

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw_errno("cannot wait for " + argv[0], errno);
  }
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

std::vector<std::string> split_command(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

}  // namespace kiln::package
