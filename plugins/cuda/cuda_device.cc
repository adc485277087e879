// SPDX-License-Identifier: Apache-2.0
#include "cuda_device.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "cuda_driver.h"
#include "cuda_module.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::cuda {
namespace {

// cuMemAlloc's alignment; larger alignments are served by over-allocating.
constexpr size_t kDriverAlignment = 256;

void check_pointer(const void* p, size_t nbytes, const char* what) {
  if (p == nullptr && nbytes > 0) sdk::throw_value_error(std::string(what) + " is NULL");
}

CUdeviceptr device_address(const void* p, size_t offset) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) + offset;
}

}  // namespace

// ---- enumeration ----

int32_t CudaDevice::device_count(const char** why_none) {
  CudaDriver& driver = state_.driver();
  const int32_t count = driver.device_count();
  if (count == 0 && why_none != nullptr) *why_none = driver.why_none().c_str();
  return count;
}

void CudaDevice::device_attributes(int32_t device_id, const sdk::AttributeVisitor& visit) {
  const DeviceProperties& props = state_.driver().device(device_id);
  visit.all(props.attributes);
}

// ---- memory ----

void* CudaDevice::alloc(int32_t device_id, size_t nbytes, size_t alignment) {
  PluginState& state = state_;
  CudaDriver& driver = state.driver();
  const DeviceProperties& props = driver.device(device_id);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    sdk::throw_value_error("alloc: alignment " + std::to_string(alignment) +
                           " is not a power of two");
  }
  const size_t wanted = nbytes == 0 ? 1 : nbytes;
  const size_t extra = alignment > kDriverAlignment ? alignment - 1 : 0;
  if (wanted > SIZE_MAX - extra) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes: size overflows");
  }
  driver.make_current(device_id);
  CUdeviceptr base = 0;
  const CUresult r = driver.api().cuMemAlloc(&base, wanted + extra);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes on " + props.label +
                         " (" + std::to_string(props.memory_bytes) +
                         " bytes in all): cuMemAlloc failed: " + describe_result(&driver.api(), r));
  }
  driver.check(r, "cuMemAlloc(" + std::to_string(wanted + extra) + " bytes) on " + props.label);
  CUdeviceptr aligned = base;
  if (extra > 0) {
    aligned = (base + extra) & ~static_cast<CUdeviceptr>(alignment - 1);
    if (aligned != base) state.remember_overaligned(aligned, base);
  }
  return reinterpret_cast<void*>(static_cast<uintptr_t>(aligned));
}

void CudaDevice::free(int32_t device_id, void* ptr) {
  PluginState& state = state_;
  CudaDriver& driver = state.driver();
  driver.device(device_id);
  if (ptr == nullptr) return;
  const auto address = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  const uint64_t base = state.take_overaligned(address);
  driver.make_current(device_id);
  driver.check(driver.api().cuMemFree(base != 0 ? base : address), "cuMemFree");
}

void CudaDevice::copy_to_device(int32_t device_id, const void* host_src, void* dst,
                                size_t dst_offset, size_t nbytes, void* stream) {
  CudaDriver& driver = state_.driver();
  driver.device(device_id);
  check_pointer(host_src, nbytes, "copy_to_device: source");
  check_pointer(dst, nbytes, "copy_to_device: destination");
  if (nbytes == 0) return;
  driver.make_current(device_id);
  driver.check(driver.api().cuMemcpyHtoDAsync(device_address(dst, dst_offset), host_src, nbytes,
                                              static_cast<CUstream>(stream)),
               "cuMemcpyHtoDAsync");
}

void CudaDevice::copy_to_host(int32_t device_id, const void* src, size_t src_offset, void* host_dst,
                              size_t nbytes, void* stream) {
  CudaDriver& driver = state_.driver();
  driver.device(device_id);
  check_pointer(src, nbytes, "copy_to_host: source");
  check_pointer(host_dst, nbytes, "copy_to_host: destination");
  if (nbytes == 0) return;
  driver.make_current(device_id);
  // Ordered on the stream; with pageable host memory the driver stages it, and the data is
  // in place once the stream is synchronized either way.
  driver.check(driver.api().cuMemcpyDtoHAsync(host_dst, device_address(src, src_offset), nbytes,
                                              static_cast<CUstream>(stream)),
               "cuMemcpyDtoHAsync");
}

void CudaDevice::copy_on_device(int32_t device_id, const void* src, size_t src_offset, void* dst,
                                size_t dst_offset, size_t nbytes, void* stream) {
  CudaDriver& driver = state_.driver();
  driver.device(device_id);
  check_pointer(src, nbytes, "copy_on_device: source");
  check_pointer(dst, nbytes, "copy_on_device: destination");
  if (nbytes == 0) return;
  driver.make_current(device_id);
  driver.check(driver.api().cuMemcpyDtoDAsync(device_address(dst, dst_offset),
                                              device_address(src, src_offset), nbytes,
                                              static_cast<CUstream>(stream)),
               "cuMemcpyDtoDAsync");
}

// ---- streams ----

// NULL: every piece of work of the device's context (the legacy default stream synchronises
// with the other blocking streams, so this is what "the default stream" means to a caller).
void CudaDevice::synchronize(int32_t device_id, void* stream) {
  CudaDriver& driver = state_.driver();
  driver.make_current(device_id);
  if (stream == nullptr) {
    driver.check(driver.api().cuCtxSynchronize(), "cuCtxSynchronize");
  } else {
    driver.check(driver.api().cuStreamSynchronize(static_cast<CUstream>(stream)),
                 "cuStreamSynchronize");
  }
}

