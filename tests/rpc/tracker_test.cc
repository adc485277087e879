// SPDX-License-Identifier: Apache-2.0
// The tracker (SPEC.md §4.5, docs/tracker.md) on loopback: registration and release,
// scheduling, keys with ':', Kiln's wait bound, hostile and malformed peers, STOP, the text
// summary's exact layout, a tracker restart, `kiln tracker` / `kiln query`, and a Python
// script that speaks the wire protocol byte by byte. Servers are TrackerRegistration
// instances (what `kiln rpc-server` uses) or raw sockets.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.h"
#include "kiln/rpc/tracker.h"
#include "rpc/rpc_test_util.h"
#include "rpc/socket_io.h"
#include "rpc/tracker_wire.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace tracker_test {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using kiln::test::wait_until;

// ---------------------------------------------------------------------------------------------
// Helpers

TrackerOptions loopback() {
  TrackerOptions o;
  o.port = 0;
  return o;
}

RegistrationOptions registration(int tracker_port, const std::string& key, int server_port) {
  RegistrationOptions o;
  o.tracker_host = "127.0.0.1";
  o.tracker_port = tracker_port;
  o.key = key;
  o.server_port = server_port;
  o.ping_period = 100ms;
  o.unmatch_timeout = 300ms;
  o.reconnect_period = 100ms;
  o.io_timeout = 2s;
  return o;
}

std::string le32(int32_t v) { return tracker_wire::encode_int32(v); }

// A raw TCP peer of the tracker: bytes exactly as written, replies read with a time limit.
class RawPeer {
 public:
  // `source`: the loopback address to connect from (127.0.0.0/8 is all loopback on Linux), so
  // that tests can play peers on distinct addresses.
  explicit RawPeer(int port, bool handshake = true, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
        ::close(fd_);
        throw std::runtime_error("bind to " + std::string(source) + " failed: " + strerror(errno));
      }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int err = connect_until(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr),
                                  std::chrono::steady_clock::now() + 5s);
    if (err != 0) {
      ::close(fd_);
      throw std::runtime_error("connect failed: " + std::string(strerror(err)));
    }
    if (handshake) {
      send(le32(kTrackerMagic));
      const auto magic = recv_exact(4, 5s);
      if (!magic || tracker_wire::decode_int32(
                        reinterpret_cast<const unsigned char*>(magic->data())) != kTrackerMagic) {
        throw std::runtime_error("no magic from the tracker");
      }
    }
  }
  ~RawPeer() { close(); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // False when the tracker has closed the connection.
  bool send(const std::string& bytes) const { return send_all(fd_, bytes.data(), bytes.size()); }
  bool send_json(const std::string& text) {
    return send(le32(static_cast<int32_t>(text.size())) + text);
  }
  // Exactly `n` bytes, or nullopt on timeout or close.
  std::optional<std::string> recv_exact(size_t n, std::chrono::milliseconds timeout) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      if (poll_until(fd_, POLLIN, deadline) <= 0) return std::nullopt;
      char buf[4096];
      const ssize_t got = retry_on_signal(
          [&] { return ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0); });
      if (got <= 0) return std::nullopt;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  std::optional<Json> recv_json(std::chrono::milliseconds timeout = 5s) {
    const auto header = recv_exact(4, timeout);
    if (!header) return std::nullopt;
    const int32_t n =
        tracker_wire::decode_int32(reinterpret_cast<const unsigned char*>(header->data()));
    if (n <= 0) return std::nullopt;
    const auto body = recv_exact(static_cast<size_t>(n), timeout);
    if (!body) return std::nullopt;
    return Json::parse(*body);
  }
  Json call(const std::string& text) {
    if (!send_json(text)) throw std::runtime_error("send failed");
    auto reply = recv_json();
    if (!reply) throw std::runtime_error("no reply to " + text);
    return *reply;
  }
  // Whether the tracker closes the connection within `timeout` (anything before the close is
  // skipped).
  bool closed_within(std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (poll_until(fd_, POLLIN, deadline) <= 0) return false;
      char buf[4096];
      const ssize_t got = retry_on_signal([&] { return ::recv(fd_, buf, sizeof(buf), 0); });
      if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    }
  }

 private:
  int fd_ = -1;
};

int64_t free_of(const TrackerSummary& s, const std::string& key) {
  for (const auto& q : s.queues) {
    if (q.key == key) return q.free;
  }
  return -1;
}

int64_t pending_of(const TrackerSummary& s, const std::string& key) {
  for (const auto& q : s.queues) {
    if (q.key == key) return q.pending;
  }
  return -1;
}

size_t servers_of(const TrackerSummary& s, const std::string& key) {
  size_t n = 0;
  for (const auto& server : s.servers) n += server.key == "server:" + key ? 1 : 0;
  return n;
}

