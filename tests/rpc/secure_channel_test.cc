// SPDX-License-Identifier: Apache-2.0
// Issue 27: the channel under a token (TLS 1.3 keyed by the token, rpc/tls_psk.h) against a
// relay through the tracker, impostors, guessing from many addresses, and a refusal flood. On
// loopback with real servers (in this process, or `kiln rpc-server` children).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/auth_throttle.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace secure_channel_test {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

const std::string kToken = "kiln-test-token-0123456789abcdef";

ServerOptions with_token(const std::string& key = "board") {
  ServerOptions o;
  o.port = 0;
  o.key = key;
  o.token = kToken;
  o.test_hooks.test_functions = true;
  return o;
}

ConnectOptions client(const std::string& token = kToken, const std::string& key = "board") {
  return test::client_options(key, token);
}

using kiln::test::connect_from;

// A listening socket on 127.0.0.1, an ephemeral port (in `*port`).
int listen_on_loopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 4);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// One TLS handshake from `source` with `token`; what the server made of it.
enum class Guess { kAccepted, kRefused, kNoConnection };
Guess guess_from(const char* source, int port, const std::string& token) {
  const int fd = connect_from(source, port);
  if (fd < 0) return Guess::kNoConnection;
  const tls::Context context(tls::Context::Side::kClient, tls::Purpose::kSession, token);
  Guess result = Guess::kAccepted;
  try {
    tls::Session session(context, fd, std::chrono::steady_clock::now() + 15s);
  } catch (const tls::HandshakeError&) {
    result = Guess::kRefused;
  }
  ::close(fd);
  return result;
}

// A whole session handshake (TLS with `token`, then the hello) from `source`: the server's key
// when it accepted the session, else what went wrong. The session ends when this returns.
std::string session_from(const char* source, int port, const std::string& token = kToken) {
  const int fd = connect_from(source, port);
  if (fd < 0) return "no connection";
  auto conn = Connection::adopt(fd, fmt::format("127.0.0.1:{}", port));
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  conn->set_deadline(deadline);
  try {
    return handshake::client(*conn, client(token), deadline);
  } catch (const std::exception& e) {
    return std::string("refused: ") + e.what();
  }
}

using kiln::test::closed_by;

// Connections from one address that start a TLS ClientHello (a record of 512 bytes) and send
// it one byte every 200 ms, each, for at most 10 s.
class TlsDripper {
 public:
  TlsDripper(int port, const char* source, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = connect_from(source, port);
      if (fd >= 0) fds_.push_back(fd);
    }
    thread_ = std::thread([this] {
      const uint8_t header[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};  // a record, ClientHello
      for (size_t step = 0; step < 50 && !stop_; ++step) {
        const uint8_t byte = step < sizeof(header) ? header[step] : 0;
        for (const int fd : fds_) ::send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        for (int i = 0; i < 4 && !stop_; ++i) std::this_thread::sleep_for(50ms);
      }
    });
  }
  ~TlsDripper() {
    stop_ = true;
    thread_.join();
    for (const int fd : fds_) ::close(fd);
  }
  const std::vector<int>& fds() const { return fds_; }

 private:
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A man in the middle on loopback: accepts one client, connects it to 127.0.0.1:`target`, and
// forwards both ways, keeping a copy of every byte. `tamper(direction, offset, byte)` may
// change a byte on the way (direction 0: client to server, 1: server to client).
class Relay {
 public:
  using Tamper = std::function<uint8_t(int, uint64_t, uint8_t)>;
  explicit Relay(int target, Tamper tamper = {}) : target_(target), tamper_(std::move(tamper)) {
    listener_ = listen_on_loopback(&port_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }
  // From now on, forwards what the client sends one byte every 200 ms (a peer that drips).
  void drip() { drip_ = true; }
  // Everything that went through, both directions.
  std::string seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void run() {
    pollfd accept_poll{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&accept_poll, 1, 100) == 0) {
    }
    if (stop_) return;
    const int a = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    const int b = connect_from("127.0.0.1", target_);
    if (a < 0 || b < 0) return;
    uint64_t offsets[2] = {0, 0};
    char buf[65536];
    while (!stop_) {
      pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(fds, 2, 100) <= 0) continue;
      bool closed = false;
      for (int dir = 0; dir < 2; ++dir) {
        if ((fds[dir].revents & (POLLIN | POLLHUP)) == 0) continue;
        const int from = dir == 0 ? a : b;
        const int to = dir == 0 ? b : a;
        const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
        if (n <= 0) {
          closed = true;
          break;
        }
        for (ssize_t i = 0; i < n && tamper_; ++i) {
          buf[i] = static_cast<char>(tamper_(dir, offsets[dir] + i, static_cast<uint8_t>(buf[i])));
        }
        offsets[dir] += static_cast<uint64_t>(n);
        {
          std::lock_guard lock(mu_);
          seen_.append(buf, static_cast<size_t>(n));
        }
        if (dir == 0 && drip_) {
          closed = !drip_to_server(buf, static_cast<size_t>(n), b);
        } else if (::send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
          closed = true;
        }
      }
      if (closed) break;
    }
    ::close(a);
    ::close(b);
  }

  // Sends `n` bytes to the server (`b`) one every 200 ms; false once the server closed.
  bool drip_to_server(const char* data, size_t n, int b) {
    for (size_t i = 0; i < n && !stop_; ++i) {
      if (::send(b, data + i, 1, MSG_NOSIGNAL) != 1) return false;
      pollfd p{b, POLLIN, 0};
      if (::poll(&p, 1, 200) > 0) {
        char scratch[256];
        if (::recv(b, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) return false;
      }
    }
    return true;
  }

  int target_;
  Tamper tamper_;
  std::atomic<bool> drip_{false};
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string seen_;
};

