// SPDX-License-Identifier: Apache-2.0
#include "rpc/handshake.h"

#include <fmt/format.h>

#include <cstring>

#include "rpc/tls_psk.h"

namespace kiln::rpc::handshake {

namespace {

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

std::string client(Connection& conn, const ConnectOptions& options,
                   std::chrono::steady_clock::time_point deadline) {
  if (!options.token.empty()) {
    tls::check_token_strength(options.token, "the client's token");
    const auto context = tls::client_context(tls::Purpose::kSession, options.token);
    try {
      conn.start_tls(*context, deadline);
    } catch (const tls::HandshakeError& e) {
      if (e.kind() == tls::HandshakeError::Kind::kTimedOut) {
        throw RuntimeError(fmt::format("{} did not complete the encrypted handshake in time ({})",
                                       conn.peer(), e.what()));
      }
      // Whatever the reason (a wrong token, a server without one, an impostor, a relay that
      // altered bytes), nothing was sent: fail closed.
      throw ValueError(fmt::format(
          "{} could not prove the channel: the TLS 1.3 handshake keyed by this client's token "
          "failed ({}). It is not a server that holds this token (an impostor, a relay that "
          "altered the bytes, a server with another token or none); nothing was sent to it",
          conn.peer(), e.what()));
    }
  }
  std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
  wire::Writer w(hello);
  w.u16(wire::kProtocolVersion);
  w.u16(0);
  append_string(hello, "client:" + options.key);
  w.f64(options.session_timeout_s);
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
  std::string message =
      read_string(conn, wire::kMaxHelloMessageBytes, "the server's hello message");
  const auto refused = [&](const std::string& why) {
    return RuntimeError(fmt::format("{} refused the session: {}", conn.peer(), why));
  };
  switch (static_cast<wire::HelloStatus>(status)) {
    case wire::HelloStatus::kAccepted:
      return message;
    case wire::HelloStatus::kAuthFailed:
      throw ValueError(fmt::format("{} refused the session: {}", conn.peer(), message));
    case wire::HelloStatus::kAuthRequired:
      // Authentication problems are ValueErrors: retrying with the same options cannot help.
      throw ValueError(
          fmt::format("{} refused the session: the server requires a token (ConnectOptions::token, "
                      "--token, or remote.token in a run config) and none was given",
                      conn.peer()));
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
  return hello;
}

void send_server_hello(Connection& conn, wire::HelloStatus status, const std::string& message) {
  std::vector<uint8_t> out(wire::kMagic, wire::kMagic + sizeof(wire::kMagic));
  wire::Writer w(out);
  w.u16(wire::kProtocolVersion);
  w.u16(static_cast<uint16_t>(status));
  append_string(out, message.substr(0, wire::kMaxHelloMessageBytes));
  conn.write_all(out.data(), out.size());
}

}  // namespace kiln::rpc::handshake
