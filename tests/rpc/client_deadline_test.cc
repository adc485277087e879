// SPDX-License-Identifier: Apache-2.0
// The client against a farm server that cannot be trusted (issue 37 item 6): a fake server on
// loopback, a raw socket that speaks just enough of the session protocol (the hello, then
// frames), drips its replies one byte at a time. The client's wait for a reply is one deadline
// for the whole reply (the session timeout plus 5 s grace, plus its size at 1 MiB/s), not a
// limit per read that every byte renews; under TLS too, where one record can be dripped byte
// by byte. A `kiln run` sweep's remote points are bounded by --point-timeout even where the
// session has no timeout.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/rpc_test_util.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace client_deadline_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;
const std::string kToken = "drip-token-0123456789abcdef";

// A whole Return frame holding one string of `n` characters: what a ListDir of one file
// answers.
std::vector<uint8_t> return_frame(size_t n) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.u32(1);
  wire::encode_plain_value(w, Any(std::string(n, 'a')));
  std::vector<uint8_t> frame(wire::kFrameHeaderBytes);
  const uint64_t length = 4 + body.size();
  const auto code = static_cast<uint32_t>(wire::Code::kReturn);
  std::memcpy(frame.data(), &length, 8);
  std::memcpy(frame.data() + 8, &code, 4);
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

// A fake farm server on 127.0.0.1: every connection gets the hello (TLS keyed by `token`
// first, when given), then every request (FreeHandle and Shutdown aside) is answered with
// `reply`, one byte every `period`: as raw bytes on the socket, so that under TLS one record
// arrives a byte at a time. Stops (and joins its threads) when destroyed.
class DrippingServer {
 public:
  DrippingServer(std::vector<uint8_t> reply, std::chrono::milliseconds period,
                 std::string token = {})
      : reply_(std::move(reply)), period_(period), token_(std::move(token)) {
    if (!token_.empty()) {
      tls_ = std::make_unique<tls::Context>(tls::Context::Side::kServer, tls::Purpose::kSession,
                                            token_);
    }
    accepting_ = std::thread([this] { accept_loop(); });
  }
  ~DrippingServer() {
    stop_ = true;
    accepting_.join();
    std::lock_guard lock(mu_);
    for (std::thread& t : sessions_) t.join();
  }
  DrippingServer(const DrippingServer&) = delete;
  DrippingServer& operator=(const DrippingServer&) = delete;