// Polls the tracker's summary until `pred` holds (5 s at most).
bool summary_until(int port, const std::function<bool(const TrackerSummary&)>& pred) {
  TrackerSession session = connect_tracker("127.0.0.1", port);
  return wait_until([&] { return pred(session.summary()); }, 5s);
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A registration with `free_slots` keys outstanding and known to the tracker.
void register_free(TrackerRegistration& r, int free_slots) {
  ASSERT_TRUE(wait_until(
      [&] {
        r.maintain(free_slots);
        return r.connected() && static_cast<int>(r.outstanding().size()) == free_slots;
      },
      5s));
}

// ---------------------------------------------------------------------------------------------
// Registration, release, removal

TEST(TrackerRegister, TwoServersThenRequestThenRelease) {
  Tracker tracker(loopback());
  TrackerRegistration r1(registration(tracker.port(), "test_device", 9091));
  TrackerRegistration r2(registration(tracker.port(), "test_device", 9092));
  register_free(r1, 1);
  register_free(r2, 1);

  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  TrackerSummary s = session.summary();
  EXPECT_EQ(free_of(s, "test_device"), 2);
  EXPECT_EQ(pending_of(s, "test_device"), 0);
  ASSERT_EQ(servers_of(s, "test_device"), 2u);
  EXPECT_EQ(s.servers[0].host, "127.0.0.1");
  EXPECT_EQ(s.servers[0].port, 9091);
  EXPECT_EQ(s.servers[1].port, 9092);
  EXPECT_EQ(Json::parse(s.servers[0].json)["addr"], Json::array({"127.0.0.1", 9091}));

  // The oldest free value goes first: r1's.
  const ServerAddress granted = session.request_server("test_device");
  EXPECT_EQ(granted.host, "127.0.0.1");
  EXPECT_EQ(granted.port, 9091);
  ASSERT_TRUE(contains(r1.outstanding(), granted.matchkey));
  EXPECT_THAT(granted.matchkey, ::testing::StartsWith("test_device:"));
  EXPECT_EQ(free_of(session.summary(), "test_device"), 1);

  // The session starts (claims its key, no free slot), then ends: the server puts a fresh key.
  EXPECT_TRUE(r1.claim(granted.matchkey));
  EXPECT_FALSE(r1.claim(granted.matchkey));
  r1.maintain(0);
  EXPECT_EQ(free_of(session.summary(), "test_device"), 1);
  r1.maintain(1);
  ASSERT_EQ(r1.outstanding().size(), 1u);
  EXPECT_NE(r1.outstanding()[0], granted.matchkey);  // never reused
  EXPECT_EQ(free_of(session.summary(), "test_device"), 2);
}

TEST(TrackerRegister, ClosingAServerRemovesIt) {
  Tracker tracker(loopback());
  auto r1 = std::make_unique<TrackerRegistration>(registration(tracker.port(), "dev", 9091));
  TrackerRegistration r2(registration(tracker.port(), "dev", 9092));
  register_free(*r1, 2);  // two free slots: two values
  register_free(r2, 1);
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return free_of(s, "dev") == 3 && servers_of(s, "dev") == 2;
  }));
  r1.reset();
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return free_of(s, "dev") == 1 && servers_of(s, "dev") == 1 && s.servers[0].port == 9092;
  }));

  // A raw server: UPDATE_INFO then PUT; closing it removes its value too.
  {
    RawPeer server(tracker.port());
    EXPECT_EQ(server.call(R"([5, {"key": "server:dev", "addr": [null, 9300]}])"), 0);
    EXPECT_EQ(server.call(R"([3, "dev", [9300, "dev:raw"], null])"), 0);
    EXPECT_TRUE(summary_until(tracker.port(),
                              [](const TrackerSummary& s) { return free_of(s, "dev") == 2; }));
  }
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return free_of(s, "dev") == 1 && servers_of(s, "dev") == 1;
  }));

  // Without UPDATE_INFO a connection is no server: its values outlive it (as in TVM).
  {
    RawPeer registrar(tracker.port());
    EXPECT_EQ(registrar.call(R"([3, "dev", [9301, "dev:kept"], "10.1.2.3"])"), 0);
  }
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  const ServerAddress first = session.request_server("dev");  // r2's, the oldest
  EXPECT_EQ(first.port, 9092);
  const ServerAddress kept = session.request_server("dev", 1, 2s);
  EXPECT_EQ(kept.host, "10.1.2.3");
  EXPECT_EQ(kept.port, 9301);
  EXPECT_EQ(kept.matchkey, "dev:kept");
}

TEST(TrackerRegister, ReplacesAKeyTakenButNeverUsed) {
  Tracker tracker(loopback());
  TrackerRegistration r(registration(tracker.port(), "stale", 9091));
  register_free(r, 1);
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  const ServerAddress taken = session.request_server("stale");
  // The client never connects: after unmatch_timeout + ping_period the key is replaced.
  EXPECT_TRUE(wait_until(
      [&] {
        r.maintain(1);
        const auto keys = r.outstanding();
        return keys.size() == 1 && keys[0] != taken.matchkey &&
               free_of(session.summary(), "stale") == 1;
      },
      5s));
  EXPECT_FALSE(r.claim(taken.matchkey));
}

// ---------------------------------------------------------------------------------------------
// Scheduling

