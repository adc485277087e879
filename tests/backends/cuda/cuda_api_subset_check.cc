// SPDX-License-Identifier: Apache-2.0
// The compile-time check of Kiln's declarations of the CUDA driver API and NVRTC
// (plugins/cuda/cuda_api_subset.h, nvrtc_api_subset.h) against the CUDA toolkit's headers: every
// enumerator's value, every type's size, every entry point's signature, the versioned symbol it
// is resolved under and the CUDA version its driver symbol dates from. The plugin builds from
// Kiln's declarations alone; this check is what keeps them true. Only static_asserts: it
// passes by compiling. Built as kiln_cuda_api_subset_check (a dependency of kiln_cuda_tests)
// where CMake finds the toolkit (plugins/cuda/CMakeLists.txt), skipped elsewhere.
//
// Kiln's declarations are in the global namespace, the toolkit's inside namespace `nv` (after
// the C and C++ headers they include, which thus stay global). The toolkit's macros that rename
// entry points (cuMemAlloc -> cuMemAlloc_v2) stay in force below: they are what the symbol
// names are checked against.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "cuda_api_subset.h"
#include "nvrtc_api_subset.h"

namespace nv {
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>
}  // namespace nv

namespace {

// ---- types ----

// to_toolkit_t<T>: T, a type written with Kiln's declarations, with each of Kiln's types
// replaced by the toolkit's type of the same name, through pointers, const and function types.
// Types both use alike (int, size_t, CUdevice = int, CUdeviceptr = unsigned long long, ...)
// stay as they are, and so do the driver's handle structs: <cuda.h>'s `typedef struct CUctx_st
// *CUcontext;` names the struct Kiln's header declared already (::CUctx_st), so the handles
// must be pointers to the same structs.
template <typename T>
struct ToToolkit {
  using type = T;
};
template <typename T>
using to_toolkit_t = typename ToToolkit<T>::type;
template <typename T>
struct ToToolkit<T*> {
  using type = to_toolkit_t<T>*;
};
template <typename T>
struct ToToolkit<const T> {
  using type = const to_toolkit_t<T>;
};
template <typename Result, typename... Parameters>
struct ToToolkit<Result(Parameters...)> {
  using type = to_toolkit_t<Result>(to_toolkit_t<Parameters>...);
};
#define KILN_TOOLKIT_TYPE(kiln_type, toolkit_type) \
  template <>                                      \
  struct ToToolkit<kiln_type> {                    \
    using type = toolkit_type;                     \
  };
KILN_TOOLKIT_TYPE(CUresult, nv::CUresult)
KILN_TOOLKIT_TYPE(CUdevice_attribute, nv::CUdevice_attribute)
KILN_TOOLKIT_TYPE(CUjit_option, nv::CUjit_option)
KILN_TOOLKIT_TYPE(CUfunction_attribute, nv::CUfunction_attribute)
KILN_TOOLKIT_TYPE(CUstream_flags, nv::CUstream_flags)
KILN_TOOLKIT_TYPE(CUevent_flags, nv::CUevent_flags)
KILN_TOOLKIT_TYPE(nvrtcResult, nv::nvrtcResult)
KILN_TOOLKIT_TYPE(KilnNvrtcProgram, nv::_nvrtcProgram)
#undef KILN_TOOLKIT_TYPE

static_assert(std::is_same_v<CUdevice, nv::CUdevice>, "CUdevice is not <cuda.h>'s");
static_assert(std::is_same_v<CUdeviceptr, nv::CUdeviceptr>, "CUdeviceptr is not <cuda.h>'s");
static_assert(std::is_same_v<to_toolkit_t<CUcontext>, nv::CUcontext>);
static_assert(std::is_same_v<to_toolkit_t<CUmodule>, nv::CUmodule>);
static_assert(std::is_same_v<to_toolkit_t<CUfunction>, nv::CUfunction>);
static_assert(std::is_same_v<to_toolkit_t<CUstream>, nv::CUstream>);
static_assert(std::is_same_v<to_toolkit_t<CUevent>, nv::CUevent>);
static_assert(std::is_same_v<to_toolkit_t<nvrtcProgram>, nv::nvrtcProgram>);

// The enums are passed by value and in arrays (cuModuleLoadDataEx's options): same size, and
// both signed or unsigned 32-bit integers (Kiln's are int; GCC makes the toolkit's unsigned).
template <typename Kiln>
constexpr bool same_size_as_toolkit = sizeof(Kiln) == sizeof(to_toolkit_t<Kiln>) &&
                                      sizeof(Kiln) == sizeof(int);
static_assert(same_size_as_toolkit<CUresult>, "CUresult: not the size of the toolkit's");
static_assert(same_size_as_toolkit<CUdevice_attribute>,
              "CUdevice_attribute: not the size of the toolkit's");
static_assert(same_size_as_toolkit<CUjit_option>, "CUjit_option: not the size of the toolkit's");
static_assert(same_size_as_toolkit<CUfunction_attribute>,
              "CUfunction_attribute: not the size of the toolkit's");
static_assert(same_size_as_toolkit<CUstream_flags>,
              "CUstream_flags: not the size of the toolkit's");
static_assert(same_size_as_toolkit<CUevent_flags>, "CUevent_flags: not the size of the toolkit's");
static_assert(same_size_as_toolkit<nvrtcResult>, "nvrtcResult: not the size of the toolkit's");

// ---- enumerators ----

#define KILN_CHECK_ENUMERATOR(name, value)                                                    \
  static_assert(                                                                              \
      static_cast<long long>(name) == (value) && static_cast<long long>(nv::name) == (value), \
      #name " is not " #value " in the toolkit's headers");
KILN_CUDA_RESULT_CODES(KILN_CHECK_ENUMERATOR)
KILN_CUDA_DEVICE_ATTRIBUTES(KILN_CHECK_ENUMERATOR)
KILN_CUDA_JIT_OPTIONS(KILN_CHECK_ENUMERATOR)
KILN_CUDA_FUNCTION_ATTRIBUTES(KILN_CHECK_ENUMERATOR)
KILN_CUDA_STREAM_FLAGS(KILN_CHECK_ENUMERATOR)
KILN_CUDA_EVENT_FLAGS(KILN_CHECK_ENUMERATOR)
KILN_NVRTC_RESULT_CODES(KILN_CHECK_ENUMERATOR)
#undef KILN_CHECK_ENUMERATOR

// ---- entry points ----

// The name a toolkit macro turns `name` into (cuMemAlloc -> "cuMemAlloc_v2"), as a string.
#define KILN_EXPANDED_NAME(name) KILN_STRINGIFY(name)
#define KILN_STRINGIFY(text) #text

// For each driver entry point: the header maps `name` to `symbol`; `symbol`'s signature is the
// subset's; and cudaTypedefs.h's PFN_<name>_v<since>, the type of the entry point as its
// driver symbol was in CUDA `since`, is that signature too (cudaTypedefs.h keeps one for every
// version of an entry point).
#define KILN_CHECK_DRIVER_ENTRY_POINT(name, symbol, since, result, parameters)                 \
  static_assert(std::string_view(#symbol) == KILN_EXPANDED_NAME(name),                         \
                "<cuda.h> maps " #name " to " KILN_EXPANDED_NAME(name) ", not " #symbol);      \
  static_assert(std::is_same_v<to_toolkit_t<result(*) parameters>, decltype(&nv::symbol)>,     \
                #symbol ": the signature in cuda_api_subset.h is not <cuda.h>'s");             \
  static_assert(std::is_same_v<to_toolkit_t<result(*) parameters>, nv::PFN_##name##_v##since>, \
                #name ": cudaTypedefs.h has no PFN_" #name "_v" #since " of this signature");
KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CHECK_DRIVER_ENTRY_POINT)
#undef KILN_CHECK_DRIVER_ENTRY_POINT

// DriverApi::open falls back to the unversioned cuEventElapsedTime on drivers before CUDA 12.8,
// which is right only while both have one signature.
static_assert(std::is_same_v<nv::PFN_cuEventElapsedTime_v2000, nv::PFN_cuEventElapsedTime_v12080>);

#define KILN_CHECK_NVRTC_ENTRY_POINT(name, symbol, result, parameters)                     \
  static_assert(std::string_view(#symbol) == KILN_EXPANDED_NAME(name),                     \
                "<nvrtc.h> maps " #name " to " KILN_EXPANDED_NAME(name) ", not " #symbol); \
  static_assert(std::is_same_v<to_toolkit_t<result(*) parameters>, decltype(&nv::symbol)>, \
                #symbol ": the signature in nvrtc_api_subset.h is not <nvrtc.h>'s");
KILN_NVRTC_ENTRY_POINTS(KILN_CHECK_NVRTC_ENTRY_POINT)
#undef KILN_CHECK_NVRTC_ENTRY_POINT

}  // namespace
