// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the tracker (SPEC.md §4.5, docs/tracker.md): the bytes are what a peer
// sends after the magic — length headers and JSON texts, well-formed or not — fed to one real
// Tracker on loopback that lives across inputs (so its bounds on held bytes, keys and
// connections are exercised by the state inputs leave behind). After every input the tracker
// must still answer PING on a fresh connection: a crash, a sanitizer report, a hang or a
// tracker that stopped answering is a finding. The harness's own plumbing is not: its socket
// calls survive signals (libFuzzer's SIGALRM interrupts them), errors of the environment are
// retried, and a harness that cannot set itself up says so and exits with kSetupFailedExit.
// The same bytes also go through the JSON depth pre-scan and the depth-bounded parse the
// tracker uses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "fuzz_setup.h"
#include "kiln/rpc/tracker.h"
#include "rpc/socket_io.h"
#include "rpc/tracker_wire.h"

namespace {

using kiln::rpc::tracker_wire::Json;

// Whether a fresh connection's PING gets its answer within `wait`.
bool ping(int port, std::chrono::seconds wait = std::chrono::seconds(30));

// The tracker, started on first use; it must answer a first PING before any input, or the
// harness could not set itself up.
kiln::rpc::Tracker& tracker() {
  static kiln::rpc::Tracker* t = [] {
    setenv("KILN_LOG", "off", 0);
    kiln::rpc::TrackerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_held_bytes = 4 << 20;  // small, so that inputs reach the bound
    o.handshake_timeout = std::chrono::milliseconds(2000);
    kiln::rpc::Tracker* started = nullptr;
    try {
      started = new kiln::rpc::Tracker(o);
    } catch (const std::exception& e) {
      kiln::fuzz::setup_failed("cannot start the tracker on 127.0.0.1", e.what());
    }
    // Within 5 s: before run.sh's -timeout=10 would call this input a hang.
    if (!ping(started->port(), std::chrono::seconds(5))) {
      kiln::fuzz::setup_failed("the tracker just started", "it does not answer PING");
    }
    return started;
  }();
  return *t;
}

using Clock = std::chrono::steady_clock;

// How long a connection to the tracker may take: less than run.sh's -timeout=10, so that a
// tracker that stopped accepting is reported as such.
constexpr auto kConnectLimit = std::chrono::seconds(5);

// Failures of this machine, not of the tracker: out of ephemeral ports, kernel memory or
// system-wide descriptors. Retried until kConnectLimit passes.
bool environment_error(int err) {
  return err == EADDRNOTAVAIL || err == EAGAIN || err == ENOBUFS || err == ENOMEM || err == ENFILE;
}

// A fresh connection to the tracker. Signals never end it (connect_until waits for an
// interrupted connect). Once a connection has succeeded, a tracker that refuses one, accepts
// none within kConnectLimit or holds every descriptor of the process (EMFILE) is a finding;
// anything else, or any failure before the first connection, is the harness's setup.
int connect_loopback(int port) {
  static bool connected_once = false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto deadline = Clock::now() + kConnectLimit;
  int err = 0;
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      // Closed with a reset: hundreds of thousands of inputs must not exhaust loopback ports
      // in TIME_WAIT (and the tracker sees resets as well as orderly closes).
      const linger reset{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      err = kiln::rpc::connect_until(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr),
                                     deadline);
      if (err == 0) {
        connected_once = true;
        return fd;
      }
      ::close(fd);
    } else {
      err = errno;
    }
    if (!(environment_error(err) || err == EMFILE) || Clock::now() >= deadline) break;
    usleep(10000);
  }
  char what[96];
  std::snprintf(what, sizeof(what), "cannot connect to the tracker on 127.0.0.1:%d", port);
  const char* fault = err == ECONNREFUSED ? "the tracker no longer listens"
                      : err == ETIMEDOUT  ? "the tracker accepts no connection"
                      : err == EMFILE     ? "no descriptor left: the tracker holds or leaks them"
                                          : nullptr;
  if (!connected_once || fault == nullptr) kiln::fuzz::setup_failed(what, std::strerror(err));
  std::fprintf(stderr, "kiln fuzz: %s: %s (%s)\n", what, std::strerror(err), fault);
  std::abort();
}

// Writes what it can: the tracker closing the connection early is fine.
void send_all(int fd, const void* data, size_t n) { (void)kiln::rpc::send_all(fd, data, n); }

// Reads until the tracker closes `fd` or is quiet for `quiet_ms`.
void drain(int fd, int quiet_ms) {
  char buf[65536];
  const auto quiet = std::chrono::milliseconds(quiet_ms);
  while (kiln::rpc::poll_until(fd, POLLIN, Clock::now() + quiet) > 0) {
    if (kiln::rpc::retry_on_signal([&] { return ::recv(fd, buf, sizeof(buf), 0); }) <= 0) return;
  }
}

bool ping(int port, std::chrono::seconds wait) {
  const int fd = connect_loopback(port);
  const std::string magic = kiln::rpc::tracker_wire::encode_int32(kiln::rpc::kTrackerMagic);
  const std::string msg = kiln::rpc::tracker_wire::frame("[1]");
  send_all(fd, magic.data(), magic.size());
  send_all(fd, msg.data(), msg.size());
  std::string got;
  char buf[64];
  const auto deadline = Clock::now() + wait;
  while (got.size() < 9) {
    if (kiln::rpc::poll_until(fd, POLLIN, deadline) <= 0) break;
    const ssize_t n = kiln::rpc::retry_on_signal([&] { return ::recv(fd, buf, sizeof(buf), 0); });
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const bool ok = got.size() >= 9 && got.substr(8, 1) == "0";  // magic, length 1, "0"
  if (!ok) std::fprintf(stderr, "kiln fuzz: PING got %zu bytes\n", got.size());
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The pre-scan bounds what reaches the recursive parser.
  const size_t depth =
      kiln::rpc::tracker_wire::json_depth(text, kiln::rpc::tracker_wire::kMaxJsonDepth);
  if (depth <= kiln::rpc::tracker_wire::kMaxJsonDepth) {
    const Json parsed = Json::parse(text, nullptr, false);
    if (!parsed.is_discarded()) (void)kiln::rpc::tracker_wire::dumps(parsed);
  }
  // The bytes after the first as a peer's stream after the magic: with the first byte odd,
  // each line is framed as one message (so the JSON handlers see whole texts); with it even,
  // they go raw (length headers included).
  const int port = tracker().port();
  const int fd = connect_loopback(port);
  const std::string magic = kiln::rpc::tracker_wire::encode_int32(kiln::rpc::kTrackerMagic);
  send_all(fd, magic.data(), magic.size());
  if (size > 0 && (data[0] & 1)) {
    const std::string body = text.substr(1);
    size_t start = 0;
    while (start <= body.size()) {
      const size_t end = std::min(body.find('\n', start), body.size());
      const std::string msg = kiln::rpc::tracker_wire::frame(body.substr(start, end - start));
      send_all(fd, msg.data(), msg.size());
      start = end + 1;
    }
  } else if (size > 0) {
    send_all(fd, data + 1, size - 1);  // raw bytes: headers and bodies as the input has them
  }
  drain(fd, 20);
  ::close(fd);
  if (!ping(port)) {
    std::fprintf(stderr, "kiln fuzz: the tracker stopped answering PING\n");
    std::abort();
  }
  return 0;
}