// A fake server: accepts one connection and answers a Kiln hello as accepted without any TLS
// (the naive impostor of issue 16), keeping what the client sent.
class PlaintextImpostor {
 public:
  PlaintextImpostor() {
    thread_ = std::make_unique<std::thread>([this] { run(); });
  }
  ~PlaintextImpostor() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_->join();
    ::close(listener_);
  }
  int port() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return port_ != 0; });
    return port_;
  }
  std::string received() {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  void run() {
    int port = 0;
    listener_ = listen_on_loopback(&port);
    {
      std::lock_guard lock(mu_);
      port_ = port;
    }
    cv_.notify_all();
    pollfd p{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&p, 1, 100) == 0) {
    }
    if (stop_) return;
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      std::lock_guard lock(mu_);
      received_.assign(buf, static_cast<size_t>(n));
    }
    std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
    wire::Writer w(hello);
    w.u16(wire::kProtocolVersion);
    w.u16(static_cast<uint16_t>(wire::HelloStatus::kAccepted));
    w.str("server:board");
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    ::recv(fd, buf, sizeof(buf), 0);  // until the client gives up
    ::close(fd);
  }

  std::unique_ptr<std::thread> thread_;
  int listener_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::string received_;
};

TEST(SecureChannel, TheRealServerAndAClientWithItsTokenShareASession) {
  Server server(with_token());
  RPCSession s = connect("127.0.0.1", server.port(), client());
  EXPECT_EQ(s.server_key(), "server:board");
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{41}).cast<int64_t>(), 42);
}

TEST(SecureChannel, ShortTokensAreRefusedOnBothSides) {
  ServerOptions o = with_token();
  o.token = "s3cret";
  EXPECT_THAT([&] { Server server(o); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("kiln rpc-token")));
  Server server(with_token());
  EXPECT_THAT([&] { connect("127.0.0.1", server.port(), client("s3cret")); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("at least 16")));
}