TEST(TrackerSchedule, HigherPriorityFirstThenArrivalOrder) {
  Tracker tracker(loopback());
  std::vector<std::unique_ptr<RawPeer>> clients;
  const int priorities[] = {1, 5, 5, 1, 3};
  for (int p : priorities) {
    clients.push_back(std::make_unique<RawPeer>(tracker.port()));
    ASSERT_TRUE(clients.back()->send_json(fmt::format(R"([4, "prio", "", {}])", p)));
    // Arrival order is the order the tracker reads them: wait for each to be queued.
    const size_t n = clients.size();
    ASSERT_TRUE(summary_until(tracker.port(), [&](const TrackerSummary& s) {
      return pending_of(s, "prio") == static_cast<int64_t>(n);
    }));
  }
  RawPeer server(tracker.port());
  ASSERT_EQ(server.call(R"([5, {"key": "server:prio", "addr": [null, 9000]}])"), 0);
  // Expected grant order: the two 5s (FIFO), the 3, then the two 1s (FIFO).
  const int order[] = {1, 2, 4, 0, 3};
  for (int i = 0; i < 5; ++i) {
    const std::string matchkey = fmt::format("prio:{}", i);
    ASSERT_EQ(server.call(fmt::format(R"([3, "prio", [{}, "{}"], null])", 9000 + i, matchkey)), 0);
    const auto grant = clients[order[i]]->recv_json();
    ASSERT_TRUE(grant.has_value()) << "client " << order[i] << " got nothing";
    EXPECT_EQ(*grant,
              Json::parse(fmt::format(R"([0, ["127.0.0.1", {}, "{}"]])", 9000 + i, matchkey)));
  }
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return free_of(s, "prio") == 0 && pending_of(s, "prio") == 0;
  }));
}

TEST(TrackerSchedule, AWaitingRequestIsServedWhenTheServerComesFree) {
  Tracker tracker(loopback());
  TrackerRegistration r(registration(tracker.port(), "one", 9091));
  register_free(r, 1);
  TrackerSession first = connect_tracker("127.0.0.1", tracker.port());
  const ServerAddress a = first.request_server("one");
  ASSERT_TRUE(r.claim(a.matchkey));  // the first session holds the only server
  r.maintain(0);

  RawPeer second(tracker.port());
  ASSERT_TRUE(second.send_json(R"([4, "one", "", 1])"));
  ASSERT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return pending_of(s, "one") == 1 && free_of(s, "one") == 0;
  }));
  // The first session ends: the server registers again and the second request gets it.
  r.maintain(1);
  const auto grant = second.recv_json();
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ((*grant)[0], 0);
  EXPECT_EQ((*grant)[1][1], 9091);
  EXPECT_TRUE(contains(r.outstanding(), (*grant)[1][2].get<std::string>()));
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return pending_of(s, "one") == 0 && free_of(s, "one") == 0;
  }));
}

TEST(TrackerSchedule, AClientThatLeavesTakesItsRequestsAlong) {
  Tracker tracker(loopback());
  {
    RawPeer client(tracker.port());
    ASSERT_TRUE(client.send_json(R"([4, "gone", "", 1])"));
    ASSERT_TRUE(client.send_json(R"([4, "gone", "", 2])"));
    ASSERT_TRUE(summary_until(tracker.port(),
                              [](const TrackerSummary& s) { return pending_of(s, "gone") == 2; }));
  }
  EXPECT_TRUE(summary_until(tracker.port(),
                            [](const TrackerSummary& s) { return pending_of(s, "gone") == 0; }));
  // A value PUT afterwards stays free (nobody to hand it to).
  RawPeer server(tracker.port());
  ASSERT_EQ(server.call(R"([5, {"key": "server:gone", "addr": [null, 9000]}])"), 0);
  ASSERT_EQ(server.call(R"([3, "gone", [9000, "gone:1"], null])"), 0);
  EXPECT_TRUE(summary_until(tracker.port(), [](const TrackerSummary& s) {
    return free_of(s, "gone") == 1 && pending_of(s, "gone") == 0;
  }));
}

TEST(TrackerSchedule, GetPendingMatchkeysListsKeysNotYetHandedOut) {
  Tracker tracker(loopback());
  RawPeer server(tracker.port());
  EXPECT_EQ(server.call("[7]"), Json::array());
  ASSERT_EQ(server.call(R"([5, {"key": "server:pm", "addr": [null, 9000]}])"), 0);
  ASSERT_EQ(server.call(R"([3, "pm", [9000, "pm:a"], null])"), 0);
  ASSERT_EQ(server.call(R"([3, "pm", [9000, "pm:b"], null])"), 0);
  EXPECT_EQ(server.call("[7]"), Json::parse(R"(["pm:a", "pm:b"])"));
  TrackerSession client = connect_tracker("127.0.0.1", tracker.port());
  EXPECT_EQ(client.request_server("pm").matchkey, "pm:a");
  EXPECT_EQ(server.call("[7]"), Json::parse(R"(["pm:b"])"));
  // Another connection's keys are not this one's.
  RawPeer other(tracker.port());
  EXPECT_EQ(other.call("[7]"), Json::array());
}

// ---------------------------------------------------------------------------------------------
// Keys containing ':'

TEST(TrackerKeys, KeysWithColonsWorkEverywhere) {
  const std::string key = "127.0.0.1:5555";  // an adb serial
  Tracker tracker(loopback());
  auto r = std::make_unique<TrackerRegistration>(registration(tracker.port(), key, 9091));
  register_free(*r, 1);
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  TrackerSummary s = session.summary();
  EXPECT_EQ(free_of(s, key), 1);
  ASSERT_EQ(servers_of(s, key), 1u);
  EXPECT_THAT(session.text_summary(), HasSubstr("127.0.0.1:5555   1      1     0      \n"));

  const ServerAddress granted = session.request_server(key, 1, 2s);
  EXPECT_THAT(granted.matchkey, ::testing::StartsWith(key + ":"));
  EXPECT_TRUE(r->claim(granted.matchkey));
  r->maintain(1);
  EXPECT_EQ(free_of(session.summary(), key), 1);
  // Closing the server removes its value from the queue it was PUT in.
  r.reset();
  EXPECT_TRUE(summary_until(tracker.port(), [&](const TrackerSummary& sum) {
    return free_of(sum, key) == 0 && servers_of(sum, key) == 0;
  }));
}