// A blocking stream (CU_STREAM_DEFAULT): work on it is ordered with the default stream, so a
// tensor copied on the default stream is ready for a kernel on this one.
void* CudaDevice::stream_create(int32_t device_id) {
  CudaDriver& driver = state_.driver();
  driver.make_current(device_id);
  CUstream s = nullptr;
  driver.check(driver.api().cuStreamCreate(&s, CU_STREAM_DEFAULT), "cuStreamCreate");
  return s;
}

void CudaDevice::stream_destroy(int32_t device_id, void* stream) {
  CudaDriver& driver = state_.driver();
  driver.make_current(device_id);
  if (stream == nullptr) return;  // the default stream is not destroyed
  driver.check(driver.api().cuStreamDestroy(static_cast<CUstream>(stream)), "cuStreamDestroy");
}

// ---- timers ----

namespace {

// Two CUDA events recorded on the stream at start and stop.
struct Timer {
  int32_t device_id = 0;
  CUevent start = nullptr;
  CUevent stop = nullptr;
  bool started = false;
  bool stopped = false;
};

void destroy_events(CudaDriver& driver, Timer& timer) {
  const DriverApi& api = driver.api();
  if (timer.start != nullptr) api.cuEventDestroy(timer.start);
  if (timer.stop != nullptr) api.cuEventDestroy(timer.stop);
  timer.start = timer.stop = nullptr;
}

}  // namespace

void* CudaDevice::timer_create(int32_t device_id) {
  CudaDriver& driver = state_.driver();
  driver.make_current(device_id);
  auto t = std::make_unique<Timer>();
  t->device_id = device_id;
  try {
    driver.check(driver.api().cuEventCreate(&t->start, CU_EVENT_DEFAULT), "cuEventCreate");
    driver.check(driver.api().cuEventCreate(&t->stop, CU_EVENT_DEFAULT), "cuEventCreate");
  } catch (...) {
    destroy_events(driver, *t);
    throw;
  }
  return t.release();
}

void CudaDevice::timer_start(void* timer, void* stream) {
  if (timer == nullptr) sdk::throw_value_error("timer_start: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  CudaDriver& driver = state_.driver();
  driver.make_current(t->device_id);
  driver.check(driver.api().cuEventRecord(t->start, static_cast<CUstream>(stream)),
               "cuEventRecord (timer start)");
  t->started = true;
  t->stopped = false;
}

void CudaDevice::timer_stop(void* timer, void* stream) {
  if (timer == nullptr) sdk::throw_value_error("timer_stop: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  if (!t->started) sdk::throw_value_error("timer_stop before timer_start");
  CudaDriver& driver = state_.driver();
  driver.make_current(t->device_id);
  driver.check(driver.api().cuEventRecord(t->stop, static_cast<CUstream>(stream)),
               "cuEventRecord (timer stop)");
  t->stopped = true;
}

int64_t CudaDevice::timer_elapsed_ns(void* timer) {
  if (timer == nullptr) sdk::throw_value_error("timer_elapsed_ns: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  if (!t->stopped)
    sdk::throw_value_error("timer_elapsed_ns: the timer was not started and stopped");
  CudaDriver& driver = state_.driver();
  driver.make_current(t->device_id);
  driver.check(driver.api().cuEventSynchronize(t->stop), "cuEventSynchronize (timer stop)");
  float ms = 0;
  driver.check(driver.api().cuEventElapsedTime(&ms, t->start, t->stop), "cuEventElapsedTime");
  return std::llround(static_cast<double>(ms) * 1e6);
}

// No error can be returned: a failure is logged.
void CudaDevice::timer_destroy(void* timer) noexcept {
  if (timer == nullptr) return;
  std::unique_ptr<Timer> t(static_cast<Timer*>(timer));
  try {
    CudaDriver& driver = state_.driver();
    driver.make_current(t->device_id);
    destroy_events(driver, *t);
  } catch (const std::exception& e) {
    sdk::log(KILN_LOG_WARN, "timer_destroy: %s", e.what());
  }
}

// ---- device code ----

void* CudaDevice::module_load(int32_t device_id, const void* data, size_t size, const char* format,
                              const char* metadata_json) {
  return CudaModule::load(state_, device_id, data, size, format, metadata_json).release();
}

void* CudaDevice::module_get_kernel(void* module, const char* name) {
  if (module == nullptr || name == nullptr)
    sdk::throw_value_error("module_get_kernel: module or name is NULL");
  return &static_cast<CudaModule*>(module)->kernel(name);
}

void CudaDevice::module_unload(void* module) noexcept { delete static_cast<CudaModule*>(module); }

void CudaDevice::launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
                        const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream) {
  if (kernel == nullptr || grid == nullptr || block == nullptr) {
    sdk::throw_value_error("launch: kernel, grid or block is NULL");
  }
  if (num_args < 0 || (num_args > 0 && args == nullptr)) {
    sdk::throw_value_error("launch: the arguments are malformed (" + std::to_string(num_args) +
                           " at NULL)");
  }
  launch_kernel(*static_cast<CudaKernel*>(kernel), args, num_args, grid, block,
                dynamic_shared_bytes, stream);
}

}  // namespace kiln::cuda
