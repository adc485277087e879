// SPDX-License-Identifier: Apache-2.0
#include "cpu_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_library.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::cpu {
namespace {

// The host is one device: the plugin's pool spreads work over its cores inside a kernel call.
constexpr int32_t kDeviceCount = 1;

// Throws KILN_ERROR_INDEX naming `device_id` and the count unless it is 0.
void check_device(int32_t device_id) {
  if (device_id < 0 || device_id >= kDeviceCount) {
    throw sdk::Error(KILN_ERROR_INDEX, "device id " + std::to_string(device_id) +
                                           " is out of range: the cpu backend has " +
                                           std::to_string(kDeviceCount) + " device (id 0)");
  }
}

// Throws KILN_ERROR_VALUE naming `what` when `p` is NULL but bytes are to be copied.
void check_pointer(const void* p, size_t nbytes, const char* what) {
  if (p == nullptr && nbytes > 0) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
  }
}

// ---- enumeration ----

}  // namespace

// Reports one device; never fails.
int32_t CpuDevice::device_count(const char** /*why_none*/) { return kDeviceCount; }

// Visits the cached CPU attributes (strings borrowed for the visit only).
void CpuDevice::device_attributes(int32_t device_id, const sdk::AttributeVisitor& visit) {
  check_device(device_id);
  visit.all(state_.cpu_attributes());
}

// ---- memory ----

// Allocates max(nbytes, 1 alignment unit) at max(alignment, kMinAlignment); the memory
// (owned by the caller until free_memory). Errors: VALUE for an alignment that is not a power
// of two, OUT_OF_MEMORY naming the size.
void* CpuDevice::alloc(int32_t device_id, size_t nbytes, size_t alignment) {
  check_device(device_id);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "alloc: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  const size_t align = alignment > kMinAlignment ? alignment : kMinAlignment;
  // Zero bytes still get a unique, aligned pointer: callers may compare or free it like any
  // other. The size is rounded up to the alignment, as aligned_alloc() requires.
  const size_t wanted = nbytes == 0 ? align : nbytes;
  if (wanted > SIZE_MAX - (align - 1)) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes: size overflows");
  }
  const size_t size = (wanted + align - 1) & ~(align - 1);
  void* p = nullptr;
  if (::posix_memalign(&p, align, size) != 0 || p == nullptr) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(nbytes) +
                                                   " bytes aligned to " + std::to_string(align));
  }
  return p;
}

// Frees memory from alloc(); NULL is a no-op.
void CpuDevice::free(int32_t device_id, void* ptr) {
  check_device(device_id);
  std::free(ptr);
}

// Copies `nbytes` from host memory to `dst + dst_offset`; synchronous.
void CpuDevice::copy_to_device(int32_t device_id, const void* host_src, void* dst,
                               size_t dst_offset, size_t nbytes, void* /*stream*/) {
  check_device(device_id);
  check_pointer(host_src, nbytes, "copy_to_device: source");
  check_pointer(dst, nbytes, "copy_to_device: destination");
  if (nbytes > 0) std::memcpy(static_cast<char*>(dst) + dst_offset, host_src, nbytes);
}

// Copies `nbytes` from `src + src_offset` to host memory; synchronous.
void CpuDevice::copy_to_host(int32_t device_id, const void* src, size_t src_offset, void* host_dst,
                             size_t nbytes, void* /*stream*/) {
  check_device(device_id);
  check_pointer(src, nbytes, "copy_to_host: source");
  check_pointer(host_dst, nbytes, "copy_to_host: destination");
  if (nbytes > 0) std::memcpy(host_dst, static_cast<const char*>(src) + src_offset, nbytes);
}

// Copies `nbytes` between two device ranges, which may overlap; synchronous.
void CpuDevice::copy_on_device(int32_t device_id, const void* src, size_t src_offset, void* dst,
                               size_t dst_offset, size_t nbytes, void* /*stream*/) {
  check_device(device_id);
  check_pointer(src, nbytes, "copy_on_device: source");
  check_pointer(dst, nbytes, "copy_on_device: destination");
  // memmove: both ranges are device memory and may overlap (e.g. shifting within a buffer).
  if (nbytes > 0) {
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset,
                 nbytes);
  }
}

// ---- streams ----

