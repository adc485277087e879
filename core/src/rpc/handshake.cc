#include "rpc/handshake.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "kiln/sdk/support/sha256.hpp"

namespace kiln::rpc::handshake {

using sdk::Sha256;

namespace {
constexpr char kProofContext[] = "kiln-rpc-v2";
constexpr char kServerProofContext[] = "kiln-rpc-v2-server";

std::string read_string(Connection& conn, uint32_t limit, const char* what) {
  uint32_t len = 0;
  conn.read_exact(&len, sizeof(len), what);
  if (len > limit) {
    throw wire::ProtocolError(
        fmt::format("{} sent a {} of {} bytes; the limit is {}", conn.peer(), what, len, limit));
  }
  std::string s(len, '\0');
  if (len > 0) conn.read_exact(s.data(), len, what);
  return s;
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  wire::Writer w(out);
  w.u32(static_cast<uint32_t>(s.size()));
  w.raw(s.data(), s.size());
}
}  // namespace

Mac proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
          const std::string& key) {
  std::vector<uint8_t> message(kProofContext, kProofContext + sizeof(kProofContext) - 1);
  message.insert(message.end(), server_nonce.begin(), server_nonce.end());
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  message.insert(message.end(), key.begin(), key.end());
  return Sha256::hmac(token, message.data(), message.size());
}

Mac server_proof(const std::string& token, const Nonce& client_nonce, const Nonce& server_nonce,
                 wire::HelloStatus status, const std::string& text) {
  std::vector<uint8_t> message(kServerProofContext,
                               kServerProofContext + sizeof(kServerProofContext) - 1);
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  message.insert(message.end(), server_nonce.begin(), server_nonce.end());
  const auto code = static_cast<uint16_t>(status);
  message.push_back(static_cast<uint8_t>(code & 0xFF));
  message.push_back(static_cast<uint8_t>(code >> 8));
  message.insert(message.end(), text.begin(), text.end());
  return Sha256::hmac(token, message.data(), message.size());
}

