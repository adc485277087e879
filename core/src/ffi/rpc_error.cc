// SPDX-License-Identifier: Apache-2.0
#include "kiln/rpc/rpc_error.h"

#include <cstring>

namespace kiln::rpc {

RPCError::RPCError(const std::string& remote_message, int32_t remote_code)
    : RPCError(kRpcErrorPrefix + remote_message, remote_message, remote_code, kErrorCodeRpc) {}

RPCError::RPCError(const std::string& what, const std::string& remote_message, int32_t remote_code,
                   int32_t code)
    : RuntimeError(what, code), remote_message_(remote_message), remote_code_(remote_code) {}

RPCError RPCError::from_what(const std::string& what) {
  // A plugin slot or packed call in between may have put its context in front.
  const auto at = what.find(kRpcErrorPrefix);
  if (at == std::string::npos) return RPCError(what, 0);
  return RPCError(what, what.substr(at + std::strlen(kRpcErrorPrefix)), 0, kErrorCodeRpc);
}

RPCSessionTimeoutError::RPCSessionTimeoutError(const std::string& message)
    : RPCError(message.rfind(kTimeoutPrefix, 0) == 0 ? message : kTimeoutPrefix + message, message,
               0, kErrorCodeRpcSessionTimeout) {}

ServerLostError::ServerLostError(const std::string& message)
    : ServerLostError(message.find(kRpcErrorPrefix) == std::string::npos
                          ? RPCError(message, 0)
                          : RPCError::from_what(message)) {}

ServerLostError::ServerLostError(const RPCError& parts)
    : RPCError(parts.what(), parts.remote_message(), 0, kErrorCodeRpcServerLost) {}

}  // namespace kiln::rpc