// ---------------------------------------------------------------------------------------------
// The wait bound (Kiln's extension)

TEST(TrackerWait, ABoundedRequestForAnUnknownKeyFailsClearly) {
  Tracker tracker(loopback());
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  const auto start = std::chrono::steady_clock::now();
  try {
    session.request_server("nokey", 1, 200ms);
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no free server with key 'nokey' within 0.2 s"));
    EXPECT_THAT(e.what(), HasSubstr("no server is registered with this key"));
  }
  // A hang guard, not a speed bound: without the 200 ms bound the request waits forever.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_TRUE(session.ping());  // the connection stays usable
  EXPECT_EQ(pending_of(session.summary(), "nokey"), 0);

  // Byte level: the answer is [-1, message] and the request is gone.
  RawPeer raw(tracker.port());
  const auto reply = raw.call(R"([4, "nokey", "", 1, 0.05])");
  ASSERT_TRUE(reply.is_array());
  EXPECT_EQ(reply[0], -1);
  EXPECT_THAT(reply[1].get<std::string>(), HasSubstr("'nokey'"));
  EXPECT_EQ(raw.call("[1]"), 0);
}

TEST(TrackerWait, TheMessageCountsBusyServers) {
  Tracker tracker(loopback());
  TrackerRegistration r(registration(tracker.port(), "busy", 9091));
  register_free(r, 1);
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  const ServerAddress a = session.request_server("busy", 1, 1s);
  ASSERT_TRUE(r.claim(a.matchkey));
  try {
    session.request_server("busy", 1, 100ms);
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("1 server registered with this key, 0 free"));
  }
  // A bound that the tracker meets: granted as usual.
  RawPeer waiting(tracker.port());
  ASSERT_TRUE(waiting.send_json(R"([4, "busy", "", 1, 5])"));
  ASSERT_TRUE(summary_until(tracker.port(),
                            [](const TrackerSummary& s) { return pending_of(s, "busy") == 1; }));
  r.maintain(1);
  const auto grant = waiting.recv_json();
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ((*grant)[0], 0);
}

// ---------------------------------------------------------------------------------------------
// Issue 16: attacks on `kiln tracker` (real processes where a crash is the failure)

// Item 1: a value nested 50,000 deep used to overflow the io thread's stack (SIGSEGV); one
// nested 2,000 deep was stored and broke TVM's query_rpc_tracker when it was replayed.
TEST(TrackerHardening, DeeplyNestedJsonClosesThatConnectionAndTheTrackerLives) {
  auto tracker = kiln::test::start_tracker();
  RawPeer bystander(tracker.port);
  for (const int depth : {50000, 2000, 100}) {
    RawPeer peer(tracker.port);
    const std::string nested = std::string(depth, '[') + std::string(depth, ']');
    ASSERT_TRUE(peer.send_json(R"([5, {"key": "server:deep", "addr": [null, 9000], "v": )" +
                               nested + "}]"));
    EXPECT_TRUE(peer.closed_within(10s)) << "depth " << depth;
    ASSERT_TRUE(tracker.process->running()) << "depth " << depth << "\n" << tracker.process->log();
    EXPECT_EQ(bystander.call("[1]"), 0);
  }
  // Strings may hold brackets: only structure counts.
  RawPeer fine(tracker.port);
  EXPECT_EQ(
      fine.call(
          R"([5, {"key": "server:ok", "addr": [null, 9000], "v": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}])"),
      0);
  const TrackerSummary s = connect_tracker("127.0.0.1", tracker.port).summary();
  ASSERT_EQ(s.servers.size(), 1u);
  EXPECT_EQ(s.servers[0].key, "server:ok");
  EXPECT_THAT(tracker.process->log(), HasSubstr("nested deeper than"));
}

// Item 6: keys, match keys and addresses are bounded in bytes (one 0.5 MiB key used to be
// accepted, and 200 of them grew the tracker by ~490 MB and broke SUMMARY for everyone).
TEST(TrackerHardening, OversizedKeysMatchKeysAndAddressesAreRefused) {
  auto tracker = kiln::test::start_tracker();
  RawPeer bystander(tracker.port);
  const std::string huge(512 * 1024, 'k');
  const std::vector<std::string> bad = {
      R"([3, ")" + huge + R"(", [9000, "k:1"], null])",
      R"([3, "k", [9000, ")" + huge + R"("], null])",
      R"([3, "k", [9000, "k:1"], ")" + huge + R"("])",
      R"([3, "k", [")" + huge + R"(", "k:1"], null])",
      R"([4, ")" + huge + R"(", "", 1])",
      R"([5, {"key": "server:k", "addr": [")" + huge + R"(", 9000]}])",
  };
  for (const std::string& text : bad) {
    RawPeer peer(tracker.port);
    ASSERT_TRUE(peer.send_json(text));
    EXPECT_TRUE(peer.closed_within()) << text.substr(0, 40);
  }
  EXPECT_EQ(bystander.call("[1]"), 0);
  const TrackerSummary s = connect_tracker("127.0.0.1", tracker.port).summary();
  EXPECT_TRUE(s.queues.empty());
  EXPECT_TRUE(s.servers.empty());
  EXPECT_THAT(tracker.process->log(), HasSubstr("bytes long; the limit is"));
}