TEST(SecureChannel, AWrongTokenCannotCompleteTheChannel) {
  Server server(with_token());
  EXPECT_THAT([&] { connect("127.0.0.1", server.port(), client("another-token-0123456789")); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("could not prove the channel")));
  // The server goes on.
  RPCSession s = connect("127.0.0.1", server.port(), client());
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// Nothing about a server with a token (its key, whether it is busy) is told to a client that
// sends a plaintext hello: only that a token is needed.
TEST(SecureChannel, AClientWithoutTheTokenIsToldOnlyThatOneIsNeeded) {
  Server server(with_token("hidden-key"));
  RPCSession holder = connect("127.0.0.1", server.port(), client(kToken, "hidden-key"));
  EXPECT_THAT(
      [&] { connect("127.0.0.1", server.port(), client("", "guess")); },
      ::testing::ThrowsMessage<ValueError>(::testing::AllOf(
          HasSubstr("requires a token"), Not(HasSubstr("hidden-key")), Not(HasSubstr("busy")))));
}

// The naive impostor (accepts without TLS) and the challenge collector (keeps what the client
// sends) get nothing: the client starts with a TLS ClientHello, which carries no key and no
// token, and refuses to go on.
TEST(SecureChannel, AnImpostorWithoutTheTokenIsRefusedAndGetsNothing) {
  PlaintextImpostor impostor;
  const int port = impostor.port();
  EXPECT_THAT([&] { connect("127.0.0.1", port, client(kToken, "board")); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("could not prove the channel")));
  const std::string sent = impostor.received();
  EXPECT_FALSE(sent.empty());
  EXPECT_TRUE(tls::starts_tls(static_cast<uint8_t>(sent[0])));
  EXPECT_THAT(sent, Not(HasSubstr(kToken)));
  EXPECT_THAT(sent, Not(HasSubstr("board")));
  EXPECT_THAT(sent, Not(HasSubstr("KILN-RPC")));
}

// Issue 27, defect 1: a relay the victim reaches through the tracker sees only ciphertext; the
// session itself works end to end with the real server.
TEST(SecureChannel, ARelaySeesOnlyCiphertext) {
  Server server(with_token());
  Relay relay(server.port());
  RPCSession s = connect("127.0.0.1", relay.port(), client());
  const std::string marker = "PLAINTEXT-MARKER-7f3a";
  EXPECT_EQ(s.get_function("rpc.test.strcat")(marker, int64_t{7}).cast<std::string>(),
            marker + ":7");
  std::vector<uint8_t> pattern(1 << 16);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = "KILN-INPUT-DATA!"[i % 16];
  Tensor remote = Tensor::empty({static_cast<int64_t>(pattern.size())}, DataType::UInt(8), s.cpu());
  remote.copy_from(pattern.data(), pattern.size());
  std::vector<uint8_t> back(pattern.size());
  remote.copy_to(back.data(), back.size());
  EXPECT_EQ(back, pattern);
  s.close();
  const std::string seen = relay.seen();
  EXPECT_GT(seen.size(), pattern.size());
  EXPECT_THAT(seen, Not(HasSubstr(marker)));
  EXPECT_THAT(seen, Not(HasSubstr("KILN-INPUT-DATA!")));
  EXPECT_THAT(seen, Not(HasSubstr("rpc.test.strcat")));
  EXPECT_THAT(seen, Not(HasSubstr("KILN-RPC")));
}

// A relay that alters one byte of the server's replies: the client fails closed.
TEST(SecureChannel, ARelayThatAltersABytesFailsClosed) {
  Server server(with_token());
  std::atomic<bool> armed{false};
  Relay relay(server.port(), [&](int direction, uint64_t, uint8_t byte) -> uint8_t {
    if (direction == 1 && armed.exchange(false)) return byte ^ 0x20;
    return byte;
  });
  RPCSession s = connect("127.0.0.1", relay.port(), client());
  Function addone = s.get_function("rpc.test.addone");
  EXPECT_EQ(addone(int64_t{1}).cast<int64_t>(), 2);
  armed = true;
  EXPECT_THAT([&] { addone(int64_t{2}); },
              ::testing::ThrowsMessage<RuntimeError>(HasSubstr("integrity check")));
}

// Guessing from many addresses is bounded overall, yet a client holding the token is served;
// an address that guessed wrong repeatedly waits between its checks.
TEST(SecureChannel, GuessesFromOtherAddressesDoNotLockOutTheTokenHolder) {
  ServerOptions o = with_token();
  o.handshake_timeout_s = 5;
  Server server(o);
  // The token holder proves itself once: it is trusted from then on.
  connect("127.0.0.1", server.port(), client()).close();
  int refused = 0;
  for (int i = 1; i <= 60; ++i) {
    const std::string source = fmt::format("127.0.9.{}", i);
    refused +=
        guess_from(source.c_str(), server.port(), "guess-token-0123456789") == Guess::kRefused;
  }
  EXPECT_EQ(refused, 60);
  // Over the overall budget now: the token holder is still served at once.
  RPCSession s = connect("127.0.0.1", server.port(), client());
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  s.close();
  // One address past its own budget waits kAddressSpacing between checks.
  for (int i = 0; i < AuthThrottle::kFreeFailuresPerAddress; ++i) {
    guess_from("127.0.10.1", server.port(), "guess-token-0123456789");
  }
  const auto start = std::chrono::steady_clock::now();
  guess_from("127.0.10.1", server.port(), "guess-token-0123456789");
  guess_from("127.0.10.1", server.port(), "guess-token-0123456789");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1500ms);
}

