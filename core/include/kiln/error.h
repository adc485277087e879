// SPDX-License-Identifier: Apache-2.0
// Typed errors of the Kiln core. Each corresponds to one KilnErrorCode of the C ABI, so an
// error crosses the plugin boundary and comes back as the same C++ type.
#ifndef KILN_ERROR_H_
#define KILN_ERROR_H_

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln {

// Base of every error Kiln throws. `code()` is the KilnErrorCode it maps to.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int32_t code = 1)
      : std::runtime_error(message), code_(code) {}
  int32_t code() const { return code_; }

 private:
  int32_t code_;
};

#define KILN_DECLARE_ERROR(Name, Code)                                       \
  class Name : public Error {                                                \
   public:                                                                   \
    explicit Name(const std::string& message) : Error(message, Code) {}      \
                                                                             \
   protected:                                                                \
    /* For subclasses with a host-private code of their own. */              \
    Name(const std::string& message, int32_t code) : Error(message, code) {} \
  }

KILN_DECLARE_ERROR(ValueError, 2);          // a bad argument value or configuration
KILN_DECLARE_ERROR(TypeError, 3);           // an argument of the wrong kind
KILN_DECLARE_ERROR(IndexError, 4);          // an index out of range
KILN_DECLARE_ERROR(RuntimeError, 5);        // an operation that failed
KILN_DECLARE_ERROR(NotFoundError, 6);       // no such function, device, plugin or file
KILN_DECLARE_ERROR(UnavailableError, 7);    // a driver or device that is not there
KILN_DECLARE_ERROR(OutOfMemoryError, 8);    // an allocation that failed
KILN_DECLARE_ERROR(UnimplementedError, 9);  // a slot the plugin does not implement
KILN_DECLARE_ERROR(AbiError, 10);           // a plugin ABI version or struct-size mismatch
#undef KILN_DECLARE_ERROR

// Host-private error codes (never seen by plugins): RPC errors keep their type across the
// packed-function boundary (kiln/rpc/session.h).
inline constexpr int32_t kErrorCodeRpc = 1001;
inline constexpr int32_t kErrorCodeRpcSessionTimeout = 1002;
inline constexpr int32_t kErrorCodeRpcServerLost = 1003;

// Throws the typed error for KilnErrorCode `code` (unknown codes throw kiln::Error).
[[noreturn]] void throw_error(int32_t code, const std::string& message);

}  // namespace kiln

#endif  // KILN_ERROR_H_