// Item 6: what a tracker holds is bounded in bytes, per connection and in all, and SUMMARY
// stays answerable (its reply must fit a tracker message) however many keys peers make.
TEST(TrackerHardening, HeldBytesAreBoundedAndSummaryStaysAnswerable) {
  TrackerOptions o = loopback();
  o.max_held_bytes = 256 * 1024;
  Tracker tracker(o);
  // Values PUT by a connection that leaves without UPDATE_INFO stay (as in TVM): the total
  // bound holds them, and the first connection's own bound stops it first.
  int accepted = 0;
  {
    RawPeer p(tracker.port());
    for (int i = 0; i < 1000; ++i) {
      if (!p.send_json(
              fmt::format(R"([3, "mem", [9000, "mem:{}{}"], null])", i, std::string(400, 'x')))) {
        break;
      }
      const auto reply = p.recv_json(2s);
      if (!reply) break;
      ++accepted;
    }
    EXPECT_TRUE(p.closed_within());
  }
  EXPECT_GT(accepted, 10);
  EXPECT_LT(accepted, 600);  // 256 KiB / ~560 bytes
  // Many distinct queue keys from several connections: SUMMARY still fits one message.
  for (int c = 0; c < 4; ++c) {
    RawPeer p(tracker.port());
    for (int i = 0; i < 1000; ++i) {
      if (!p.send_json(fmt::format(R"([4, "{}-{}-{}", "", 1])", c, i, std::string(500, 'q'))))
        break;
    }
    p.closed_within(1s);
  }
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  EXPECT_NO_THROW(session.summary());
  EXPECT_TRUE(session.ping());
}

// Item 5: connections that never send the magic (or their first message) are closed at a
// deadline, one address cannot hold more than its share, and when the tracker is full the
// connection idle the longest makes room for a new one (issue 27 extends this to peers that
// talked: tracker_fairness_test.cc).
TEST(TrackerHardening, IdleConnectionsCannotLockOutClients) {
  struct rlimit lim {};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 1024) GTEST_SKIP() << "needs 1024 descriptors, ulimit -n is " << lim.rlim_cur;
  auto tracker = kiln::test::start_tracker({"--handshake-timeout", "30", "--max-connections", "200",
                                            "--max-connections-per-address", "64"});
  std::vector<std::unique_ptr<RawPeer>> idle;
  for (int a = 2; a < 7; ++a) {
    const std::string source = fmt::format("127.0.1.{}", a);
    for (int i = 0; i < 60; ++i) {
      idle.push_back(std::make_unique<RawPeer>(tracker.port, false, source.c_str()));
    }
  }
  // 300 idle connections from five addresses: a client is still answered at once.
  RawPeer client(tracker.port);
  EXPECT_EQ(client.call("[1]"), 0);
  // One address is capped on its own.
  std::vector<std::unique_ptr<RawPeer>> flood;
  for (int i = 0; i < 80; ++i) {
    flood.push_back(std::make_unique<RawPeer>(tracker.port, false, "127.0.2.1"));
  }
  EXPECT_TRUE(flood.back()->closed_within(5s));
  EXPECT_THAT(tracker.process->log(), HasSubstr("connections from 127.0.2.1"));
  RawPeer second(tracker.port);
  EXPECT_EQ(second.call("[1]"), 0);
}

TEST(TrackerHardening, TheMagicAndFirstMessageHaveADeadline) {
  auto tracker = kiln::test::start_tracker({"--handshake-timeout", "1"});
  RawPeer silent(tracker.port, false);
  RawPeer magic_only(tracker.port);  // sends the magic, then nothing
  EXPECT_TRUE(silent.closed_within(10s));
  EXPECT_TRUE(magic_only.closed_within(10s));
  // A peer that keeps talking is not bound by it.
  RawPeer talker(tracker.port);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(talker.call("[1]"), 0);
    std::this_thread::sleep_for(600ms);
  }
  EXPECT_THAT(tracker.process->log(), HasSubstr("within the handshake deadline"));
}

// ---------------------------------------------------------------------------------------------
// Hostile and malformed peers: only that connection closes

TEST(TrackerRobust, BadLengthHeadersCloseOnlyThatConnection) {
  Tracker tracker(loopback());
  RawPeer bystander(tracker.port());
  ASSERT_EQ(bystander.call(R"([5, {"key": "server:k", "addr": [null, 9000]}])"), 0);
  ASSERT_EQ(bystander.call(R"([3, "k", [9000, "k:1"], null])"), 0);
  for (const int32_t size : {0x7FFFFFFF, kMaxTrackerMessageBytes + 1, 0, -1, -2147483647 - 1}) {
    RawPeer bad(tracker.port());
    ASSERT_TRUE(bad.send(le32(size)));
    EXPECT_TRUE(bad.closed_within()) << "length " << size;
    EXPECT_EQ(bystander.call("[1]"), 0) << "length " << size;
  }
  // The bound itself is accepted: a PING padded to exactly 1 MiB.
  RawPeer big(tracker.port());
  std::string text = "[1]";
  text.resize(static_cast<size_t>(kMaxTrackerMessageBytes), ' ');
  EXPECT_EQ(big.call(text), 0);
  // The server connection survived it all, with its value.
  EXPECT_EQ(free_of(connect_tracker("127.0.0.1", tracker.port()).summary(), "k"), 1);
}

