// SPDX-License-Identifier: Apache-2.0
// The part of NVRTC (the CUDA runtime compiler) that the cuda plugin uses, declared by Kiln so
// that the plugin builds without the CUDA toolkit: NVRTC is opened with dlopen at run time
// (nvrtc_compiler.h), so what the plugin needs from <nvrtc.h> are facts of its ABI, stated here.
// tests/backends/cuda/cuda_api_subset_check.cc checks every line against the toolkit's
// <nvrtc.h> wherever CMake finds the toolkit. As for cuda_api_subset.h: <nvrtc.h>'s names, in
// the global namespace; never include both in one translation unit.
#ifndef KILN_PLUGINS_CUDA_NVRTC_API_SUBSET_H_
#define KILN_PLUGINS_CUDA_NVRTC_API_SUBSET_H_

#include <cstddef>

// X(name, value) for one enumerator (a fixed underlying type, int like NVRTC's, so that a code
// the list lacks is a valid value).
#define KILN_NVRTC_ENUMERATOR(name, value) name = value,

// nvrtcResult: every call's status. The codes the plugin tells apart (the others are only
// reported, through nvrtcGetErrorString).
#define KILN_NVRTC_RESULT_CODES(X) \
  X(NVRTC_SUCCESS, 0)              \
  X(NVRTC_ERROR_INVALID_OPTION, 5) \
  X(NVRTC_ERROR_COMPILATION, 6)    \
  X(NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID, 10)
enum nvrtcResult : int { KILN_NVRTC_RESULT_CODES(KILN_NVRTC_ENUMERATOR) };

// One program being compiled: an opaque handle.
struct KilnNvrtcProgram;
typedef KilnNvrtcProgram* nvrtcProgram;

// The entry points: X(name, symbol, result, (parameters)) for each, where `symbol` is the name
// libnvrtc exports it under (NVRTC does not version its symbols: always `name`).
#define KILN_NVRTC_ENTRY_POINTS(X)                                                            \
  X(nvrtcVersion, nvrtcVersion, nvrtcResult, (int* major, int* minor))                        \
  X(nvrtcGetErrorString, nvrtcGetErrorString, const char*, (nvrtcResult result))              \
  X(nvrtcCreateProgram, nvrtcCreateProgram, nvrtcResult,                                      \
    (nvrtcProgram * program, const char* source, const char* name, int num_headers,           \
     const char* const* headers, const char* const* include_names))                           \
  X(nvrtcDestroyProgram, nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram * program))          \
  X(nvrtcCompileProgram, nvrtcCompileProgram, nvrtcResult,                                    \
    (nvrtcProgram program, int num_options, const char* const* options))                      \
  X(nvrtcGetProgramLogSize, nvrtcGetProgramLogSize, nvrtcResult,                              \
    (nvrtcProgram program, size_t * size))                                                    \
  X(nvrtcGetProgramLog, nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram program, char* log))   \
  X(nvrtcGetPTXSize, nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram program, size_t * size))     \
  X(nvrtcGetPTX, nvrtcGetPTX, nvrtcResult, (nvrtcProgram program, char* ptx))                 \
  X(nvrtcGetCUBINSize, nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram program, size_t * size)) \
  X(nvrtcGetCUBIN, nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram program, char* cubin))           \
  X(nvrtcAddNameExpression, nvrtcAddNameExpression, nvrtcResult,                              \
    (nvrtcProgram program, const char* name_expression))                                      \
  X(nvrtcGetLoweredName, nvrtcGetLoweredName, nvrtcResult,                                    \
    (nvrtcProgram program, const char* name_expression, const char** lowered_name))

#endif  // KILN_PLUGINS_CUDA_NVRTC_API_SUBSET_H_