// Returns at once after validating `device_id`.
void CpuDevice::synchronize(int32_t device_id, void* /*stream*/) {
  // Every call of this backend completes before it returns, so there is nothing to wait for.
  check_device(device_id);
}

// ---- timers ----

namespace {

// A timer: the two points start and stop recorded. Work is synchronous, so "now" at
// timer_stop is when the work issued before it finished.
struct Timer {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point stop;
  bool started = false;
  bool stopped = false;
};

}  // namespace

// Makes a Timer, owned by the caller until destroy_timer.
void* CpuDevice::timer_create(int32_t device_id) {
  check_device(device_id);
  return new Timer;
}

// Records the start point (now) and clears an earlier stop.
void CpuDevice::timer_start(void* timer, void* /*stream*/) {
  if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_start: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  t->start = std::chrono::steady_clock::now();
  t->started = true;
  t->stopped = false;
}

// Records the stop point; VALUE error before any start.
void CpuDevice::timer_stop(void* timer, void* /*stream*/) {
  if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_stop: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  if (!t->started) throw sdk::Error(KILN_ERROR_VALUE, "timer_stop before timer_start");
  t->stop = std::chrono::steady_clock::now();
  t->stopped = true;
}

// Writes stop - start in nanoseconds; VALUE error unless started and stopped.
int64_t CpuDevice::timer_elapsed_ns(void* timer) {
  if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: timer is NULL");
  const auto* t = static_cast<const Timer*>(timer);
  if (!t->stopped) {
    throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: the timer was not started and stopped");
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t->stop - t->start).count();
}

// Frees a Timer from create_timer; NULL is a no-op.
void CpuDevice::timer_destroy(void* timer) noexcept { delete static_cast<Timer*>(timer); }

// ---- device code ----

// Loads a kernel library from `size` bytes (format "so" only) into `*module`, a
// KernelLibrary owned by the caller until module_unload. Errors: VALUE for another format or
// bytes the dynamic loader rejects, plus those of KernelLibrary::open_bytes.
void* CpuDevice::module_load(int32_t device_id, const void* data, size_t size, const char* format,
                             const char* /*metadata_json*/) {
  // metadata_json describes launch extents of GPU kernels; a kernel library carries its own
  // signatures, so it is not needed here.
  check_device(device_id);
  if (format == nullptr || std::strcmp(format, "so") != 0) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string("cpu backend cannot load format '") +
                                           (format != nullptr ? format : "(null)") +
                                           "' (it loads 'so' kernel libraries only)");
  }
  return KernelLibrary::open_bytes(data, size, kernel_library_options(state_)).release();
}

// Finds function `name` of `module`; NOT_FOUND lists the available names.
void* CpuDevice::module_get_kernel(void* module, const char* name) {
  if (module == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_get_kernel: module is NULL");
  const KilnKernelFunction& f = static_cast<KernelLibrary*>(module)->function(name);
  // The function entry lives in the library's static storage until module_unload.
  return const_cast<KilnKernelFunction*>(&f);
}

// Unloads a module from module_load; its kernels become invalid.
void CpuDevice::module_unload(void* module) noexcept { delete static_cast<KernelLibrary*>(module); }

// Calls `kernel` with `args` (borrowed) on the calling thread and returns its error, if any.
KilnError* CpuDevice::launch(void* kernel, const KilnAny* args, int32_t num_args,
                             const uint32_t* /*grid*/, const uint32_t* /*block*/,
                             uint32_t /*dynamic_shared_bytes*/, void* /*stream*/) {
  // grid, block and shared memory describe a GPU's thread hierarchy. A CPU kernel is one
  // call that covers the whole problem and parallelises itself through the environment's
  // parallel_for (sized to the plugin's pool), so the extents carry no information here.
  if (kernel == nullptr || num_args < 0 || (num_args > 0 && args == nullptr)) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch: kernel is NULL or the arguments are malformed");
  }
  const auto* f = static_cast<const KilnKernelFunction*>(kernel);
  // The kernel's own errors come from the host factory already and are passed on unchanged;
  // its return value is discarded, as a launch has none.
  KilnAny ret{};
  ret.type_code = KILN_TYPE_NONE;
  return f->fn(f->self, args, num_args, &ret);
}

}  // namespace kiln::cpu
