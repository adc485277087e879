// SPDX-License-Identifier: Apache-2.0
// The part of the CUDA driver API that the cuda plugin uses, declared by Kiln itself so that the
// plugin builds without the CUDA toolkit: libcuda is opened with dlopen at run time (never
// linked), so all the plugin needs from <cuda.h> are facts of the driver's ABI, which are
// stated here: the types, the enumerator values, and each entry point's signature and the
// versioned symbol it is exported under (cuMemAlloc is the symbol cuMemAlloc_v2).
//
// Only what the plugin, its fake driver (tests/backends/cuda/fake_libcuda.cc) and the benchmark
// use. tests/backends/cuda/cuda_api_subset_check.cc checks every line against the toolkit's
// <cuda.h> and <cudaTypedefs.h> at compile time wherever CMake finds the toolkit; to use more of
// the API, add it to the lists below (the check then covers it).
//
// The names are <cuda.h>'s, in the global namespace as there, so the code reads like any
// driver API code. A translation unit must not include both this and <cuda.h> (the check is the
// one that does, with the toolkit's headers inside a namespace); the plugin's targets put
// plugins/cuda/toolkit_guard/ first on the include path, whose cuda.h is an #error.
#ifndef KILN_PLUGINS_CUDA_CUDA_API_SUBSET_H_
#define KILN_PLUGINS_CUDA_CUDA_API_SUBSET_H_

#include <cstddef>

static_assert(sizeof(void*) == 8, "the cuda plugin supports 64-bit targets only");

// X(name, value) for one enumerator. The enums below have a fixed underlying type, int like
// the driver's, so that a code from a newer driver that the list lacks is a valid value.
#define KILN_CUDA_ENUMERATOR(name, value) name = value,

// CUresult: every call's status. The codes the plugin names (in messages and in the mapping
// to Kiln's error codes) and the fake driver returns.
#define KILN_CUDA_RESULT_CODES(X)                   \
  X(CUDA_SUCCESS, 0)                                \
  X(CUDA_ERROR_INVALID_VALUE, 1)                    \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2)                    \
  X(CUDA_ERROR_NOT_INITIALIZED, 3)                  \
  X(CUDA_ERROR_DEINITIALIZED, 4)                    \
  X(CUDA_ERROR_STUB_LIBRARY, 34)                    \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, 36)      \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46)              \
  X(CUDA_ERROR_NO_DEVICE, 100)                      \
  X(CUDA_ERROR_INVALID_DEVICE, 101)                 \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, 102)            \
  X(CUDA_ERROR_INVALID_IMAGE, 200)                  \
  X(CUDA_ERROR_INVALID_CONTEXT, 201)                \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)              \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, 214)              \
  X(CUDA_ERROR_UNSUPPORTED_LIMIT, 215)              \
  X(CUDA_ERROR_INVALID_PTX, 218)                    \
  X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, 221)         \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)        \
  X(CUDA_ERROR_JIT_COMPILATION_DISABLED, 223)       \
  X(CUDA_ERROR_INVALID_SOURCE, 300)                 \
  X(CUDA_ERROR_FILE_NOT_FOUND, 301)                 \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, 302) \
  X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, 303)      \
  X(CUDA_ERROR_OPERATING_SYSTEM, 304)               \
  X(CUDA_ERROR_INVALID_HANDLE, 400)                 \
  X(CUDA_ERROR_ILLEGAL_STATE, 401)                  \
  X(CUDA_ERROR_NOT_FOUND, 500)                      \
  X(CUDA_ERROR_NOT_READY, 600)                      \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)                \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701)        \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, 702)                 \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708)         \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709)           \
  X(CUDA_ERROR_ASSERT, 710)                         \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714)           \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715)            \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, 716)             \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717)          \
  X(CUDA_ERROR_INVALID_PC, 718)                     \
  X(CUDA_ERROR_LAUNCH_FAILED, 719)                  \
  X(CUDA_ERROR_NOT_PERMITTED, 800)                  \
  X(CUDA_ERROR_NOT_SUPPORTED, 801)                  \
  X(CUDA_ERROR_SYSTEM_NOT_READY, 802)               \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)         \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804) \
  X(CUDA_ERROR_TIMEOUT, 909)                        \
  X(CUDA_ERROR_UNKNOWN, 999)
enum CUresult : int { KILN_CUDA_RESULT_CODES(KILN_CUDA_ENUMERATOR) };

// CUdevice_attribute: what cuDeviceGetAttribute reads. The attributes the plugin reports.
#define KILN_CUDA_DEVICE_ATTRIBUTES(X)                            \
  X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1)                 \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 8)           \
  X(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 10)                            \
  X(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 12)              \
  X(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 13)                           \
  X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                 \
  X(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 32)                          \
  X(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 36)                    \
  X(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 37)              \
  X(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 38)                        \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)             \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)             \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 81) \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 97)
enum CUdevice_attribute : int { KILN_CUDA_DEVICE_ATTRIBUTES(KILN_CUDA_ENUMERATOR) };

// CUjit_option: the keys of cuModuleLoadDataEx's options. The JIT log buffers the plugin
// collects (each value is passed in a void*: a char* buffer, or its size in bytes).
#define KILN_CUDA_JIT_OPTIONS(X)          \
  X(CU_JIT_INFO_LOG_BUFFER, 3)            \
  X(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, 4) \
  X(CU_JIT_ERROR_LOG_BUFFER, 5)           \
  X(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 6)
enum CUjit_option : int { KILN_CUDA_JIT_OPTIONS(KILN_CUDA_ENUMERATOR) };

