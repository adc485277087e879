// SPDX-License-Identifier: Apache-2.0
// OpenCL status codes as text, and the errors the plugin raises for failed OpenCL calls.
#ifndef KILN_PLUGINS_OPENCL_CL_ERROR_H_
#define KILN_PLUGINS_OPENCL_CL_ERROR_H_

#include <CL/cl.h>

#include <cstdint>
#include <string>

namespace kiln::opencl {

// The symbolic name of an OpenCL status code ("CL_INVALID_VALUE", "CL_PLATFORM_NOT_FOUND_KHR"),
// or "unknown OpenCL error" for a code no header defines.
const char* cl_error_name(cl_int code);

// "<call> returned <code> (<name>)", e.g. "clGetPlatformIDs returned -1001
// (CL_PLATFORM_NOT_FOUND_KHR)".
std::string cl_failure(const char* call, cl_int code);

// The Kiln error code for a failed OpenCL call: KILN_ERROR_OUT_OF_MEMORY for allocation
// failures (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY), KILN_ERROR_RUNTIME
// otherwise.
int32_t kiln_code_for(cl_int code);

// Throws kiln::sdk::Error(`kiln_code` or kiln_code_for(code)) reading "<what>: <call> returned
// <code> (<name>)".
[[noreturn]] void throw_cl(const std::string& what, const char* call, cl_int code,
                           int32_t kiln_code = 0);

// `p` as "%p" prints it, for messages naming a handle.
std::string hex_pointer(const void* p);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_CL_ERROR_H_