bool equal(const Mac& a, const Mac& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

Nonce random_nonce() {
  std::random_device rd;  // the kernel's CSPRNG on Linux
  Nonce n{};
  for (size_t i = 0; i < n.size(); i += 4) {
    const uint32_t v = rd();
    std::memcpy(n.data() + i, &v, 4);
  }
  return n;
}

std::string client(Connection& conn, const ConnectOptions& options) {
  std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
  wire::Writer w(hello);
  w.u16(wire::kProtocolVersion);
  w.u16(0);
  const std::string key = "client:" + options.key;
  append_string(hello, key);
  w.f64(options.session_timeout_s);
  const Nonce client_nonce = random_nonce();
  w.raw(client_nonce.data(), client_nonce.size());
  conn.write_all(hello.data(), hello.size());

  char magic[sizeof(wire::kMagic)];
  try {
    conn.read_exact(magic, sizeof(magic), "the server's hello");
  } catch (const ConnectionError& e) {
    throw RuntimeError(fmt::format(
        "{} is not a Kiln RPC server, or refused the connection: it closed it during the "
        "handshake ({})",
        conn.peer(), e.what()));
  }
  if (std::memcmp(magic, wire::kMagic, sizeof(magic)) != 0) {
    throw RuntimeError(fmt::format(
        "{} is not a Kiln RPC server: its first bytes are not the Kiln RPC magic", conn.peer()));
  }
  uint16_t version = 0;
  uint16_t status = 0;
  conn.read_exact(&version, 2, "the server's version");
  conn.read_exact(&status, 2, "the server's status");
  const std::string message =
      read_string(conn, wire::kMaxHelloMessageBytes, "the server's hello message");
  Nonce nonce{};
  conn.read_exact(nonce.data(), nonce.size(), "the server's nonce");
  const auto refused = [&](const std::string& why) {
    return RuntimeError(fmt::format("{} refused the session: {}", conn.peer(), why));
  };
  switch (static_cast<wire::HelloStatus>(status)) {
    case wire::HelloStatus::kAccepted:
      if (!options.token.empty()) {
        // A server that holds the token always challenges: one that does not is an impostor
        // (or a server without a token), and it would receive the client's modules and data.
        throw ValueError(fmt::format(
            "{} accepted the session without asking for the token: it is not a server that "
            "holds this client's token (an impostor, or a server started without --token); "
            "refusing to use it",
            conn.peer()));
      }
      return message;
    case wire::HelloStatus::kAuthFailed:
      throw ValueError(fmt::format("{} refused the session: {}", conn.peer(), message));
    case wire::HelloStatus::kAuthRequired: {
      if (options.token.empty()) {
        // Authentication problems are ValueErrors: retrying with the same token cannot help.
        throw ValueError(fmt::format(
            "{} refused the session: the server requires a token (ConnectOptions::token, "
            "--token, or remote.token in a run config) and none was given",
            conn.peer()));
      }
      const Mac mac = proof(options.token, nonce, client_nonce, key);
      conn.write_all(mac.data(), mac.size());
      uint16_t result = 0;
      conn.read_exact(&result, 2, "the authentication result");
      const std::string result_message =
          read_string(conn, wire::kMaxHelloMessageBytes, "the authentication result");
      Mac server_mac{};
      conn.read_exact(server_mac.data(), server_mac.size(), "the server's token proof");
      const auto result_status = static_cast<wire::HelloStatus>(result);
      if (result_status == wire::HelloStatus::kAuthFailed) {
        throw ValueError(fmt::format("{} refused the session: {}", conn.peer(), result_message));
      }
      if (!equal(server_mac,
                 server_proof(options.token, client_nonce, nonce, result_status, result_message))) {
        throw ValueError(fmt::format(
            "{} did not prove that it holds the token (its answer to this client's nonce is "
            "wrong): it is not the server the token is for; refusing to use it",
            conn.peer()));
      }
      if (result_status != wire::HelloStatus::kAccepted) throw refused(result_message);
      return result_message;
    }
    case wire::HelloStatus::kVersionMismatch:
      throw refused(
          fmt::format("protocol version mismatch: this client speaks version {}, the "
                      "server version {} ({})",
                      wire::kProtocolVersion, version, message));
    default:
      throw refused(message);
  }
}

ClientHello read_client_hello(Connection& conn) {
  char magic[sizeof(wire::kMagic)];
  conn.read_exact(magic, 4, "the client's hello");
  uint32_t first = 0;
  std::memcpy(&first, magic, 4);
  if (first == wire::kTvmRpcMagic) {
    const uint32_t mismatch = wire::kTvmCodeMismatch;
    conn.write_all(&mismatch, sizeof(mismatch));
    throw wire::ProtocolError(
        fmt::format("{} is a TVM RPC client; Kiln servers speak Kiln's own session protocol "
                    "(docs/rpc-protocol.md)",
                    conn.peer()));
  }
  conn.read_exact(magic + 4, 4, "the client's hello");
  if (std::memcmp(magic, wire::kMagic, sizeof(magic)) != 0) {
    throw wire::ProtocolError(
        fmt::format("{} is not a Kiln RPC client: wrong magic bytes", conn.peer()));
  }
  ClientHello hello;
  uint16_t reserved = 0;
  conn.read_exact(&hello.version, 2, "the client's version");
  if (hello.version != wire::kProtocolVersion) return hello;
  conn.read_exact(&reserved, 2, "the client's hello");
  hello.key = read_string(conn, wire::kMaxKeyBytes, "client key");
  conn.read_exact(&hello.session_timeout_s, 8, "the client's session timeout");
  if (!(hello.session_timeout_s >= 0) || hello.session_timeout_s > 1e9) {
    throw wire::ProtocolError(fmt::format("{} asked for an invalid session timeout {}", conn.peer(),
                                          hello.session_timeout_s));
  }
  conn.read_exact(hello.nonce.data(), hello.nonce.size(), "the client's nonce");
  return hello;
}

void send_server_hello(Connection& conn, wire::HelloStatus status, const std::string& message,
                       const Nonce& nonce) {
  std::vector<uint8_t> out(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
  wire::Writer w(out);
  w.u16(wire::kProtocolVersion);
  w.u16(static_cast<uint16_t>(status));
  append_string(out, message.substr(0, wire::kMaxHelloMessageBytes));
  w.raw(nonce.data(), nonce.size());
  conn.write_all(out.data(), out.size());
}

Mac read_proof(Connection& conn) {
  Mac mac{};
  conn.read_exact(mac.data(), mac.size(), "the client's token proof");
  return mac;
}

void send_auth_result(Connection& conn, wire::HelloStatus status, const std::string& message,
                      const Mac& proof) {
  std::vector<uint8_t> out;
  wire::Writer w(out);
  w.u16(static_cast<uint16_t>(status));
  append_string(out, message.substr(0, wire::kMaxHelloMessageBytes));
  w.raw(proof.data(), proof.size());
  conn.write_all(out.data(), out.size());
}

}  // namespace kiln::rpc::handshake