// CUfunction_attribute: what cuFuncSetAttribute sets.
#define KILN_CUDA_FUNCTION_ATTRIBUTES(X) X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)
enum CUfunction_attribute : int { KILN_CUDA_FUNCTION_ATTRIBUTES(KILN_CUDA_ENUMERATOR) };

// CUstream_flags and CUevent_flags: the `Flags` of cuStreamCreate and cuEventCreate.
#define KILN_CUDA_STREAM_FLAGS(X) X(CU_STREAM_DEFAULT, 0)
enum CUstream_flags : int { KILN_CUDA_STREAM_FLAGS(KILN_CUDA_ENUMERATOR) };
#define KILN_CUDA_EVENT_FLAGS(X) X(CU_EVENT_DEFAULT, 0)
enum CUevent_flags : int { KILN_CUDA_EVENT_FLAGS(KILN_CUDA_ENUMERATOR) };

// A device ordinal, as cuDeviceGet returns it.
typedef int CUdevice;
// A device address (64 bits on every 64-bit target; <cuda.h>'s CUdeviceptr_v2).
typedef unsigned long long CUdeviceptr;

// Opaque handles: the driver's objects, only ever held by pointer. The fake driver defines the
// structs.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
typedef CUctx_st* CUcontext;
typedef CUmod_st* CUmodule;
typedef CUfunc_st* CUfunction;
typedef CUstream_st* CUstream;  // NULL: the legacy default stream
typedef CUevent_st* CUevent;

// The entry points: X(name, symbol, since, result, (parameters)) for each, where `symbol` is
// the name libcuda exports it under (what <cuda.h>'s macros turn `name` into: the plugin calls
// the symbol whose signature is declared here, never an older one of the same name), `since`
// the CUDA version whose driver first exports that symbol (11000 = CUDA 11.0), and the
// signature is `symbol`'s.
//
// cuEventElapsedTime_v2 (CUDA 12.8) has the signature of the plain cuEventElapsedTime (CUDA
// 2.0), which DriverApi::open resolves instead on older drivers; so the oldest driver the plugin
// can use is CUDA 11.0 (cuDevicePrimaryCtxRelease_v2).
#define KILN_CUDA_DRIVER_ENTRY_POINTS(X)                                                         \
  X(cuGetErrorName, cuGetErrorName, 6000, CUresult, (CUresult error, const char** name))         \
  X(cuGetErrorString, cuGetErrorString, 6000, CUresult,                                          \
    (CUresult error, const char** description))                                                  \
  X(cuInit, cuInit, 2000, CUresult, (unsigned int flags))                                        \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, CUresult, (int* version))                      \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, CUresult, (int* count))                            \
  X(cuDeviceGet, cuDeviceGet, 2000, CUresult, (CUdevice * device, int ordinal))                  \
  X(cuDeviceGetName, cuDeviceGetName, 2000, CUresult, (char* name, int length, CUdevice device)) \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, CUresult,                                  \
    (int* value, CUdevice_attribute attribute, CUdevice device))                                 \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, CUresult, (size_t * bytes, CUdevice device))    \
  X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, CUresult,                                    \
    (char* bus_id, int length, CUdevice device))                                                 \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, CUresult,                          \
    (CUcontext * context, CUdevice device))                                                      \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, CUresult, (CUdevice device)) \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, CUresult, (CUcontext context))                       \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, CUresult, ())                                      \
  X(cuMemAlloc, cuMemAlloc_v2, 3020, CUresult, (CUdeviceptr * address, size_t bytes))            \
  X(cuMemFree, cuMemFree_v2, 3020, CUresult, (CUdeviceptr address))                              \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020, CUresult,                                     \
    (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream))                           \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020, CUresult,                                     \
    (void* dst, CUdeviceptr src, size_t bytes, CUstream stream))                                 \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020, CUresult,                                     \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))                           \
  X(cuStreamCreate, cuStreamCreate, 2000, CUresult, (CUstream * stream, unsigned int flags))     \
  X(cuStreamDestroy, cuStreamDestroy_v2, 4000, CUresult, (CUstream stream))                      \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, CUresult, (CUstream stream))                 \
  X(cuEventCreate, cuEventCreate, 2000, CUresult, (CUevent * event, unsigned int flags))         \
  X(cuEventDestroy, cuEventDestroy_v2, 4000, CUresult, (CUevent event))                          \
  X(cuEventRecord, cuEventRecord, 2000, CUresult, (CUevent event, CUstream stream))              \
  X(cuEventSynchronize, cuEventSynchronize, 2000, CUresult, (CUevent event))                     \
  X(cuEventElapsedTime, cuEventElapsedTime_v2, 12080, CUresult,                                  \
    (float* milliseconds, CUevent start, CUevent stop))                                          \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, CUresult,                                      \
    (CUmodule * module, const void* image, unsigned int num_options, CUjit_option* options,      \
     void** option_values))                                                                      \
  X(cuModuleUnload, cuModuleUnload, 2000, CUresult, (CUmodule module))                           \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, CUresult,                                    \
    (CUfunction * function, CUmodule module, const char* name))                                  \
  X(cuFuncSetAttribute, cuFuncSetAttribute, 9000, CUresult,                                      \
    (CUfunction function, CUfunction_attribute attribute, int value))                            \
  X(cuLaunchKernel, cuLaunchKernel, 4000, CUresult,                                              \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,         \
     unsigned int block_x, unsigned int block_y, unsigned int block_z,                           \
     unsigned int dynamic_shared_bytes, CUstream stream, void** kernel_params, void** extra))

#endif  // KILN_PLUGINS_CUDA_CUDA_API_SUBSET_H_
