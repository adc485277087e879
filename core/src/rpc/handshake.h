// The session handshake (docs/rpc-protocol.md §2): magic, version, key, session timeout, and
// the mutual token challenge-response (HMAC-SHA256 over fresh nonces from both sides; the
// token itself never crosses the wire).
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

// What the client proves: HMAC-SHA256(token, "kiln-rpc-v2" || server_nonce || client_nonce
// || key), `key` being the client's hello key ("client:<key>").
Mac proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
          const std::string& key);
// What the server proves in its authentication result: HMAC-SHA256(token,
// "kiln-rpc-v2-server" || client_nonce || server_nonce || status || message). A client that
// holds a token accepts no session from a server that cannot compute it (an impostor, or a
// downgrade to a server without a token).
Mac server_proof(const std::string& token, const Nonce& client_nonce, const Nonce& server_nonce,
                 wire::HelloStatus status, const std::string& message);
// Compares in constant time.
bool equal(const Mac& a, const Mac& b);
Nonce random_nonce();

// Client side: sends the hello, answers a challenge, checks the server's proof, and returns
// the server's key ("server:<key>"). Throws RuntimeError saying what went wrong; ValueError for
// authentication problems (no token for a server that wants one, a wrong token, or a server
// that does not prove it holds the client's token).
std::string client(Connection& conn, const ConnectOptions& options);

// Server side: the client's hello.
struct ClientHello {
  uint16_t version = 0;
  std::string key;
  double session_timeout_s = 0;
  Nonce nonce{};  // the client's nonce, which the server's proof covers
};
// Reads the client's hello. Throws wire::ProtocolError for a peer that is not a Kiln client
// (answering a TVM client with TVM's MISMATCH code first, so that it says so). When the
// version is not kProtocolVersion it returns after the version, the rest unread (its layout
// belongs to that version).
ClientHello read_client_hello(Connection& conn);
// Sends the server hello.
void send_server_hello(Connection& conn, wire::HelloStatus status, const std::string& message,
                       const Nonce& nonce);
// Reads the client's proof.
Mac read_proof(Connection& conn);
// Sends the result of checking the proof, with the server's proof of the token (`proof`;
// zeros when the client's proof was wrong).
void send_auth_result(Connection& conn, wire::HelloStatus status, const std::string& message,
                      const Mac& proof);

}  // namespace kiln::rpc::handshake

#endif  // KILN_SRC_RPC_HANDSHAKE_H_