// Issue 37, defect 4: the TLS handshake had a deadline per read, not in all. Connections that
// drip a ClientHello one byte at a time were never closed, and the 8 of them held every
// handshake their address may have at once: a token holder from that address was refused.
TEST(SecureChannel, ADrippedTlsHandshakeEndsAtItsDeadlineAndFreesItsAddress) {
  ServerOptions o = with_token();
  o.handshake_timeout_s = 1;
  Server server(o);
  const auto start = std::chrono::steady_clock::now();
  TlsDripper dripper(server.port(), "127.0.14.1", 8);
  ASSERT_EQ(dripper.fds().size(), 8u);
  std::this_thread::sleep_for(300ms);
  // While they drip, a token holder from the same address is served.
  EXPECT_EQ(session_from("127.0.14.1", server.port()), "server:board");
  // Every one of them is closed at its deadline (1 s; 3 s of margin), bytes or not.
  for (const int fd : dripper.fds()) EXPECT_TRUE(closed_by(fd, start + 4s));
}

// Issue 37, defect 4: after the TLS handshake, a hello dripped inside the encrypted channel one
// byte at a time: each read waited for the next byte, so the handshake lasted as long as the
// client liked (here 12 s of dripping; the deadline is 1 s).
TEST(SecureChannel, AHelloDrippedInsideTlsEndsAtTheHandshakeDeadline) {
  ServerOptions o = with_token();
  o.handshake_timeout_s = 1;
  Server server(o);
  Relay relay(server.port());
  const int fd = connect_from("127.0.0.1", relay.port());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  const tls::Context context(tls::Context::Side::kClient, tls::Purpose::kSession, kToken);
  tls::Session session(context, fd, start + 10s);
  relay.drip();
  std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
  wire::Writer w(hello);
  w.u16(wire::kProtocolVersion);
  w.u16(0);
  w.str("client:board");
  w.f64(0);
  ASSERT_EQ(session.send(hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
  EXPECT_TRUE(closed_by(fd, start + 4s));
  ::close(fd);
}

// Issue 37, defect 5: wrong tokens from 40 addresses spent the overall guess budget, and every
// token holder that had not connected within the hour was refused with them. A holder whose
// address never guessed wrong is checked at once, however many other addresses guess.
TEST(SecureChannel, GuessesFromManyAddressesDoNotLockOutANewTokenHolder) {
  ServerOptions o = with_token();
  // The default deadline: a holder's handshake now runs in a session process started for it,
  // and under ASan that start alone can take longer than 2 s (every holder was cut off at a
  // 2 s deadline there, its session process killed before it could answer).
  o.handshake_timeout_s = 10;
  Server server(o);
  const int port = server.port();
  const tls::Context wrong(tls::Context::Side::kClient, tls::Purpose::kSession,
                           "guess-token-0123456789");
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::vector<std::thread> guessers;
  for (int i = 1; i <= 40; ++i) {
    guessers.emplace_back([&, i] {
      const std::string source = fmt::format("127.0.15.{}", i);
      while (!stop) {
        const int fd = connect_from(source.c_str(), port);
        if (fd >= 0) {
          try {
            tls::Session s(wrong, fd, std::chrono::steady_clock::now() + 5s);
          } catch (const tls::HandshakeError&) {
            ++refused;
          }
          ::close(fd);
        }
        std::this_thread::sleep_for(20ms);
      }
    });
  }
  // Past the overall budget (50 wrong tokens), and a queue of checks up to the deadline.
  EXPECT_TRUE(kiln::test::wait_until([&] { return refused >= 150; }, 60s)) << refused;
  int served = 0;
  std::string last;
  for (int i = 1; i <= 5; ++i) {
    const std::string source = fmt::format("127.0.16.{}", i);
    last = session_from(source.c_str(), port);
    served += last == "server:board";
    // The server frees the session's slot (one slot): waited for, not slept on; 200 ms was
    // too short in the fresh-Debian run's ASan pass, and the next holder was told "busy".
    EXPECT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 0; }, 10s));
  }
  stop = true;
  for (auto& t : guessers) t.join();
  EXPECT_EQ(served, 5) << last;
}

