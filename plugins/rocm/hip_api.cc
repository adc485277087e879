// SPDX-License-Identifier: Apache-2.0
#include "hip_api.h"

#include <dlfcn.h>

#include <cstring>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::rocm {
namespace {

// The dlerror() text of the last failure, or a placeholder.
std::string last_dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// Resolves `name` in `api.handle` into `slot`; returns false (and names the symbol in `*why`)
// when it is missing and `required`.
template <typename Fn>
bool bind(HipApi& api, Fn& slot, const char* name, bool required, std::string* why) {
  dlerror();
  void* p = dlsym(api.handle, name);
  if (p == nullptr) {
    if (required && why != nullptr) {
      *why = api.library + " does not export " + name +
             ": it is not a usable HIP runtime (ROCm 5 or later is needed)";
    }
    return !required;
  }
  // POSIX guarantees that a data pointer from dlsym converts to a function pointer.
  slot = reinterpret_cast<Fn>(p);
  return true;
}

bool bind_all(HipApi& api, std::string* why) {
  bool ok = bind(api, api.GetErrorName, "hipGetErrorName", true, why) &&
            bind(api, api.GetErrorString, "hipGetErrorString", true, why) &&
            bind(api, api.RuntimeGetVersion, "hipRuntimeGetVersion", true, why) &&
            bind(api, api.GetDeviceCount, "hipGetDeviceCount", true, why) &&
            bind(api, api.SetDevice, "hipSetDevice", true, why) &&
            bind(api, api.Malloc, "hipMalloc", true, why) &&
            bind(api, api.Free, "hipFree", true, why) &&
            bind(api, api.MemcpyAsync, "hipMemcpyAsync", true, why) &&
            bind(api, api.StreamCreate, "hipStreamCreate", true, why) &&
            bind(api, api.StreamDestroy, "hipStreamDestroy", true, why) &&
            bind(api, api.StreamSynchronize, "hipStreamSynchronize", true, why) &&
            bind(api, api.EventCreate, "hipEventCreate", true, why) &&
            bind(api, api.EventDestroy, "hipEventDestroy", true, why) &&
            bind(api, api.EventRecord, "hipEventRecord", true, why) &&
            bind(api, api.EventSynchronize, "hipEventSynchronize", true, why) &&
            bind(api, api.EventElapsedTime, "hipEventElapsedTime", true, why) &&
            bind(api, api.ModuleLoadData, "hipModuleLoadData", true, why) &&
            bind(api, api.ModuleUnload, "hipModuleUnload", true, why) &&
            bind(api, api.ModuleGetFunction, "hipModuleGetFunction", true, why) &&
            bind(api, api.ModuleLaunchKernel, "hipModuleLaunchKernel", true, why) &&
            bind(api, api.DeviceGetPCIBusId, "hipDeviceGetPCIBusId", false, why);
  if (!ok) return false;
  // ROCm 6 turned hipGetDeviceProperties into a macro for the R0600 layout; the old layout,
  // which the 5.2 headers declare, stays exported as R0000 (and as the plain name).
  bind(api, api.GetDeviceProperties, "hipGetDevicePropertiesR0000", false, why);
  if (api.GetDeviceProperties != nullptr) return true;
  return bind(api, api.GetDeviceProperties, "hipGetDeviceProperties", true, why);
}

}  // namespace

std::string HipApi::describe(hipError_t error) const {
  std::string out = std::to_string(static_cast<int>(error));
  const char* name = GetErrorName != nullptr ? GetErrorName(error) : nullptr;
  out += ' ';
  out += name != nullptr ? name : "(unnamed HIP error)";
  const char* text = GetErrorString != nullptr ? GetErrorString(error) : nullptr;
  if (text != nullptr && name != nullptr && std::strcmp(text, name) != 0 && *text != '\0') {
    out += ": ";
    out += text;
  }
  return out;
}

std::string HipApi::version_string() const {
  if (runtime_version <= 0) return "unknown";
  // HIP_VERSION = major * 10000000 + minor * 100000 + patch.
  const int major = runtime_version / 10000000;
  const int minor = (runtime_version / 100000) % 100;
  const int patch = runtime_version % 100000;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::unique_ptr<HipApi> load_hip_api(const std::string& library, std::string* why) {
  const std::vector<std::string> candidates =
      library.empty() ? default_hip_libraries() : std::vector<std::string>{library};
  std::string tried;
  auto api = std::make_unique<HipApi>();
  for (const std::string& name : candidates) {
    // RTLD_NODELETE: a vendor runtime keeps process-wide state (threads, caches) that does not
    // survive dlclose, so it stays mapped until the process exits.
    api->handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (api->handle != nullptr) {
      api->library = name;
      break;
    }
    if (!tried.empty()) tried += "; ";
    tried += last_dl_error();
  }
  if (api->handle == nullptr) {
    if (why != nullptr) {
      *why = "cannot load the HIP runtime (" +
             std::string(library.empty() ? "tried libamdhip64.so.6, .so.5 and .so"
                                         : "option hip_library") +
             "): " + tried + "; install ROCm (libamdhip64) to use AMD GPUs";
    }
    return nullptr;
  }
  if (!bind_all(*api, why)) {
    // The handle stays open: closing a half-initialised HIP runtime is not safe either.
    return nullptr;
  }
  int version = 0;
  if (api->RuntimeGetVersion(&version) == hipSuccess) api->runtime_version = version;
  return api;
}

void check(const HipApi& api, hipError_t error, const std::string& what) {
  if (error == hipSuccess) return;
  throw sdk::Error(error_code_of(error), what + " failed: " + api.describe(error));
}

int32_t error_code_of(hipError_t error) {
  switch (error) {
    case hipErrorOutOfMemory:
      return KILN_ERROR_OUT_OF_MEMORY;
    case hipErrorNoDevice:
    case hipErrorInvalidDevice:
    case hipErrorInsufficientDriver:
    case hipErrorNotInitialized:
      return KILN_ERROR_UNAVAILABLE;
    case hipErrorInvalidValue:
    case hipErrorInvalidImage:
    case hipErrorNoBinaryForGpu:
    case hipErrorInvalidKernelFile:
    case hipErrorInvalidConfiguration:
    case hipErrorInvalidDevicePointer:
    case hipErrorInvalidHandle:
      return KILN_ERROR_VALUE;
    case hipErrorNotFound:
    case hipErrorSharedObjectSymbolNotFound:
      return KILN_ERROR_NOT_FOUND;
    default:
      return KILN_ERROR_RUNTIME;
  }
}

}  // namespace kiln::rocm
