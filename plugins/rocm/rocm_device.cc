// SPDX-License-Identifier: Apache-2.0
#include "rocm_device.h"

#include <cmath>
#include <cstring>
#include <span>
#include <string>

#include "code_object.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"
#include "rocm_module.h"

namespace kiln::rocm {
namespace {

// hipMalloc's guaranteed alignment; larger requests are over-allocated.
constexpr size_t kMallocAlignment = 256;

void check_pointer(const void* p, size_t nbytes, const char* what) {
  if (p == nullptr && nbytes > 0) sdk::throw_value_error(std::string(what) + " is NULL");
}

std::string slot_device(const char* slot, int32_t device_id) {
  return std::string(slot) + " on device " + std::to_string(device_id);
}

}  // namespace

// ---- enumeration ----

int32_t RocmDevice::device_count(const char** why_none) {
  const Driver& d = state_.driver();
  if (d.devices.empty() && why_none != nullptr) *why_none = d.why_none.c_str();
  return static_cast<int32_t>(d.devices.size());
}

void RocmDevice::device_attributes(int32_t device_id, const sdk::AttributeVisitor& visit) {
  PluginState& state = state_;
  const DeviceInfo& d = state.use_device(device_id);
  const HipApi& api = state.api();
  const std::optional<TargetId> target = parse_target_id(d.gcn_arch_name);
  visit("name", d.name);
  visit("vendor", "AMD");
  visit("gcn_arch_name", d.gcn_arch_name);
  visit("arch", target ? target->processor : std::string());
  visit("compute_units", d.compute_units);
  visit("memory_bytes", d.memory_bytes);
  visit("l2_cache_bytes", d.l2_cache_bytes);
  visit("shared_memory_per_block_bytes", d.limits.shared_memory_per_block_bytes);
  visit("max_threads_per_block", d.limits.max_threads_per_block);
  visit("warp_size", d.warp_size);
  visit("clock_khz", d.clock_khz);
  visit("memory_clock_khz", d.memory_clock_khz);
  visit("memory_bus_width_bits", d.memory_bus_width_bits);
  visit("pci_bus_id", d.pci_bus_id);
  visit("pci_domain", d.pci_domain);
  visit("pci_bus", d.pci_bus);
  visit("pci_device", d.pci_device);
  visit("integrated", d.integrated);
  visit("runtime", api.library);
  visit("runtime_version", api.version_string());
}

// ---- memory ----

void* RocmDevice::alloc(int32_t device_id, size_t nbytes, size_t alignment) {
  PluginState& state = state_;
  state.use_device(device_id);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    sdk::throw_value_error("alloc: alignment " + std::to_string(alignment) +
                           " is not a power of two");
  }
  const HipApi& api = state.api();
  const size_t size = nbytes == 0 ? 1 : nbytes;
  void* p = nullptr;
  check(api, api.Malloc(&p, size),
        "hipMalloc(" + std::to_string(size) + " bytes) on device " + std::to_string(device_id));
  if (alignment <= kMallocAlignment || reinterpret_cast<uintptr_t>(p) % alignment == 0) {
    return p;
  }
  // The runtime did not meet the alignment: allocate room to align within.
  (void)api.Free(p);
  if (size > SIZE_MAX - alignment) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes: size overflows");
  }
  void* base = nullptr;
  check(api, api.Malloc(&base, size + alignment),
        "hipMalloc(" + std::to_string(size + alignment) + " bytes) on device " +
            std::to_string(device_id));
  const auto b = reinterpret_cast<uintptr_t>(base);
  void* aligned = reinterpret_cast<void*>((b + alignment - 1) & ~(uintptr_t{alignment} - 1));
  if (aligned != base) state.remember_base(aligned, base);
  return aligned;
}

void RocmDevice::free(int32_t device_id, void* ptr) {
  PluginState& state = state_;
  state.use_device(device_id);
  if (ptr == nullptr) return;
  const HipApi& api = state.api();
  check(api, api.Free(state.take_base(ptr)), slot_device("hipFree", device_id));
}

