// SPDX-License-Identifier: Apache-2.0
// The errors of RPC calls (kiln::rpc::RPCError, RPCSessionTimeoutError, ServerLostError). They live
// beside the other kiln errors (throw_error raises them for their codes), not with the client, so
// that the error layer depends on nothing above it.
#ifndef KILN_RPC_RPC_ERROR_H_
#define KILN_RPC_RPC_ERROR_H_

#include <cstdint>
#include <string>

#include "kiln/error.h"

namespace kiln::rpc {

// What every RPCError's what() starts with, and every RPCSessionTimeoutError's.
inline constexpr char kRpcErrorPrefix[] = "RPCError: Error caught from RPC call:\n";
inline constexpr char kTimeoutPrefix[] = "RPCSessionTimeoutError: ";

// A remote call failed. what() is "RPCError: Error caught from RPC call:\n<remote message>";
// remote_message() is the server's message alone and remote_code() its KilnErrorCode (0 when
// the failure was on this side: a lost connection or a malformed reply).
class RPCError : public RuntimeError {
 public:
  RPCError(const std::string& remote_message, int32_t remote_code);
  // Rebuilds an RPCError from its what() (after crossing a packed-function boundary, which
  // keeps the message and the type but not the remote code).
  static RPCError from_what(const std::string& what);
  const std::string& remote_message() const { return remote_message_; }
  int32_t remote_code() const { return remote_code_; }

 protected:
  RPCError(const std::string& what, const std::string& remote_message, int32_t remote_code,
           int32_t code);

 private:
  std::string remote_message_;
  int32_t remote_code_;
};

// The session outlived its timeout; the server ended it. what() starts with
// "RPCSessionTimeoutError: ".
class RPCSessionTimeoutError : public RPCError {
 public:
  explicit RPCSessionTimeoutError(const std::string& message);
};

// The server went away, not the call: the connection dropped during a call (the server was
// killed, its machine rebooted), or none of the servers the tracker handed out for a key could
// be reached (TrackerSession::request). Not the work's own failure: a fan-out over a farm
// (kiln/rpc/fan_out.h) tries such work again on another server. An RPCError with
// remote_code() 0; what() starts with kRpcErrorPrefix. Python: kiln.RPCServerLostError.
class ServerLostError : public RPCError {
 public:
  // `message` says what was lost and during what; the prefix is added unless already there
  // (a message that crossed a packed-function boundary).
  explicit ServerLostError(const std::string& message);

 private:
  // Takes what() and remote_message() of `parts` (an RPCError made from the message).
  explicit ServerLostError(const RPCError& parts);
};

}  // namespace kiln::rpc

#endif  // KILN_RPC_RPC_ERROR_H_
