// SPDX-License-Identifier: Apache-2.0
#include "kiln/error.h"

#include "kiln/rpc/rpc_error.h"

namespace kiln {

void throw_error(int32_t code, const std::string& message) {
  switch (code) {
    case 2:
      throw ValueError(message);
    case 3:
      throw TypeError(message);
    case 4:
      throw IndexError(message);
    case 5:
      throw RuntimeError(message);
    case 6:
      throw NotFoundError(message);
    case 7:
      throw UnavailableError(message);
    case 8:
      throw OutOfMemoryError(message);
    case 9:
      throw UnimplementedError(message);
    case 10:
      throw AbiError(message);
    case kErrorCodeRpc:
      throw rpc::RPCError::from_what(message);
    case kErrorCodeRpcSessionTimeout:
      throw rpc::RPCSessionTimeoutError(message);
    case kErrorCodeRpcServerLost:
      throw rpc::ServerLostError(message);
    default:
      throw Error(message, code);
  }
}

}  // namespace kiln
