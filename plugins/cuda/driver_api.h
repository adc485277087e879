// The CUDA driver API, opened with dlopen at run time and never linked: a program linked to
// libcuda does not even start on a machine without the driver. <cuda.h> from the toolkit
// provides the types, enums and the versioned entry-point names (cuMemAlloc is cuMemAlloc_v2);
// every entry point is resolved with dlsym under the name the header maps it to.
#ifndef KILN_PLUGINS_CUDA_DRIVER_API_H_
#define KILN_PLUGINS_CUDA_DRIVER_API_H_

#include <cuda.h>

#include <string>

namespace kiln::cuda {

// The entry points the plugin uses. The header's macros turn each name into the versioned
// symbol (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2, ...), both
// in the member declarations and in every call, so the plugin always calls the symbol whose
// signature the header declares.
#define KILN_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuGetErrorName)                   \
  X(cuGetErrorString)                 \
  X(cuInit)                           \
  X(cuDriverGetVersion)               \
  X(cuDeviceGetCount)                 \
  X(cuDeviceGet)                      \
  X(cuDeviceGetName)                  \
  X(cuDeviceGetAttribute)             \
  X(cuDeviceTotalMem)                 \
  X(cuDeviceGetPCIBusId)              \
  X(cuDevicePrimaryCtxRetain)         \
  X(cuDevicePrimaryCtxRelease)        \
  X(cuCtxSetCurrent)                  \
  X(cuCtxSynchronize)                 \
  X(cuMemAlloc)                       \
  X(cuMemFree)                        \
  X(cuMemcpyHtoDAsync)                \
  X(cuMemcpyDtoHAsync)                \
  X(cuMemcpyDtoDAsync)                \
  X(cuStreamCreate)                   \
  X(cuStreamDestroy)                  \
  X(cuStreamSynchronize)              \
  X(cuEventCreate)                    \
  X(cuEventDestroy)                   \
  X(cuEventRecord)                    \
  X(cuEventSynchronize)               \
  X(cuEventElapsedTime)               \
  X(cuModuleLoadDataEx)               \
  X(cuModuleUnload)                   \
  X(cuModuleGetFunction)              \
  X(cuFuncSetAttribute)               \
  X(cuLaunchKernel)

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

#define KILN_CUDA_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DECLARE_MEMBER)
#undef KILN_CUDA_DECLARE_MEMBER

 private:
  void close();
  void* handle_ = nullptr;
  std::string library_;
  bool keep_loaded_ = false;
};

// The name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"). Works without a driver: the names come
// from a table of the header's enumerators, so that a stub library (whose cuGetErrorName fails
// too) still gets a readable reason. Unknown codes read "CUDA error <code>".
const char* result_name(CUresult result);

// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory": the name, the code and, when `api` can give
// it, the driver's description.
std::string describe_result(const DriverApi* api, CUresult result);

// The KilnErrorCode a failed driver call maps to: OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY,
// VALUE for invalid values, images and PTX, NOT_FOUND for CUDA_ERROR_NOT_FOUND, UNAVAILABLE for
// a missing device or driver, RUNTIME otherwise.
int32_t kiln_code_of(CUresult result);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_DRIVER_API_H_
