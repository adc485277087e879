// SPDX-License-Identifier: Apache-2.0
// Header-only error helpers shared by kernel libraries and plugins: a C++ exception type that
// carries a KilnErrorCode, and the conversion of an exception in flight into a KilnError.
#ifndef KILN_SDK_ERROR_HPP_
#define KILN_SDK_ERROR_HPP_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kiln/c/abi.h"

namespace kiln::sdk {

// An error with a KilnErrorCode, thrown by helpers and by kernel or plugin code.
class Error : public std::runtime_error {
 public:
  Error(int32_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int32_t code() const { return code_; }

 private:
  int32_t code_;
};

// Throws Error(KILN_ERROR_VALUE, message): a plugin's "the input is wrong" (a bad option, a
// malformed module image, an out-of-range argument).
[[noreturn]] inline void throw_value_error(const std::string& message) {
  throw Error(KILN_ERROR_VALUE, message);
}
// The same with the message given in parts (strings, string views, C strings), joined in one
// buffer: no temporary string per `+` on an error path inside a loop.
template <typename... Parts>
[[noreturn]] void throw_value_error(const std::string_view first, const Parts&... rest) {
  std::string message(first);
  (message.append(std::string_view(rest)), ...);
  throw_value_error(message);
}

// Where this library creates and frees KilnErrors: set from the kernel environment (kernel
// libraries) or from the host services (plugins) before any exported function runs.
struct ErrorFactory {
  void* ctx = nullptr;
  KilnError* (*make)(void* ctx, int32_t code, const char* message) = nullptr;
  void (*free)(void* ctx, KilnError* error) = nullptr;
};
inline ErrorFactory& error_factory() {
  static ErrorFactory factory;
  return factory;
}

// Makes a KilnError. Aborts with the message when no factory is set: a library used outside
// a Kiln host has no other way to report.
inline KilnError* make_error(int32_t code, const std::string& message) {
  const ErrorFactory& f = error_factory();
  if (f.make == nullptr) {
    std::fprintf(stderr, "kiln: error raised before the host set an error factory: %s\n",
                 message.c_str());
    std::abort();
  }
  return f.make(f.ctx, code, message.c_str());
}

// Carries a KilnError* received from the host through C++ code back to the packed boundary.
class ForeignError : public std::exception {
 public:
  explicit ForeignError(KilnError* error) : error_(error) {}
  ForeignError(ForeignError&& other) noexcept : error_(other.release()) {}
  ForeignError(const ForeignError&) = delete;
  ~ForeignError() override {
    const ErrorFactory& f = error_factory();
    if (error_ != nullptr && f.free != nullptr) f.free(f.ctx, error_);
  }
  const char* what() const noexcept override { return "error returned by the Kiln host"; }
  KilnError* release() {
    KilnError* e = error_;
    error_ = nullptr;
    return e;
  }

 private:
  KilnError* error_;
};

// Converts the exception in flight into a KilnError, prefixing `context` (e.g. the function
// name). Call only inside a catch block.
inline KilnError* error_from_current_exception(const char* context) {
  int32_t code = KILN_ERROR_RUNTIME;
  std::string message;
  try {
    throw;
  } catch (ForeignError& e) {
    return e.release();
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = KILN_ERROR_OUT_OF_MEMORY;
    message = "out of memory";
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  return make_error(code, context != nullptr && *context != '\0'
                              ? std::string(context) + ": " + message
                              : message);
}

// Runs `body` and returns NULL, or the KilnError its exception maps to.
template <typename Body>
KilnError* guard(const char* context, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (...) {
    return error_from_current_exception(context);
  }
}

}  // namespace kiln::sdk

#endif  // KILN_SDK_ERROR_HPP_
