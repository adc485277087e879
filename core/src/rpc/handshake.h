// The session handshake (docs/rpc-protocol.md §2): magic, version, key, session timeout, and
// the token challenge-response (HMAC-SHA256 over a fresh server nonce; the token itself
// never crosses the wire).
#ifndef KILN_SRC_RPC_HANDSHAKE_H_
#define KILN_SRC_RPC_HANDSHAKE_H_

#include <array>
#include <cstdint>
#include <string>

#include "kiln/rpc/session.h"
#include "rpc/connection.h"
#include "rpc/protocol.h"

namespace kiln::rpc::handshake {

using Nonce = std::array<uint8_t, wire::kNonceBytes>;
using Mac = std::array<uint8_t, wire::kMacBytes>;

// What the client proves: HMAC-SHA256(token, "kiln-rpc-v1" || nonce || key).
Mac proof(const std::string& token, const Nonce& nonce, const std::string& key);
// Compares in constant time.
bool equal(const Mac& a, const Mac& b);
Nonce random_nonce();

// Client side: sends the hello, answers a challenge, and returns the server's key
// ("server:<key>"). Throws RuntimeError saying what went wrong.
std::string client(Connection& conn, const ConnectOptions& options);

// Server side: the client's hello.
struct ClientHello {
  uint16_t version = 0;
  std::string key;
  double session_timeout_s = 0;
};
// Reads the client's hello. Throws wire::ProtocolError for a peer that is not a Kiln client
// (answering a TVM client with TVM's MISMATCH code first, so that it says so).
ClientHello read_client_hello(Connection& conn);
// Sends the server hello.
void send_server_hello(Connection& conn, wire::HelloStatus status, const std::string& message,
                       const Nonce& nonce);
// Reads the client's proof.
Mac read_proof(Connection& conn);
// Sends the result of checking the proof.
void send_auth_result(Connection& conn, wire::HelloStatus status, const std::string& message);

}  // namespace kiln::rpc::handshake

#endif  // KILN_SRC_RPC_HANDSHAKE_H_