void RocmDevice::copy_to_device(int32_t device_id, const void* host_src, void* dst,
                                size_t dst_offset, size_t nbytes, void* stream) {
  PluginState& state = state_;
  state.use_device(device_id);
  check_pointer(host_src, nbytes, "copy_to_device: source");
  check_pointer(dst, nbytes, "copy_to_device: destination");
  if (nbytes == 0) return;
  const HipApi& api = state.api();
  check(api,
        api.MemcpyAsync(static_cast<char*>(dst) + dst_offset, host_src, nbytes,
                        hipMemcpyHostToDevice, static_cast<hipStream_t>(stream)),
        "hipMemcpyAsync(host to device, " + std::to_string(nbytes) + " bytes) on device " +
            std::to_string(device_id));
}

void RocmDevice::copy_to_host(int32_t device_id, const void* src, size_t src_offset, void* host_dst,
                              size_t nbytes, void* stream) {
  PluginState& state = state_;
  state.use_device(device_id);
  check_pointer(src, nbytes, "copy_to_host: source");
  check_pointer(host_dst, nbytes, "copy_to_host: destination");
  if (nbytes == 0) return;
  const HipApi& api = state.api();
  check(api,
        api.MemcpyAsync(host_dst, static_cast<const char*>(src) + src_offset, nbytes,
                        hipMemcpyDeviceToHost, static_cast<hipStream_t>(stream)),
        "hipMemcpyAsync(device to host, " + std::to_string(nbytes) + " bytes) on device " +
            std::to_string(device_id));
}

void RocmDevice::copy_on_device(int32_t device_id, const void* src, size_t src_offset, void* dst,
                                size_t dst_offset, size_t nbytes, void* stream) {
  PluginState& state = state_;
  state.use_device(device_id);
  check_pointer(src, nbytes, "copy_on_device: source");
  check_pointer(dst, nbytes, "copy_on_device: destination");
  if (nbytes == 0) return;
  const HipApi& api = state.api();
  const auto s = static_cast<hipStream_t>(stream);
  const char* from = static_cast<const char*>(src) + src_offset;
  char* to = static_cast<char*>(dst) + dst_offset;
  const std::string what = "hipMemcpyAsync(device to device, " + std::to_string(nbytes) +
                           " bytes) on device " + std::to_string(device_id);
  const auto f = reinterpret_cast<uintptr_t>(from);
  const auto t = reinterpret_cast<uintptr_t>(to);
  const bool overlap = f < t + nbytes && t < f + nbytes;
  if (!overlap) {
    check(api, api.MemcpyAsync(to, from, nbytes, hipMemcpyDeviceToDevice, s), what);
    return;
  }
  // Overlapping ranges (memmove semantics) go through a temporary buffer; the stream is
  // synchronized before it is freed.
  void* tmp = nullptr;
  check(api, api.Malloc(&tmp, nbytes), "hipMalloc(" + std::to_string(nbytes) + " bytes)");
  hipError_t e = api.MemcpyAsync(tmp, from, nbytes, hipMemcpyDeviceToDevice, s);
  if (e == hipSuccess) e = api.MemcpyAsync(to, tmp, nbytes, hipMemcpyDeviceToDevice, s);
  const hipError_t synced = api.StreamSynchronize(s);
  (void)api.Free(tmp);
  check(api, e, what);
  check(api, synced, slot_device("hipStreamSynchronize", device_id));
}

// ---- streams ----

void RocmDevice::synchronize(int32_t device_id, void* stream) {
  PluginState& state = state_;
  state.use_device(device_id);
  const HipApi& api = state.api();
  check(api, api.StreamSynchronize(static_cast<hipStream_t>(stream)),
        slot_device("hipStreamSynchronize", device_id));
}

void* RocmDevice::stream_create(int32_t device_id) {
  PluginState& state = state_;
  state.use_device(device_id);
  const HipApi& api = state.api();
  hipStream_t s = nullptr;
  check(api, api.StreamCreate(&s), slot_device("hipStreamCreate", device_id));
  return s;
}

void RocmDevice::stream_destroy(int32_t device_id, void* stream) {
  PluginState& state = state_;
  state.use_device(device_id);
  if (stream == nullptr) return;  // the null stream is not destroyed
  const HipApi& api = state.api();
  check(api, api.StreamDestroy(static_cast<hipStream_t>(stream)),
        slot_device("hipStreamDestroy", device_id));
}

// ---- timers ----

