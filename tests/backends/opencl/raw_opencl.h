// SPDX-License-Identifier: Apache-2.0
// The OpenCL API reached through dlopen, for tests that cross-check the plugin against the
// driver (device enumeration, program binaries) without linking the ICD loader into the test.
#ifndef KILN_TESTS_BACKENDS_OPENCL_RAW_OPENCL_H_
#define KILN_TESTS_BACKENDS_OPENCL_RAW_OPENCL_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::opencl_test {

class RawOpenCL {
 public:
  // Opens the ICD loader; loaded() is false when it is missing.
  RawOpenCL() {
    handle_ = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    bool ok = true;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle_, name));
      ok &= fn != nullptr;
    };
    bind(GetPlatformIDs, "clGetPlatformIDs");
    bind(GetDeviceIDs, "clGetDeviceIDs");
    bind(GetDeviceInfo, "clGetDeviceInfo");
    bind(CreateContext, "clCreateContext");
    bind(ReleaseContext, "clReleaseContext");
    bind(CreateProgramWithSource, "clCreateProgramWithSource");
    bind(BuildProgram, "clBuildProgram");
    bind(GetProgramInfo, "clGetProgramInfo");
    bind(ReleaseProgram, "clReleaseProgram");
    if (!ok) {
      dlclose(handle_);
      handle_ = nullptr;
    }
  }
  ~RawOpenCL() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  RawOpenCL(const RawOpenCL&) = delete;
  RawOpenCL& operator=(const RawOpenCL&) = delete;

  bool loaded() const { return handle_ != nullptr; }

  // Every device of every platform, in platform order then device order.
  std::vector<cl_device_id> devices() const {
    std::vector<cl_device_id> out;
    cl_uint np = 0;
    if (GetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return out;
    std::vector<cl_platform_id> platforms(np);
    GetPlatformIDs(np, platforms.data(), nullptr);
    for (cl_platform_id p : platforms) {
      cl_uint nd = 0;
      if (GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
      std::vector<cl_device_id> devices(nd);
      GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devices.data(), nullptr);
      out.insert(out.end(), devices.begin(), devices.end());
    }
    return out;
  }

  std::string device_name(cl_device_id d) const {
    size_t size = 0;
    GetDeviceInfo(d, CL_DEVICE_NAME, 0, nullptr, &size);
    std::string s(size, '\0');
    GetDeviceInfo(d, CL_DEVICE_NAME, size, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  }

  // Builds `source` for device `d` and returns the program binary. Throws std::runtime_error.
  std::vector<unsigned char> build_binary(cl_device_id d, const std::string& source,
                                          const std::string& options = "") const {
    cl_int err = CL_SUCCESS;
    cl_context ctx = CreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) throw std::runtime_error("clCreateContext " + std::to_string(err));
    const char* text = source.c_str();
    const size_t length = source.size();
    cl_program program = CreateProgramWithSource(ctx, 1, &text, &length, &err);
    if (err != CL_SUCCESS) {
      ReleaseContext(ctx);
      throw std::runtime_error("clCreateProgramWithSource " + std::to_string(err));
    }
    err = BuildProgram(program, 1, &d, options.c_str(), nullptr, nullptr);
    std::vector<unsigned char> binary;
    if (err == CL_SUCCESS) {
      size_t size = 0;
      GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr);
      binary.resize(size);
      unsigned char* ptr = binary.data();
      GetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr);
    }
    ReleaseProgram(program);
    ReleaseContext(ctx);
    if (err != CL_SUCCESS) throw std::runtime_error("clBuildProgram " + std::to_string(err));
    return binary;
  }

  decltype(&clGetPlatformIDs) GetPlatformIDs = nullptr;
  decltype(&clGetDeviceIDs) GetDeviceIDs = nullptr;
  decltype(&clGetDeviceInfo) GetDeviceInfo = nullptr;
  decltype(&clCreateContext) CreateContext = nullptr;
  decltype(&clReleaseContext) ReleaseContext = nullptr;
  decltype(&clCreateProgramWithSource) CreateProgramWithSource = nullptr;
  decltype(&clBuildProgram) BuildProgram = nullptr;
  decltype(&clGetProgramInfo) GetProgramInfo = nullptr;
  decltype(&clReleaseProgram) ReleaseProgram = nullptr;

 private:
  void* handle_ = nullptr;
};

}  // namespace kiln::opencl_test

#endif  // KILN_TESTS_BACKENDS_OPENCL_RAW_OPENCL_H_
