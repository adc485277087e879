// SPDX-License-Identifier: Apache-2.0
#include "driver_api.h"

#include <dlfcn.h>

#include <cstring>
#include <string_view>

#include "kiln/c/abi.h"

namespace kiln::cuda {
namespace {

// Entry points that may be resolved under their unversioned name when the driver predates the
// versioned one with the same signature (cuEventElapsedTime_v2 arrived in CUDA 12.8).
bool has_compatible_fallback(std::string_view plain) { return plain == "cuEventElapsedTime"; }

}  // namespace

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

DriverApi::~DriverApi() { close(); }

void DriverApi::close() {
  if (handle_ != nullptr && !keep_loaded_) ::dlclose(handle_);
  handle_ = nullptr;
#define KILN_CUDA_CLEAR_MEMBER(name, symbol, since, result, parameters) name = nullptr;
  KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CUDA_CLEAR_MEMBER)
#undef KILN_CUDA_CLEAR_MEMBER
}

bool DriverApi::open(const std::string& library, std::string* why) {
  close();
  keep_loaded_ = false;
  library_ = library;
  ::dlerror();
  // RTLD_NODELETE: a vendor runtime keeps process-wide state (threads, caches) that does not
  // survive dlclose, so it stays mapped until the process exits.
  handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle_ == nullptr) {
    const char* error = ::dlerror();
    *why = "cannot load the CUDA driver: dlopen(\"" + library +
           "\") failed: " + (error != nullptr ? error : "unknown error");
    return false;
  }
  auto resolve = [&](const char* versioned, const char* plain, int since, void* slot) {
    void* symbol = ::dlsym(handle_, versioned);
    if (symbol == nullptr && std::strcmp(versioned, plain) != 0 && has_compatible_fallback(plain)) {
      symbol = ::dlsym(handle_, plain);
    }
    if (symbol == nullptr) {
      *why = "the CUDA driver " + library + " lacks the entry point " + versioned +
             " (which drivers have exported since CUDA " + version_text(since) +
             ": an older driver, or not a CUDA driver)";
      return false;
    }
    std::memcpy(slot, &symbol, sizeof(symbol));
    return true;
  };
#define KILN_CUDA_RESOLVE(name, symbol, since, result, parameters)                          \
  static_assert(sizeof(name) == sizeof(void*), "function pointers are data-pointer sized"); \
  if (!resolve(#symbol, #name, since, &name)) {                                             \
    close();                                                                                \
    return false;                                                                           \
  }
  KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  return true;
}

const char* result_name(CUresult result) {
  switch (result) {
#define KILN_CUDA_NAME(name, value) \
  case name:                        \
    return #name;
    KILN_CUDA_RESULT_CODES(KILN_CUDA_NAME)
#undef KILN_CUDA_NAME
    default:
      return nullptr;
  }
}

std::string describe_result(const DriverApi* api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr && api->is_open()) {
    // A stub library fails these too (CUDA_ERROR_STUB_LIBRARY) and leaves the strings NULL.
    if (api->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
    if (api->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
  }
  if (name == nullptr) name = result_name(result);
  std::string out = name != nullptr ? name : "CUDA error";
  out += " (" + std::to_string(static_cast<int>(result)) + ")";
  if (text != nullptr && *text != '\0') {
    out += ": ";
    out += text;
  } else if (result == CUDA_ERROR_STUB_LIBRARY) {
    out += ": the library is the CUDA toolkit's link-time stub, not a real driver";
  }
  return out;
}

int32_t kiln_code_of(CUresult result) {
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return KILN_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_INVALID_HANDLE:
      return KILN_ERROR_VALUE;
    case CUDA_ERROR_NOT_FOUND:
      return KILN_ERROR_NOT_FOUND;
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
      return KILN_ERROR_UNAVAILABLE;
    default:
      return KILN_ERROR_RUNTIME;
  }
}

}  // namespace kiln::cuda
