// SPDX-License-Identifier: Apache-2.0
#include "cuda_driver.h"

#include <cstdlib>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"

namespace kiln::cuda {
namespace {

// " (CUDA_VISIBLE_DEVICES='...')" when the variable is set: it often explains a missing device.
std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return "";
  return std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
}

}  // namespace

CudaDriver::CudaDriver(std::string library) : library_(std::move(library)) {}

CudaDriver::~CudaDriver() {
  if (!contexts_) return;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (contexts_[i].load(std::memory_order_acquire) != nullptr) {
      api_.cuDevicePrimaryCtxRelease(devices_[i].handle);
    }
  }
}

int32_t CudaDriver::device_count() {
  std::call_once(once_, [this] { initialize(); });
  return static_cast<int32_t>(devices_.size());
}

const std::string& CudaDriver::why_none() {
  std::call_once(once_, [this] { initialize(); });
  return why_none_;
}

void CudaDriver::initialize() {
  // Any failure leaves devices_ empty and why_none_ set; nothing here throws.
  try {
    std::string why;
    if (!api_.open(library_, &why)) {
      why_none_ = why;
      return;
    }
    const CUresult init = api_.cuInit(0);
    if (init != CUDA_SUCCESS) {
      why_none_ = "cuInit failed in the CUDA driver " + library_ + ": " +
                  describe_result(&api_, init) +
                  (init == CUDA_ERROR_NO_DEVICE ? visible_devices_note() : "");
      return;  // api_ closes the library: nothing of the driver is in use
    }
    api_.keep_loaded();
    if (api_.cuDriverGetVersion(&driver_version_) != CUDA_SUCCESS) driver_version_ = 0;
    int count = 0;
    const CUresult counted = api_.cuDeviceGetCount(&count);
    if (counted != CUDA_SUCCESS) {
      why_none_ = "cuDeviceGetCount failed in the CUDA driver " + library_ + ": " +
                  describe_result(&api_, counted);
      return;
    }
    if (count <= 0) {
      why_none_ = "the CUDA driver " + library_ + " (CUDA " + version_text(driver_version_) +
                  ") reports no devices" + visible_devices_note();
      return;
    }
    devices_.resize(static_cast<size_t>(count));
    for (int32_t id = 0; id < count; ++id) read_device(id);
    contexts_ = std::make_unique<std::atomic<CUcontext>[]>(static_cast<size_t>(count));
    for (int32_t id = 0; id < count; ++id) contexts_[id].store(nullptr);
    sdk::log(KILN_LOG_DEBUG, "CUDA driver %s (CUDA %s): %d device(s), device 0 is %s",
             library_.c_str(), version_text(driver_version_).c_str(), count,
             devices_[0].label.c_str());
  } catch (const std::exception& e) {
    devices_.clear();
    why_none_ = "cannot initialise the CUDA driver " + library_ + ": " + e.what();
  }
}