// A token holder's first flight (its ClientHello, whose PSK binder proves the token), taken
// from a real client handshake on a socket pair and sent to `port` from `source`; nothing
// follows it, as from a holder whose session process is slow to answer. Returns the socket.
int send_verified_first_flight(const char* source, int port) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return -1;
  const tls::Context right(tls::Context::Side::kClient, tls::Purpose::kSession, kToken);
  std::thread holder([&] {
    try {
      tls::Session session(right, pair[0], std::chrono::steady_clock::now() + 10s);
    } catch (const tls::HandshakeError&) {
      // Ends when the pair closes below: only its first flight was wanted.
    }
  });
  std::vector<uint8_t> flight(5);
  bool complete = false;
  if (::recv(pair[1], flight.data(), 5, MSG_WAITALL) == 5 && flight[0] == 0x16) {
    const size_t body = (size_t{flight[3]} << 8) | flight[4];
    flight.resize(5 + body);
    complete = ::recv(pair[1], flight.data() + 5, body, MSG_WAITALL) == static_cast<ssize_t>(body);
  }
  ::close(pair[1]);
  holder.join();
  ::close(pair[0]);
  const int fd = complete ? connect_from(source, port) : -1;
  if (fd >= 0 && ::send(fd, flight.data(), flight.size(), MSG_NOSIGNAL) !=
                     static_cast<ssize_t>(flight.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The fresh-Debian run's ASan pass: 4 of 5 holders served in the test above, the fifth cut off
// ("unexpected eof") because the handshake table, full of guessers, ended the oldest handshake
// to make room, and that was the holder's, still waiting for its session process. A handshake
// whose first flight proved the token keeps its place until its own deadline.
TEST(SecureChannel, AHolderWhoseFirstFlightVerifiedIsNotPushedOutByNewConnections) {
  ServerOptions o = with_token();
  o.handshake_timeout_s = 10;
  Server server(o);
  const int port = server.port();
  const int holder = send_verified_first_flight("127.0.17.1", port);
  ASSERT_GE(holder, 0);
  // The server's answer (the session process's ServerHello) says the first flight verified.
  pollfd p{holder, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "no answer to a verified first flight in 10 s";
  // 40 connections from 5 addresses that drip their ClientHello: more than the 32 handshakes
  // the server keeps, so each new one ends the oldest it may end.
  std::vector<std::unique_ptr<TlsDripper>> drippers;
  for (int i = 1; i <= 5; ++i) {
    drippers.push_back(
        std::make_unique<TlsDripper>(port, fmt::format("127.0.18.{}", i).c_str(), 8));
  }
  EXPECT_FALSE(closed_by(holder, std::chrono::steady_clock::now() + 3s))
      << "the holder's handshake was ended to make room for connections that proved nothing";
  drippers.clear();
  ::close(holder);
}

// The guess budget, on its own clock: per source, with a lane for sources that never guessed
// wrong, and the overall limit only for sources that did.
TEST(AuthThrottleRules, OnlySourcesThatGuessedWrongWaitForTheOverallBudget) {
  AuthThrottle throttle;
  auto now = AuthThrottle::Clock::now();
  const auto deadline = [&] { return now + 10s; };
  // 60 sources each guess wrong once: the overall budget is spent.
  for (int i = 0; i < 60; ++i) {
    const std::string ip = fmt::format("10.0.0.{}", i);
    ASSERT_EQ(throttle.admit(ip, now, deadline()), now);
    throttle.record(ip, AuthThrottle::Outcome::kWrong, now);
  }
  // A source that never guessed wrong is checked now; one that did waits its turn overall.
  EXPECT_EQ(throttle.admit("10.0.1.1", now, deadline()), now);
  throttle.record("10.0.1.1", AuthThrottle::Outcome::kRight, now);
  const auto second = throttle.admit("10.0.0.1", now, deadline());
  ASSERT_TRUE(second);
  const auto third = throttle.admit("10.0.0.2", now, deadline());
  ASSERT_TRUE(third);
  EXPECT_GE(*third - *second, AuthThrottle::kGlobalSpacing);
  // A check that cannot start before the deadline reserves nothing.
  EXPECT_FALSE(throttle.admit("10.0.0.3", now, now + 1ms));
}

TEST(AuthThrottleRules, ACheckInProgressPutsItsSourceInTheGuessingLane) {
  AuthThrottle throttle;
  const auto now = AuthThrottle::Clock::now();
  for (int i = 0; i < 60; ++i) {
    const std::string ip = fmt::format("10.0.0.{}", i);
    ASSERT_TRUE(throttle.admit(ip, now, now + 10s));
    throttle.record(ip, AuthThrottle::Outcome::kWrong, now);
  }
  // A fresh source opens two connections at once: the first is checked now, in its own lane;
  // the second waits its turn in the guessing lane, behind a guesser's check.
  EXPECT_EQ(throttle.admit("10.0.2.1", now, now + 10s), now);
  ASSERT_TRUE(throttle.admit("10.0.0.5", now, now + 10s));
  const auto second = throttle.admit("10.0.2.1", now, now + 10s);
  ASSERT_TRUE(second);
  EXPECT_GE(*second - now, AuthThrottle::kGlobalSpacing);
  // Checks that ended without an answer (the peer left) give their places back.
  throttle.record("10.0.2.1", AuthThrottle::Outcome::kUndecided, now);
  throttle.record("10.0.2.1", AuthThrottle::Outcome::kUndecided, now);
  EXPECT_EQ(throttle.admit("10.0.2.1", now, now + 10s), now);
}

TEST(AuthThrottleRules, AnIpv6SourceIsItsSlash64) {
  EXPECT_EQ(AuthThrottle::source_of("2001:db8:1:2:3:4:5:6"),
            AuthThrottle::source_of("2001:db8:1:2:ffff::1"));
  EXPECT_NE(AuthThrottle::source_of("2001:db8:1:2::1"), AuthThrottle::source_of("2001:db8:1:3::1"));
  EXPECT_EQ(AuthThrottle::source_of("127.0.0.2"), "127.0.0.2");
  EXPECT_NE(AuthThrottle::source_of("127.0.0.2"), AuthThrottle::source_of("127.0.0.3"));
}

// Refusals are logged at most 10 per 10 s, then summed up: a flood does not flood the log.
TEST(SecureChannel, RefusalsAreLoggedRateLimited) {
  const auto token_file = std::filesystem::temp_directory_path() /
                          fmt::format("kiln-secure-channel-token-{}", ::getpid());
  std::ofstream(token_file) << kToken << "\n";
  auto server = kiln::test::start_rpc_server(
      {"--key", "board", "--token-file", token_file.string(), "--handshake-timeout", "2"});
  ASSERT_GT(server.port, 0);
  for (int i = 1; i <= 40; ++i) {
    const std::string source = fmt::format("127.0.11.{}", i);
    guess_from(source.c_str(), server.port, "guess-token-0123456789");
  }
  // A last refusal after the interval carries the summary.
  std::this_thread::sleep_for(10500ms);
  guess_from("127.0.11.200", server.port, "guess-token-0123456789");
  EXPECT_TRUE(kiln::test::wait_until(
      [&] { return server.process->log().find("more refused connections") != std::string::npos; },
      5s))
      << server.process->log();
  const std::string log = server.process->log();
  const auto refusals = std::count_if(log.begin(), log.end(), [](char c) { return c == '\n'; });
  EXPECT_LT(refusals, 30) << log;
  std::filesystem::remove(token_file);
}

}  // namespace secure_channel_test
}  // namespace kiln::rpc
