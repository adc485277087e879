// SPDX-License-Identifier: Apache-2.0
// The CUDA driver API, opened with dlopen at run time and never linked: a program linked to
// libcuda does not even start on a machine without the driver. cuda_api_subset.h declares the
// types, enums and entry points (with the versioned symbol each is exported under: cuMemAlloc is
// cuMemAlloc_v2); every entry point is resolved with dlsym under that symbol.
#ifndef KILN_PLUGINS_CUDA_DRIVER_API_H_
#define KILN_PLUGINS_CUDA_DRIVER_API_H_

#include <cstdint>
#include <string>

#include "cuda_api_subset.h"

namespace kiln::cuda {

// Function pointers into one dlopen'ed libcuda. Not copyable. The destructor closes the
// library unless keep_loaded() was called.
class DriverApi {
 public:
  DriverApi() = default;
  DriverApi(const DriverApi&) = delete;
  DriverApi& operator=(const DriverApi&) = delete;
  ~DriverApi();

  // Opens `library` (a file name searched by the dynamic loader, or a path) and resolves every
  // entry point. On failure returns false and sets `*why` to a sentence naming the library
  // and the dlerror text or the missing symbol; nothing stays open then.
  bool open(const std::string& library, std::string* why);
  bool is_open() const { return handle_ != nullptr; }
  const std::string& library() const { return library_; }
  // Marks the library as initialised: close() then leaves it loaded, since the driver keeps
  // threads and callbacks inside it after cuInit.
  void keep_loaded() { keep_loaded_ = true; }

  // One pointer per entry point of KILN_CUDA_DRIVER_ENTRY_POINTS, named without the version
  // suffix (cuMemAlloc points at cuMemAlloc_v2) and typed with its signature.
#define KILN_CUDA_DECLARE_MEMBER(name, symbol, since, result, parameters) \
  result(*name) parameters = nullptr;
  KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CUDA_DECLARE_MEMBER)
#undef KILN_CUDA_DECLARE_MEMBER

 private:
  void close();
  void* handle_ = nullptr;
  std::string library_;
  bool keep_loaded_ = false;
};

// The name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"). Works without a driver: the names come
// from the codes of cuda_api_subset.h, so that a stub library (whose cuGetErrorName fails
// too) still gets a readable reason. Unknown codes read "CUDA error <code>".
const char* result_name(CUresult result);

// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory": the name, the code and, when `api` can give
// it, the driver's description.
std::string describe_result(const DriverApi* api, CUresult result);

// The KilnErrorCode a failed driver call maps to: OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY,
// VALUE for invalid values, images and PTX, NOT_FOUND for CUDA_ERROR_NOT_FOUND, UNAVAILABLE for
// a missing device or driver, RUNTIME otherwise.
int32_t kiln_code_of(CUresult result);

// A CUDA version number as people write it: "11.0" for 11000, "12.8" for 12080.
std::string version_text(int version);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_DRIVER_API_H_