TEST(TrackerRobust, WrongMagicIsClosedWithoutAnswer) {
  Tracker tracker(loopback());
  RawPeer peer(tracker.port(), /*handshake=*/false);
  ASSERT_TRUE(peer.send(le32(0xFF271)));  // the RPC server's magic, not the tracker's
  EXPECT_FALSE(peer.recv_exact(1, 2s).has_value()) << "no answer";
  EXPECT_TRUE(peer.closed_within(1s)) << "closed";
  EXPECT_TRUE(connect_tracker("127.0.0.1", tracker.port()).ping());
}

TEST(TrackerRobust, MalformedJsonBadShapesAndUnknownCodesClose) {
  Tracker tracker(loopback());
  RawPeer bystander(tracker.port());
  const std::vector<std::string> bad = {
      "[1",                                     // malformed JSON
      "\xff\xfe",                               // not even text
      R"({"code": 1})",                         // not an array
      "[]",                                     // no code
      R"(["1"])",                               // code is not a number
      "[99]",                                   // unknown code
      "[-1]",                                   // FAIL is no command
      R"([3, "k"])",                            // PUT without a value
      R"([3, "k", [9000], null])",              // PUT with a short value
      R"([3, "k", [9000, 17], null])",          // PUT with a non-string match key
      R"([3, 5, [9000, "k:1"], null])",         // PUT with a non-string key
      R"([4, "k", ""])",                        // REQUEST without priority
      R"([4, "k", "", "high"])",                // REQUEST with a non-numeric priority
      R"([4, "k", "", 1, -1])",                 // a negative wait bound
      R"([5, "server:k"])",                     // UPDATE_INFO without a dict
      R"([5, {"key": "server:k"}])",            // UPDATE_INFO without addr
      R"([5, {"key": 7, "addr": [null, 1]}])",  // UPDATE_INFO with a non-string key
      "[2]",                                    // STOP without a key
  };
  for (const std::string& text : bad) {
    RawPeer peer(tracker.port());
    ASSERT_TRUE(peer.send_json(text));
    EXPECT_TRUE(peer.closed_within()) << text;
  }
  EXPECT_EQ(bystander.call("[1]"), 0);
  // Nothing half-done was left behind.
  const TrackerSummary s = connect_tracker("127.0.0.1", tracker.port()).summary();
  EXPECT_EQ(free_of(s, "k"), -1);
  EXPECT_TRUE(s.servers.empty());
}

TEST(TrackerRobust, PerConnectionLimits) {
  Tracker tracker(loopback());
  RawPeer server(tracker.port());
  ASSERT_EQ(server.call(R"([5, {"key": "server:cap", "addr": [null, 9000]}])"), 0);
  int accepted = 0;
  for (int i = 0; i < 1100; ++i) {
    if (!server.send_json(fmt::format(R"([3, "cap", [9000, "cap:{}"], null])", i))) break;
    const auto reply = server.recv_json(2s);
    if (!reply) break;
    ASSERT_EQ(*reply, 0);
    ++accepted;
  }
  EXPECT_EQ(accepted, 1024);
  EXPECT_TRUE(server.closed_within());
  // A server connection's values left with it.
  EXPECT_TRUE(summary_until(tracker.port(),
                            [](const TrackerSummary& s) { return free_of(s, "cap") == 0; }));
}

TEST(TrackerRobust, AFullTrackerDropsFreeServersWhoseConnectionLeftOldestFirst) {
  TrackerOptions o = loopback();
  o.max_free_values = 4;
  Tracker tracker(o);
  {
    // PUT without UPDATE_INFO: the values outlive the connection, as in TVM.
    RawPeer stale(tracker.port());
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(stale.call(fmt::format(R"([3, "stale", [9000, "stale:{}"], null])", i)), 0);
    }
  }
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  EXPECT_EQ(free_of(session.summary(), "stale"), 4);
  // The tracker is full of them: a live server's PUTs take their places, oldest first.
  RawPeer live(tracker.port());
  ASSERT_EQ(live.call(R"([5, {"key": "server:live", "addr": [null, 9001]}])"), 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(live.call(fmt::format(R"([3, "live", [9001, "live:{}"], null])", i)), 0);
  }
  const TrackerSummary full = session.summary();
  EXPECT_EQ(free_of(full, "live"), 3);
  EXPECT_EQ(free_of(full, "stale"), 1);
  EXPECT_EQ(session.request_server("stale", 1, 2s).matchkey, "stale:3");
  // Room for one more; then, with nothing left to drop, a PUT closes its connection.
  ASSERT_EQ(live.call(R"([3, "live", [9001, "live:3"], null])"), 0);
  ASSERT_TRUE(live.send_json(R"([3, "live", [9001, "live:4"], null])"));
  EXPECT_TRUE(live.closed_within());
  EXPECT_TRUE(summary_until(tracker.port(),
                            [](const TrackerSummary& s) { return free_of(s, "live") == 0; }));
}

// ---------------------------------------------------------------------------------------------
// STOP

TEST(TrackerStop, WrongKeyIsRefusedRightKeyStops) {
  TrackerOptions o = loopback();
  o.stop_key = "secret";
  Tracker tracker(o);
  EXPECT_EQ(tracker.stop_key(), "secret");
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  EXPECT_FALSE(session.stop("wrong"));
  RawPeer raw(tracker.port());
  EXPECT_EQ(raw.call(R"([2, "wrong"])"), -1);
  EXPECT_EQ(raw.call(R"([2, 12345])"), -1);
  EXPECT_FALSE(tracker.wait(0ms));
  EXPECT_TRUE(session.ping());
  EXPECT_EQ(raw.call(R"([2, "secret"])"), 0);
  EXPECT_TRUE(tracker.wait(5s));
  EXPECT_TRUE(raw.closed_within());
  EXPECT_THROW(connect_tracker("127.0.0.1", tracker.port(), 300ms), RuntimeError);
}