  int port() const { return listener_.port(); }
  // Connections accepted so far.
  int accepted() const { return accepted_; }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_.fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int fd = ::accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      std::lock_guard lock(mu_);
      sessions_.emplace_back([this, fd] {
        try {
          serve(fd);
        } catch (const std::exception&) {
          // The client went away (or the test is over): nothing to serve.
        }
      });
    }
  }

  // Sleeps `period_` unless the server stops meanwhile; false when it stops.
  bool pause() {
    for (auto left = period_; left > 0ms; left -= 10ms) {
      if (stop_) return false;
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
    return !stop_;
  }

  void serve(int fd) {
    auto conn = Connection::adopt(fd, "fake-client");
    conn->set_timeouts(5s, 5s);
    if (tls_) conn->start_tls(*tls_, Clock::now() + 5s);
    handshake::read_client_hello(*conn);
    handshake::send_server_hello(*conn, wire::HelloStatus::kAccepted, "server:drip");
    conn->set_timeouts(200ms, 5s);
    while (!stop_) {
      Connection::FrameHeader h;
      try {
        h = conn->read_frame_header(UINT64_MAX >> 1);
      } catch (const ConnectionError& e) {
        if (e.timed_out()) continue;  // idle: look at stop_ again
        return;
      }
      conn->set_timeouts(5s, 5s);
      conn->skip(h.body_length(), "a request");
      conn->set_timeouts(200ms, 5s);
      if (h.code == static_cast<uint32_t>(wire::Code::kShutdown)) return;
      if (h.code == static_cast<uint32_t>(wire::Code::kFreeHandle)) continue;
      drip(*conn);
    }
  }

  // Writes reply_ a byte at a time. Under TLS the reply is encrypted as one record first (the
  // session writes into a socket pair in place of the client's socket), then that record's
  // bytes are dripped on the client's socket.
  void drip(Connection& conn) {
    std::vector<uint8_t> wire_bytes = reply_;
    const int client = conn.fd();
    int saved = -1;
    if (tls_) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return;
      saved = ::dup(client);
      ::dup2(pair[0], client);  // the TLS session now writes into the pair
      ::close(pair[0]);
      conn.write_all(reply_.data(), reply_.size());
      wire_bytes.clear();
      uint8_t buffer[4096];
      ssize_t got = 0;
      while ((got = ::recv(pair[1], buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) {
        wire_bytes.insert(wire_bytes.end(), buffer, buffer + got);
      }
      ::close(pair[1]);
      ::dup2(saved, client);  // and reads the client again
      ::close(saved);
    }
    for (uint8_t byte : wire_bytes) {
      if (!pause()) return;
      if (::send(client, &byte, 1, MSG_NOSIGNAL) != 1) return;
    }
  }

  const std::vector<uint8_t> reply_;
  const std::chrono::milliseconds period_;
  const std::string token_;
  std::unique_ptr<tls::Context> tls_;
  kiln::test::LoopbackListener listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<std::thread> sessions_;
  std::thread accepting_;  // last: it starts once the members above exist
};

// How long `f` took to throw E (a failure when it returned or threw something else).
template <typename E>
Clock::duration time_to_throw(const std::function<void()>& f) {
  const auto start = Clock::now();
  EXPECT_THROW(f(), E);
  return Clock::now() - start;
}

// A reply of 60 bytes at 2 bytes a second takes 30 s; a session timeout of 0.5 s gives the
// whole reply 5.5 s. Before the deadline, the limit was per read (5.5 s, renewed by every
// byte) and the call waited out the whole drip.
TEST(ClientDeadline, AReplyDrippedByteByByteEndsAtTheSessionTimeoutNotPerByte) {
  const std::vector<uint8_t> reply = return_frame(40);
  ASSERT_GE(reply.size(), 60u);
  DrippingServer server(reply, 500ms);
  ConnectOptions options;
  options.session_timeout_s = 0.5;
  RPCSession session = connect("127.0.0.1", server.port(), options);
  const auto took = time_to_throw<RPCSessionTimeoutError>([&] { session.listdir("somewhere"); });
  EXPECT_GE(took, 5s) << "the session timeout plus its 5 s grace first";
  EXPECT_LT(took, 15s) << "one deadline for the whole reply (5.5 s), not one per byte";
  EXPECT_TRUE(session.closed());
}

// The same under TLS, where each byte of one record is dripped: a blocking SSL_read would
// read the record a piece at a time, each piece with the whole per-read limit.
TEST(ClientDeadline, ATlsRecordDrippedByteByByteEndsAtTheSessionTimeout) {
  DrippingServer server(return_frame(40), 250ms, kToken);
  ConnectOptions options;
  options.session_timeout_s = 0.5;
  options.token = kToken;
  RPCSession session = connect("127.0.0.1", server.port(), options);
  const auto took = time_to_throw<RPCSessionTimeoutError>([&] { session.listdir("somewhere"); });
  EXPECT_GE(took, 5s);
  EXPECT_LT(took, 15s) << "one deadline for the whole reply, whatever TLS reads";
}

// A sweep of two remote points, two at once (--jobs 2), on a farm whose only server drips
// every reply and whose sessions have no timeout (session_timeout: 0): each point ends at
// --point-timeout (from its server's grant) as `hung`, and the sweep ends (exit 3). Before,
// nothing bounded a remote point: the sweep waited for as long as the server dripped.
TEST(ClientDeadline, RemotePointsOfASweepEndAtThePointTimeout) {
  DrippingServer server(return_frame(40), 500ms);
  TrackerOptions tracker_options;
  tracker_options.port = 0;
  Tracker tracker(tracker_options);
  RegistrationOptions registration_options;
  registration_options.tracker_host = "127.0.0.1";
  registration_options.tracker_port = tracker.port();
  registration_options.key = "drip-board";
  registration_options.server_port = server.port();
  TrackerRegistration registration(registration_options);
  std::atomic<bool> stop{false};
  std::thread registering([&] {
    while (!stop) {
      registration.maintain(2);
      std::this_thread::sleep_for(100ms);
    }
  });
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln_drip_sweep_{}", getpid());
  fs::create_directories(dir);
  {
    std::ofstream yaml(dir / "sweep.yaml");
    yaml << kiln::test::vector_add_run_config()
         << "remote:\n  tracker: 127.0.0.1:" << tracker.port()
         << "\n  key: drip-board\n  wait: 20\n  session_timeout: 0\n"
         << "sweep:\n  number: [1, 2]\n";
  }
  kiln::test::ChildProcess run({kiln::test::kiln_cli(), "run", (dir / "sweep.yaml").string(),
                                "--jobs", "2", "--point-timeout", "3", "--retries", "0"});
  const std::optional<int> code = run.wait_for(60s);
  stop = true;
  registering.join();
  ASSERT_TRUE(code.has_value()) << "the sweep did not end: its remote points were not bounded\n"
                                << run.log();
  EXPECT_EQ(*code, 3) << run.log();
  EXPECT_EQ(server.accepted(), 2) << run.log();
  EXPECT_THAT(run.log(), HasSubstr("took longer than --point-timeout 3 s")) << run.log();
  EXPECT_THAT(run.log(), HasSubstr("hung (exit 3)")) << run.log();
  EXPECT_THAT(run.log(), HasSubstr("0 of 2 points ok")) << run.log();
  fs::remove_all(dir);
}

}  // namespace client_deadline_test
}  // namespace kiln::rpc
