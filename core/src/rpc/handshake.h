// SPDX-License-Identifier: Apache-2.0
// The session handshake (docs/rpc-protocol.md §2). Under a token the connection is TLS 1.3
// keyed by the token first (rpc/tls_psk.h): both sides prove the token before either sends a
// byte of the hello, and every later byte is encrypted and authenticated. Then, with or
// without a token: magic, version, key, session timeout; the server's answer.
#ifndef KILN_SRC_RPC_HANDSHAKE_H_
#define KILN_SRC_RPC_HANDSHAKE_H_

#include <cstdint>
#include <string>

#include "kiln/rpc/session.h"
#include "rpc/connection.h"
#include "rpc/protocol.h"

namespace kiln::rpc::handshake {

// Client side: with options.token, the TLS handshake, then the hello; returns the server's key
// ("server:<key>"). Throws ValueError for authentication problems (a server that cannot prove
// the channel: an impostor, a relay that altered bytes, a server without this token; a server
// that requires a token none was given for) and RuntimeError for the rest, naming the peer.
// The connection's deadline bounds the whole exchange.
std::string client(Connection& conn, const ConnectOptions& options,
                   std::chrono::steady_clock::time_point deadline);

// Server side: the client's hello.
struct ClientHello {
  uint16_t version = 0;
  std::string key;
  double session_timeout_s = 0;
};
// Reads the client's hello. Throws wire::ProtocolError for a peer that is not a Kiln client
// (answering a TVM client with TVM's MISMATCH code first, so that it says so). When the
// version is not kProtocolVersion it returns after the version, the rest unread (its layout
// belongs to that version).
ClientHello read_client_hello(Connection& conn);
// Sends the server hello.
void send_server_hello(Connection& conn, wire::HelloStatus status, const std::string& message);

}  // namespace kiln::rpc::handshake

#endif  // KILN_SRC_RPC_HANDSHAKE_H_