TEST(TrackerStop, RandomStopKeyAndStop) {
  Tracker tracker(loopback());
  EXPECT_GE(tracker.stop_key().size(), 16u);
  Tracker other(loopback());
  EXPECT_NE(tracker.stop_key(), other.stop_key());
  EXPECT_TRUE(connect_tracker("127.0.0.1", tracker.port()).stop(tracker.stop_key()));
  EXPECT_TRUE(tracker.wait(5s));
  other.stop();
  other.stop();  // idempotent
  EXPECT_TRUE(other.wait(5s));
}

// ---------------------------------------------------------------------------------------------
// The text summary, byte for byte

TEST(TrackerSummary, TextSummaryLayoutIsTheReferences) {
  Tracker tracker(loopback());
  TrackerRegistration r1(registration(tracker.port(), "abc", 9091));
  TrackerRegistration r2(registration(tracker.port(), "abc", 9092));
  RegistrationOptions o3 = registration(tracker.port(), "127.0.0.1:5555", 9093);
  o3.custom_addr = "10.0.0.7";
  TrackerRegistration r3(o3);
  register_free(r1, 1);
  register_free(r2, 1);
  register_free(r3, 1);
  RawPeer waiting(tracker.port());
  ASSERT_TRUE(waiting.send_json(R"([4, "waiting", "", 1])"));
  RawPeer gone(tracker.port());
  ASSERT_TRUE(gone.send_json(R"([4, "zzz-empty", "", 1, 0])"));  // expires: total 0, pending 0
  ASSERT_TRUE(gone.recv_json().has_value());
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port());
  ASSERT_TRUE(wait_until([&] { return pending_of(session.summary(), "waiting") == 1; }, 5s));

  const std::string expected =
      "Server List\n"
      "------------------------------\n"
      "server-address           key\n"
      "------------------------------\n"
      "10.0.0.7:9093            server:127.0.0.1:5555\n"
      "127.0.0.1:9091           server:abc\n"
      "127.0.0.1:9092           server:abc\n"
      "------------------------------\n"
      "\n"
      "Queue Status\n"
      "--------------------------------------\n"
      "key              total  free  pending\n"
      "--------------------------------------\n"
      "127.0.0.1:5555   1      1     0      \n"
      "abc              2      2     0      \n"
      "waiting          0      0     1      \n"
      "--------------------------------------\n";
  EXPECT_EQ(session.text_summary(), expected);

  const TrackerSummary s = session.summary();
  ASSERT_EQ(s.queues.size(), 4u);  // sorted; the expired key's queue stays, as in TVM
  EXPECT_EQ(s.queues[0].key, "127.0.0.1:5555");
  EXPECT_EQ(s.queues[3].key, "zzz-empty");
  const Json data = Json::parse(s.json);
  EXPECT_EQ(data["queue_info"]["abc"], Json::parse(R"({"free": 2, "pending": 0})"));
  EXPECT_EQ(data["server_info"][2], Json::parse(R"({"key": "server:127.0.0.1:5555",
                                                    "addr": ["10.0.0.7", 9093]})"));
}

TEST(TrackerSummary, EmptyTracker) {
  Tracker tracker(loopback());
  EXPECT_EQ(connect_tracker("127.0.0.1", tracker.port()).text_summary(),
            "Server List\n"
            "------------------------------\n"
            "server-address           key\n"
            "------------------------------\n"
            "------------------------------\n"
            "\n"
            "Queue Status\n"
            "---------------------------\n"
            "key   total  free  pending\n"
            "---------------------------\n"
            "---------------------------\n");
}

// ---------------------------------------------------------------------------------------------
// Tracker restart, clients

TEST(TrackerRestart, ARegistrationRegistersAgain) {
  auto tracker = std::make_unique<Tracker>(loopback());
  const int port = tracker->port();
  TrackerRegistration r(registration(port, "phoenix", 9091));
  register_free(r, 1);
  const std::string before = r.outstanding().at(0);
  tracker.reset();  // the tracker goes away
  EXPECT_TRUE(wait_until(
      [&] {
        r.maintain(1);
        return !r.connected();
      },
      5s));
  TrackerOptions o = loopback();
  o.port = port;
  o.port_end = port + 1;
  tracker = std::make_unique<Tracker>(o);
  TrackerSession session = connect_tracker("127.0.0.1", port);
  EXPECT_TRUE(wait_until(
      [&] {
        r.maintain(1);
        const TrackerSummary s = session.summary();
        return free_of(s, "phoenix") == 1 && servers_of(s, "phoenix") == 1;
      },
      10s));
  EXPECT_TRUE(r.connected());
  ASSERT_EQ(r.outstanding().size(), 1u);
  EXPECT_NE(r.outstanding()[0], before);
  EXPECT_EQ(session.request_server("phoenix", 1, 1s).matchkey, r.outstanding()[0]);
}

