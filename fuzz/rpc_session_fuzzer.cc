// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the RPC session protocol's readers (docs/rpc-protocol.md): the bytes
// are what a client sends on an established session — frame headers, message bodies, value
// encodings, handles, streamed payloads — fed to a real session server over a socket pair.
// Every input must end the session cleanly: no crash, no sanitizer report, no hang (the
// stream always ends, so the server must return). With the first byte odd the bytes are a
// client hello for the handshake reader instead. The client side's socket calls survive
// signals (libFuzzer's SIGALRM), so every input reaches the server whole.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "fuzz_setup.h"
#include "kiln/runtime.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/session_server.h"
#include "rpc/socket_io.h"

namespace {

kiln::Runtime& fuzz_runtime() {
  static kiln::Runtime* runtime = [] {
    setenv("KILN_LOG", "off", 0);
    kiln::RuntimeOptions options;
    options.read_environment = false;
    options.plugin_set = std::filesystem::path();  // no plugin: the core's host allocator
    options.search_install_prefix = false;
    return new kiln::Runtime(options);
  }();
  return *runtime;
}

std::unique_ptr<kiln::rpc::Connection> wrap(boost::asio::io_context& io, int fd) {
  boost::asio::ip::tcp::socket socket(io);
  socket.assign(boost::asio::ip::tcp::v4(), fd);
  return std::make_unique<kiln::rpc::Connection>(std::move(socket), "fuzz");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kiln::Runtime& runtime = fuzz_runtime();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    // Every session closes both ends: descriptors that run out in this process leaked.
    if (errno == EMFILE) {
      std::fprintf(stderr, "kiln fuzz: no descriptor left: the sessions leak them\n");
      std::abort();
    }
    kiln::fuzz::setup_failed("cannot create a socket pair", std::strerror(errno));
  }
  boost::asio::io_context io;
  auto server_end = wrap(io, fds[0]);
  // The client side writes the input, then half-closes, and drains whatever comes back.
  const auto write_input = [fd = fds[1], data, size] {
    (void)kiln::rpc::send_all(fd, data, size);  // the server may stop reading early: fine
    ::shutdown(fd, SHUT_WR);
    char sink[65536];
    while (kiln::rpc::retry_on_signal([&] { return ::recv(fd, sink, sizeof(sink), 0); }) > 0) {
    }
    ::close(fd);
  };
  std::thread client;
  try {
    client = std::thread(write_input);
  } catch (const std::system_error& e) {
    kiln::fuzz::setup_failed("cannot start the client thread", e.what());
  }
  if (data[0] & 1) {
    try {
      char first;
      server_end->read_exact(&first, 1, "mode byte");
      kiln::rpc::handshake::read_client_hello(*server_end);
    } catch (const kiln::Error&) {
    }
    server_end->shutdown();
  } else {
    kiln::rpc::SessionState state;
    state.conn = std::move(server_end);
    state.max_memory_bytes = 64 << 20;  // allocations are bounded like every other length
    // The parent of the session directories serve_session creates (and removes).
    static const std::filesystem::path work = [] {
      auto p =
          std::filesystem::temp_directory_path() / ("kiln-fuzz-rpc-" + std::to_string(getpid()));
      std::filesystem::create_directories(p);
      return p;
    }();
    state.max_handles = 4096;
    state.max_upload_bytes = 1 << 20;
    char mode;
    try {
      state.conn->read_exact(&mode, 1, "mode byte");
      kiln::rpc::serve_session(state, work, runtime);
    } catch (const kiln::Error&) {
      state.conn->shutdown();
    }
  }
  client.join();
  return 0;
}
