// libFuzzer target for the tracker (SPEC.md §4.5, docs/tracker.md): the bytes are what a peer
// sends after the magic — length headers and JSON texts, well-formed or not — fed to one real
// Tracker on loopback that lives across inputs (so its bounds on held bytes, keys and
// connections are exercised by the state inputs leave behind). After every input the tracker
// must still answer PING on a fresh connection: a crash, a sanitizer report, a hang or a
// tracker that stopped answering is a finding. The same bytes also go through the JSON depth
// pre-scan and the depth-bounded parse the tracker uses.
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
#include <string>

#include "kiln/rpc/tracker.h"
#include "rpc/tracker_wire.h"

namespace {

using kiln::rpc::tracker_wire::Json;

kiln::rpc::Tracker& tracker() {
  static kiln::rpc::Tracker* t = [] {
    setenv("KILN_LOG", "off", 0);
    kiln::rpc::TrackerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_held_bytes = 4 << 20;  // small, so that inputs reach the bound
    o.handshake_timeout = std::chrono::milliseconds(2000);
    return new kiln::rpc::Tracker(o);
  }();
  return *t;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Closed with a reset: hundreds of thousands of inputs must not exhaust loopback ports in
  // TIME_WAIT (and the tracker sees resets as well as orderly closes).
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    if (errno != EADDRNOTAVAIL && errno != EAGAIN) break;
    usleep(10000);
  }
  std::fprintf(stderr, "kiln fuzz: cannot connect to the tracker on port %d: %s\n", port,
               std::strerror(errno));
  std::abort();
}

void send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent <= 0) return;  // the tracker closed it: fine
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

// Reads until the tracker closes `fd` or is quiet for `quiet_ms`.
void drain(int fd, int quiet_ms) {
  char buf[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, quiet_ms) <= 0) return;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) return;
  }
}

bool ping(int port) {
  const int fd = connect_loopback(port);
  const std::string magic = kiln::rpc::tracker_wire::encode_int32(kiln::rpc::kTrackerMagic);
  const std::string msg = kiln::rpc::tracker_wire::frame("[1]");
  send_all(fd, magic.data(), magic.size());
  send_all(fd, msg.data(), msg.size());
  std::string got;
  char buf[64];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.size() < 9 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
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
