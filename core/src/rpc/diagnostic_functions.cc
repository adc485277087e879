// SPDX-License-Identifier: Apache-2.0
#include "rpc/diagnostic_functions.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "kiln/error.h"
#include "kiln/tensor.h"
#include "rpc/session_server.h"

namespace kiln::rpc {

namespace {

using Clock = std::chrono::steady_clock;

std::unordered_map<std::string, Function> make_diagnostic_functions() {
  std::unordered_map<std::string, Function> table;
  const auto add = [&table](Function f) {
    std::string name = f.name();
    table.emplace(std::move(name), std::move(f));
  };
  add(echo_function());
  add(Function::from_typed("rpc.test.addone", [](int64_t x) { return x + 1; }));
  add(Function::from_typed("rpc.test.strcat", [](const std::string& s, int64_t x) {
    return s + ":" + std::to_string(x);
  }));
  add(Function::from_typed("rpc.test.sleep", [](double seconds) {
    // In steps, so that a session timeout or a server stop ends it.
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    while (Clock::now() < end && !call_cancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }));
  // Like a kernel: does not look at call_cancelled(), so that stop()'s bound is testable.
  add(Function::from_typed("rpc.test.block", [](double seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }));
  // Host memory from the core's own allocator: these functions are process-wide, so they
  // belong to no server's Runtime.
  add(Function::from_typed("rpc.test.alloc", [](int64_t nbytes) {
    return Tensor::empty_host({nbytes}, DataType::UInt(8));
  }));
  add(Function::from_typed("rpc.test.raise",
                           [](const std::string& message) { throw ValueError(message); }));
  add(Function::from_packed("rpc.test.nop", [](const Any*, int32_t) { return Any(); }));
  // A crash, as a faulty kernel would: the session's process dies, the server goes on.
  add(Function::from_packed("rpc.test.crash", [](const Any*, int32_t) -> Any {
    // At its default action: a sanitizer's handler would turn it into an exit code.
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
    return Any();
  }));
  // What uploaded code could read from its environment.
  add(Function::from_typed("rpc.test.getenv", [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v != nullptr ? v : "");
  }));
  // What uploaded code could read from a file (any path: the test of the session's reach).
  add(Function::from_typed("rpc.test.read_file", [](const std::string& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError(fmt::format("cannot open: {}", std::strerror(errno)));
    std::string out(4096, '\0');
    const ssize_t n = ::read(fd, out.data(), out.size());
    const int err = errno;
    ::close(fd);
    if (n < 0) throw RuntimeError(fmt::format("cannot read: {}", std::strerror(err)));
    out.resize(static_cast<size_t>(n));
    return out;
  }));
  add(Function::from_packed(
      "rpc.test.pid", [](const Any*, int32_t) { return Any(static_cast<int64_t>(::getpid())); }));
  return table;
}

}  // namespace

// Both are made once and never destroyed: a call left running after a stop may still use them
// while the process exits.
Function echo_function() {
  static const Function* const echo = new Function(Function::from_packed(
      kEchoFunctionName, [](const Any* args, int32_t n) { return n > 0 ? args[0] : Any(); }));
  return *echo;
}

std::optional<Function> diagnostic_function(const std::string& name) {
  static const auto* const table =
      new std::unordered_map<std::string, Function>(make_diagnostic_functions());
  const auto it = table->find(name);
  if (it == table->end()) return std::nullopt;
  return it->second;
}

}  // namespace kiln::rpc
