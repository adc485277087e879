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

namespace kiln::rpc::test {

// A connection that completed the handshake with `key` (5 s bounds); the session is open.
inline std::unique_ptr<Connection> raw_session(const std::string& host, int port,
                                               const std::string& key) {
  auto conn = Connection::connect(host, port, std::chrono::seconds(5));
  conn->set_timeouts(std::chrono::seconds(5), std::chrono::seconds(5));
  ConnectOptions options;
  options.key = key;
  handshake::client(*conn, options, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  return conn;
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

}  // namespace kiln::rpc::test

#endif  // KILN_TESTS_RPC_RAW_SESSION_H_