namespace {

struct Timer {
  int32_t device_id = 0;
  hipEvent_t start = nullptr;
  hipEvent_t stop = nullptr;
  bool started = false;
  bool stopped = false;
};

void destroy_events(const HipApi& api, Timer& t) {
  if (t.start != nullptr) (void)api.EventDestroy(t.start);
  if (t.stop != nullptr) (void)api.EventDestroy(t.stop);
  t.start = t.stop = nullptr;
}

}  // namespace

void* RocmDevice::timer_create(int32_t device_id) {
  PluginState& state = state_;
  state.use_device(device_id);
  const HipApi& api = state.api();
  auto t = std::make_unique<Timer>();
  t->device_id = device_id;
  hipError_t e = api.EventCreate(&t->start);
  if (e == hipSuccess) e = api.EventCreate(&t->stop);
  if (e != hipSuccess) destroy_events(api, *t);
  check(api, e, slot_device("hipEventCreate", device_id));
  return t.release();
}

void RocmDevice::timer_start(void* timer, void* stream) {
  if (timer == nullptr) sdk::throw_value_error("timer_start: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  PluginState& state = state_;
  state.use_device(t->device_id);
  const HipApi& api = state.api();
  // Recording only enqueues a marker on the stream; it never waits.
  check(api, api.EventRecord(t->start, static_cast<hipStream_t>(stream)), "hipEventRecord(start)");
  t->started = true;
  t->stopped = false;
}

void RocmDevice::timer_stop(void* timer, void* stream) {
  if (timer == nullptr) sdk::throw_value_error("timer_stop: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  if (!t->started) sdk::throw_value_error("timer_stop before timer_start");
  PluginState& state = state_;
  state.use_device(t->device_id);
  const HipApi& api = state.api();
  check(api, api.EventRecord(t->stop, static_cast<hipStream_t>(stream)), "hipEventRecord(stop)");
  t->stopped = true;
}

int64_t RocmDevice::timer_elapsed_ns(void* timer) {
  if (timer == nullptr) sdk::throw_value_error("timer_elapsed_ns: timer is NULL");
  auto* t = static_cast<Timer*>(timer);
  if (!t->stopped)
    sdk::throw_value_error("timer_elapsed_ns: the timer was not started and stopped");
  PluginState& state = state_;
  state.use_device(t->device_id);
  const HipApi& api = state.api();
  check(api, api.EventSynchronize(t->stop), "hipEventSynchronize(stop)");
  float ms = 0.0f;
  check(api, api.EventElapsedTime(&ms, t->start, t->stop), "hipEventElapsedTime");
  return std::llround(static_cast<double>(ms) * 1e6);
}

void RocmDevice::timer_destroy(void* timer) noexcept {
  if (timer == nullptr) return;
  std::unique_ptr<Timer> t(static_cast<Timer*>(timer));
  try {
    PluginState& state = state_;
    state.use_device(t->device_id);
    destroy_events(state.api(), *t);
  } catch (const std::exception& e) {
    sdk::log(KILN_LOG_WARN, "timer_destroy: %s", e.what());
  }
}

// ---- device code ----

void* RocmDevice::module_load(int32_t device_id, const void* data, size_t size, const char* format,
                              const char* metadata_json) {
  if (data == nullptr && size > 0) sdk::throw_value_error("module_load: data is NULL");
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(data), data ? size : 0);
  return load_module(state_, device_id, bytes, format != nullptr ? format : "(null)",
                     metadata_json != nullptr ? metadata_json : "")
      .release();
}

void* RocmDevice::module_get_kernel(void* module, const char* name) {
  if (module == nullptr || name == nullptr)
    sdk::throw_value_error("module_get_kernel: module or name is NULL");
  return &get_kernel(state_, *static_cast<RocmModule*>(module), name);
}

void RocmDevice::module_unload(void* module) noexcept {
  unload_module(state_, static_cast<RocmModule*>(module));
}

void RocmDevice::launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
                        const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream) {
  if (kernel == nullptr) sdk::throw_value_error("launch: kernel is NULL");
  launch_kernel(state_, *static_cast<RocmKernel*>(kernel), args, num_args, grid, block,
                dynamic_shared_bytes, stream);
}

}  // namespace kiln::rocm
