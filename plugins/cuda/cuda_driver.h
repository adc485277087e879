// SPDX-License-Identifier: Apache-2.0
// The CUDA driver as the plugin uses it: loaded and initialised lazily on the first device
// query (never during negotiation), once and thread-safely; its devices with their attributes;
// one primary context per device, retained on first use and released on destruction.
#ifndef KILN_PLUGINS_CUDA_CUDA_DRIVER_H_
#define KILN_PLUGINS_CUDA_CUDA_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "driver_api.h"

namespace kiln::cuda {

// One attribute as reported to the host: an integer or a string.
using AttributeValue = std::variant<int64_t, std::string>;

// What the plugin knows about one device, read once at initialisation.
struct DeviceProperties {
  CUdevice handle = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int64_t memory_bytes = 0;
  int64_t l2_cache_bytes = 0;
  int max_dynamic_shared_bytes = 0;  // opt-in maximum per block
  // Every attribute in report order ("name" first).
  std::vector<std::pair<std::string, AttributeValue>> attributes;
  // "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)", for messages.
  std::string label;
};

class CudaDriver {
 public:
  // Nothing is loaded until the first query.
  explicit CudaDriver(std::string library);
  // Releases the primary contexts this object retained. The driver library stays loaded once
  // initialised (see DriverApi::keep_loaded).
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // The number of usable devices; 0 when the driver is missing, is a stub, fails to
  // initialise or sees no device, and why_none() says which.
  int32_t device_count();
  // Empty when there are devices; otherwise the reason, naming the library and the error.
  const std::string& why_none();

  // The properties of device `id`. Throws kiln::sdk::Error: KILN_ERROR_UNAVAILABLE with
  // why_none() when there is no device, KILN_ERROR_INDEX for an id out of range.
  const DeviceProperties& device(int32_t id);
  // Device `id`'s primary context, retained on first use. Throws as device(), and the
  // driver's error when the retain fails.
  CUcontext context(int32_t id);
  // Makes device `id`'s primary context current on the calling thread.
  void make_current(int32_t id);

  // The loaded driver; valid after a successful device_count() (device() and context()
  // guarantee it).
  const DriverApi& api() const { return api_; }
  const std::string& library() const { return library_; }
  // The driver's CUDA version, e.g. 13000; 0 before initialisation or when it failed.
  int driver_version() const { return driver_version_; }

  // Throws kiln::sdk::Error with the code kiln_code_of(result) and "<what> failed:
  // <describe_result>" unless result is CUDA_SUCCESS. The const char* form builds no string
  // on success (hot paths).
  void check(CUresult result, const char* what) const {
    if (result != CUDA_SUCCESS) fail(result, what);
  }
  void check(CUresult result, const std::string& what) const {
    if (result != CUDA_SUCCESS) fail(result, what);
  }
  [[noreturn]] void fail(CUresult result, const std::string& what) const;

 private:
  void initialize();
  void read_device(int32_t id);

  const std::string library_;
  std::once_flag once_;
  DriverApi api_;
  std::string why_none_;
  int driver_version_ = 0;
  std::vector<DeviceProperties> devices_;
  std::unique_ptr<std::atomic<CUcontext>[]> contexts_;
  std::mutex context_mu_;
};

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_CUDA_DRIVER_H_