void CudaDriver::read_device(int32_t id) {
  DeviceProperties& p = devices_[static_cast<size_t>(id)];
  check(api_.cuDeviceGet(&p.handle, id), "cuDeviceGet(" + std::to_string(id) + ")");
  char name[256] = {};
  check(api_.cuDeviceGetName(name, sizeof(name) - 1, p.handle), "cuDeviceGetName");
  p.name = name[0] != '\0' ? name : "NVIDIA CUDA device " + std::to_string(id);
  auto attribute = [&](CUdevice_attribute which) -> int64_t {
    int value = 0;
    // An attribute the driver does not know reads as 0 rather than failing enumeration.
    if (api_.cuDeviceGetAttribute(&value, which, p.handle) != CUDA_SUCCESS) return 0;
    return value;
  };
  p.cc_major = static_cast<int>(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  p.cc_minor = static_cast<int>(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  size_t total = 0;
  check(api_.cuDeviceTotalMem(&total, p.handle), "cuDeviceTotalMem");
  p.memory_bytes = static_cast<int64_t>(total);
  p.l2_cache_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.max_dynamic_shared_bytes =
      static_cast<int>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  char pci[32] = {};
  std::string pci_bus_id;
  if (api_.cuDeviceGetPCIBusId(pci, sizeof(pci) - 1, p.handle) == CUDA_SUCCESS) pci_bus_id = pci;
  const std::string arch = "sm_" + std::to_string(p.cc_major) + std::to_string(p.cc_minor);
  p.label = "cuda:" + std::to_string(id) + " (" + p.name + ", " + arch + ")";

  const int64_t memory_clock_khz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  const int64_t bus_width_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  auto& a = p.attributes;
  a.emplace_back("name", p.name);
  a.emplace_back("vendor", std::string("NVIDIA"));
  a.emplace_back("arch", arch);
  a.emplace_back("compute_capability",
                 std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor));
  a.emplace_back("compute_capability_major", int64_t{p.cc_major});
  a.emplace_back("compute_capability_minor", int64_t{p.cc_minor});
  a.emplace_back("compute_units", attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  a.emplace_back("memory_bytes", p.memory_bytes);
  a.emplace_back("l2_cache_bytes", p.l2_cache_bytes);
  a.emplace_back("clock_rate_khz", attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE));
  a.emplace_back("memory_clock_rate_khz", memory_clock_khz);
  a.emplace_back("memory_bus_width_bits", bus_width_bits);
  // Double data rate: two transfers per memory clock over the bus.
  a.emplace_back("peak_memory_bandwidth_bytes_per_s",
                 2 * memory_clock_khz * 1000 * bus_width_bits / 8);
  if (!pci_bus_id.empty()) a.emplace_back("pci_bus_id", pci_bus_id);
  a.emplace_back("warp_size", attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  a.emplace_back("max_threads_per_block", attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  a.emplace_back("max_shared_memory_per_block_bytes",
                 attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  a.emplace_back("max_shared_memory_per_block_optin_bytes", int64_t{p.max_dynamic_shared_bytes});
  a.emplace_back("shared_memory_per_multiprocessor_bytes",
                 attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  a.emplace_back("registers_per_block", attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK));
  a.emplace_back("ecc_enabled", attribute(CU_DEVICE_ATTRIBUTE_ECC_ENABLED));
  a.emplace_back("driver_version", std::string(version_text(driver_version_)));
}

const DeviceProperties& CudaDriver::device(int32_t id) {
  const int32_t count = device_count();
  if (count == 0) throw sdk::Error(KILN_ERROR_UNAVAILABLE, "no CUDA device: " + why_none_);
  if (id < 0 || id >= count) {
    throw sdk::Error(KILN_ERROR_INDEX,
                     "device id " + std::to_string(id) + " is out of range: the cuda backend has " +
                         std::to_string(count) +
                         (count == 1 ? " device (id 0)"
                                     : " devices (ids 0.." + std::to_string(count - 1) + ")"));
  }
  return devices_[static_cast<size_t>(id)];
}

CUcontext CudaDriver::context(int32_t id) {
  const DeviceProperties& p = device(id);
  CUcontext ctx = contexts_[id].load(std::memory_order_acquire);
  if (ctx != nullptr) return ctx;
  std::lock_guard<std::mutex> lock(context_mu_);
  ctx = contexts_[id].load(std::memory_order_acquire);
  if (ctx == nullptr) {
    check(api_.cuDevicePrimaryCtxRetain(&ctx, p.handle), "cuDevicePrimaryCtxRetain on " + p.label);
    contexts_[id].store(ctx, std::memory_order_release);
  }
  return ctx;
}

void CudaDriver::make_current(int32_t id) {
  const CUcontext ctx = context(id);
  check(api_.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

void CudaDriver::fail(CUresult result, const std::string& what) const {
  throw sdk::Error(kiln_code_of(result), what + " failed: " + describe_result(&api_, result));
}

}  // namespace kiln::cuda
