// SPDX-License-Identifier: Apache-2.0
// Sessions driven below the client API, for tests of hostile or vanishing clients: a bare
// handshake, then frames written by hand.
#ifndef KILN_TESTS_RPC_RAW_SESSION_H_
#define KILN_TESTS_RPC_RAW_SESSION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"

namespace kiln::test {

// In kiln::test with the other test helpers: a kiln::rpc::test namespace would hide kiln::test
// from RPC test files (`test::` inside kiln::rpc) batched with this header in a unity build.
using rpc::Connection;
using rpc::ConnectOptions;
namespace handshake = rpc::handshake;
namespace wire = rpc::wire;

// What a test's client connects with: `key`, `token` (empty: none, else TLS keyed by it) and a
// 10 s connect timeout.
inline ConnectOptions client_options(const std::string& key, const std::string& token = "") {
  ConnectOptions c;
  c.key = key;
  c.token = token;
  c.connect_timeout = std::chrono::seconds(10);
  return c;
}

// A connection that completed the handshake as `options` say (its key, its token: TLS then),
// with 5 s socket timeouts and a 10 s handshake deadline; the session is open.
inline std::unique_ptr<Connection> raw_session(const std::string& host, int port,
                                               const ConnectOptions& options) {
  auto conn = Connection::connect(host, port, std::chrono::seconds(5));
  conn->set_timeouts(std::chrono::seconds(5), std::chrono::seconds(5));
  handshake::client(*conn, options, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  return conn;
}

// The same with `key` and no token.
inline std::unique_ptr<Connection> raw_session(const std::string& host, int port,
                                               const std::string& key) {
  ConnectOptions options;
  options.key = key;
  return raw_session(host, port, options);
}

// Announces an Upload of `total` bytes to "big.bin" and sends only the first `sent`.
inline void start_upload(Connection& conn, uint64_t total, uint64_t sent) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str("big.bin");
  w.u64(total);
  conn.write_frame_start(wire::Code::kUpload, body, total);
  const std::vector<uint8_t> some(sent, 7);
  conn.write_all(some.data(), some.size());
}

// Uploads `n` bytes as `name` and reads the answer.
inline void upload(Connection& conn, const std::string& name, uint64_t n) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str(name);
  w.u64(n);
  const std::vector<uint8_t> data(n, 7);
  conn.write_frame(wire::Code::kUpload, body, data.data(), n);
  const Connection::FrameHeader h = conn.read_frame_header(1 << 20);
  std::vector<uint8_t> reply;
  conn.read_body(h.body_length(), reply, "Return");
}

// Asks for `name` back (the reply is not read here).
inline void ask_download(Connection& conn, const std::string& name) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str(name);
  conn.write_frame(wire::Code::kDownload, body);
}

}  // namespace kiln::test

#endif  // KILN_TESTS_RPC_RAW_SESSION_H_