TEST(TrackerClient, ConnectFailuresAreClear) {
  // Nothing listens: a refused connection is retried until the timeout, then named.
  int free_port = 0;
  {
    Tracker t(loopback());
    free_port = t.port();
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    connect_tracker("127.0.0.1", free_port, 700ms);
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", free_port)));
  }
  // Not a speed bound: ignoring the 700 ms timeout would retry for the default 10 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);

  // Something that answers another magic is not a tracker.
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listen_fd, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread fake([&] {
    const int c = retry_on_signal([&] { return ::accept(listen_fd, nullptr, nullptr); });
    char buf[4];
    (void)retry_on_signal([&] { return ::recv(c, buf, 4, MSG_WAITALL); });
    const std::string other = le32(0xFF271);
    (void)send_all(c, other.data(), 4);
    ::close(c);
  });
  try {
    connect_tracker("127.0.0.1", ntohs(addr.sin_port), 2s);
    ADD_FAILURE() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not an RPC tracker"));
  }
  fake.join();
  ::close(listen_fd);
}

TEST(TrackerClient, BindsTheFirstFreePortInRange) {
  Tracker first(loopback());
  TrackerOptions o;
  o.port = first.port();
  // The first port is taken: the next free one of the range is bound.
  o.port_end = first.port() + 20;
  {
    Tracker next(o);
    EXPECT_GT(next.port(), first.port());
    EXPECT_LT(next.port(), o.port_end);
    EXPECT_TRUE(connect_tracker("127.0.0.1", next.port()).ping());
  }
  // A range of one taken port: the error names the range and the host.
  o.port_end = first.port() + 1;
  EXPECT_THAT([&] { Tracker clash(o); },
              ::testing::ThrowsMessage<RuntimeError>(
                  ::testing::AllOf(HasSubstr(fmt::format("cannot bind to any port in [{}, {})",
                                                         first.port(), first.port() + 1)),
                                   HasSubstr("127.0.0.1"))));
}

// ---------------------------------------------------------------------------------------------
// `kiln tracker`, `kiln query`, and the wire script

TEST(TrackerCli, TrackerAndQuery) {
  auto tracker = kiln::test::start_tracker({"--stop-key", "cli-secret"});
  const std::string where = fmt::format("127.0.0.1:{}", tracker.port);
  TrackerRegistration r(registration(tracker.port, "cli", 9091));
  register_free(r, 1);

  kiln::test::ChildProcess query({kiln::test::kiln_cli(), "query", "--tracker", where});
  ASSERT_EQ(query.wait_for(10s), 0) << query.log();
  EXPECT_THAT(query.log(), HasSubstr("127.0.0.1:9091           server:cli\n"));
  EXPECT_THAT(query.log(), HasSubstr("cli   1      1     0      \n"));

  kiln::test::ChildProcess json({kiln::test::kiln_cli(), "query", "--json", "--tracker", where});
  ASSERT_EQ(json.wait_for(10s), 0) << json.log();
  EXPECT_EQ(Json::parse(json.log())["queue_info"]["cli"]["free"], 1);

  // The default tracker comes from the environment.
  setenv("KILN_TRACKER_HOST", "127.0.0.1", 1);
  setenv("KILN_TRACKER_PORT", std::to_string(tracker.port).c_str(), 1);
  kiln::test::ChildProcess from_env({kiln::test::kiln_cli(), "query"});
  const auto env_code = from_env.wait_for(10s);
  unsetenv("KILN_TRACKER_HOST");
  unsetenv("KILN_TRACKER_PORT");
  EXPECT_EQ(env_code, 0) << from_env.log();
  EXPECT_THAT(from_env.log(), HasSubstr("server:cli"));

  kiln::test::ChildProcess bad({kiln::test::kiln_cli(), "query", "--tracker", "no-port"});
  EXPECT_EQ(bad.wait_for(10s), 2) << bad.log();
  int closed_port = 0;
  {
    Tracker t(loopback());
    closed_port = t.port();
  }
  kiln::test::ChildProcess unreachable({kiln::test::kiln_cli(), "query", "--timeout", "0.5",
                                        "--tracker", fmt::format("127.0.0.1:{}", closed_port)});
  EXPECT_EQ(unreachable.wait_for(10s), 3) << unreachable.log();
  EXPECT_THAT(unreachable.log(), HasSubstr("cannot query the tracker"));

  // STOP with the key given on the command line ends the process.
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port);
  EXPECT_FALSE(session.stop("wrong"));
  EXPECT_TRUE(session.stop("cli-secret"));
  EXPECT_EQ(tracker.process->wait_for(10s), 0) << tracker.process->log();
}

TEST(TrackerCli, StopsOnSigterm) {
  auto tracker = kiln::test::start_tracker();
  EXPECT_TRUE(connect_tracker("127.0.0.1", tracker.port).ping());
  tracker.process->kill(SIGTERM);
  EXPECT_EQ(tracker.process->wait_for(10s), 0) << tracker.process->log();
}

TEST(TrackerWire, PythonScriptSpeaksTheProtocolByteByByte) {
  const std::string python = KILN_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python 3 interpreter was found at configure time";
  auto tracker = kiln::test::start_tracker({"--stop-key", "wire-stop"});
  kiln::test::ChildProcess script({python,
                                   std::string(KILN_SOURCE_DIR) + "/tests/rpc/tracker_wire.py",
                                   std::to_string(tracker.port), "wire-stop"});
  EXPECT_EQ(script.wait_for(30s), 0) << script.log();
  // The script ends with STOP.
  EXPECT_EQ(tracker.process->wait_for(10s), 0) << tracker.process->log();
}

}  // namespace tracker_test
}  // namespace kiln::rpc
