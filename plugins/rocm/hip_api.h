// SPDX-License-Identifier: Apache-2.0
// The HIP runtime (libamdhip64), opened with dlopen at run time and never linked: the plugin
// loads and reports a reason on machines without ROCm. Types come from Debian's HIP 5.2
// headers (hip_runtime_api.h with __HIP_PLATFORM_AMD__); every entry point is resolved with
// dlsym.
#ifndef KILN_PLUGINS_ROCM_HIP_API_H_
#define KILN_PLUGINS_ROCM_HIP_API_H_

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::rocm {

// The sonames tried in order when no library is configured: ROCm 6 and later ship
// libamdhip64.so.6, ROCm 5 libamdhip64.so.5, and the unversioned name is the -dev symlink.
inline const std::vector<std::string>& default_hip_libraries() {
  static const std::vector<std::string> names = {"libamdhip64.so.6", "libamdhip64.so.5",
                                                 "libamdhip64.so"};
  return names;
}

// The entry points the rocm backend uses. Owned by the plugin state; the library is never
// closed (the HIP runtime keeps threads and exit handlers that must not outlive its code).
struct HipApi {
  void* handle = nullptr;
  std::string library;      // the name that was opened, e.g. "libamdhip64.so.5"
  int runtime_version = 0;  // hipRuntimeGetVersion, e.g. 50221153; 0 when unknown

  const char* (*GetErrorName)(hipError_t) = nullptr;
  const char* (*GetErrorString)(hipError_t) = nullptr;
  hipError_t (*RuntimeGetVersion)(int*) = nullptr;
  hipError_t (*GetDeviceCount)(int*) = nullptr;
  // The pre-6.0 layout of hipDeviceProp_t (the one in the HIP 5.2 headers): ROCm 6 keeps it
  // under hipGetDevicePropertiesR0000 and the unversioned name, which is preferred in that order.
  hipError_t (*GetDeviceProperties)(hipDeviceProp_t*, int) = nullptr;
  hipError_t (*DeviceGetPCIBusId)(char*, int, int) = nullptr;  // optional
  hipError_t (*SetDevice)(int) = nullptr;
  hipError_t (*Malloc)(void**, size_t) = nullptr;
  hipError_t (*Free)(void*) = nullptr;
  hipError_t (*MemcpyAsync)(void*, const void*, size_t, hipMemcpyKind, hipStream_t) = nullptr;
  hipError_t (*StreamCreate)(hipStream_t*) = nullptr;
  hipError_t (*StreamDestroy)(hipStream_t) = nullptr;
  hipError_t (*StreamSynchronize)(hipStream_t) = nullptr;
  hipError_t (*EventCreate)(hipEvent_t*) = nullptr;
  hipError_t (*EventDestroy)(hipEvent_t) = nullptr;
  hipError_t (*EventRecord)(hipEvent_t, hipStream_t) = nullptr;
  hipError_t (*EventSynchronize)(hipEvent_t) = nullptr;
  hipError_t (*EventElapsedTime)(float*, hipEvent_t, hipEvent_t) = nullptr;
  hipError_t (*ModuleLoadData)(hipModule_t*, const void*) = nullptr;
  hipError_t (*ModuleUnload)(hipModule_t) = nullptr;
  hipError_t (*ModuleGetFunction)(hipFunction_t*, hipModule_t, const char*) = nullptr;
  hipError_t (*ModuleLaunchKernel)(hipFunction_t, unsigned int, unsigned int, unsigned int,
                                   unsigned int, unsigned int, unsigned int, unsigned int,
                                   hipStream_t, void**, void**) = nullptr;

  // "100 hipErrorNoDevice", plus ": <description>" when the runtime's text differs from the
  // name.
  std::string describe(hipError_t error) const;
  // "5.2.21153" from runtime_version; "unknown" when 0.
  std::string version_string() const;
};

// Opens the HIP runtime: `library` when it is not empty, else each of default_hip_libraries()
// in turn, and resolves every entry point. Returns NULL and sets `*why` (naming each library
// tried with its dlerror text, or the missing symbol) when that fails. Does not initialise
// the runtime: that happens on the first call of an entry point.
std::unique_ptr<HipApi> load_hip_api(const std::string& library, std::string* why);

// Throws kiln::sdk::Error (code from error_code_of) "<what> failed: <describe(error)>" unless
// `error` is hipSuccess.
void check(const HipApi& api, hipError_t error, const std::string& what);

// The KilnErrorCode a HIP error maps to: OUT_OF_MEMORY for hipErrorOutOfMemory, UNAVAILABLE
// for no device / no driver, VALUE for rejected images and arguments, NOT_FOUND for missing
// symbols, RUNTIME otherwise.
int32_t error_code_of(hipError_t error);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_HIP_API_H_
