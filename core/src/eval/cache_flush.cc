// SPDX-License-Identifier: Apache-2.0
// Cache flushing preprocessors for the time evaluator's f_preproc, registered as global
// functions:
// - cache_flush_cpu_non_first_arg (SPEC.md §1.4): flushes from every cache level the memory of
//   every tensor argument except the first, approximating cold weights while the activation
//   (first argument) stays warm.
// - cache_flush_device_l2: writes a buffer the size of the device's L2 cache (its
//   "l2_cache_bytes" attribute) on the device of the first tensor argument, so that the timed
//   batch starts with an L2 holding none of the arguments (as nvbench does on GPUs).
#include <fmt/format.h>

#include <cstdint>

#include "kiln/device_backend.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

void flush_range(const void* data, size_t nbytes) {
  if (data == nullptr || nbytes == 0) return;
#if defined(__x86_64__)
  constexpr uintptr_t kLine = 64;
  auto p = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
  const auto end = reinterpret_cast<uintptr_t>(data) + nbytes;
  for (; p < end; p += kLine) _mm_clflush(reinterpret_cast<const void*>(p));
  _mm_mfence();  // the flushes complete before the timed calls start
#elif defined(__aarch64__)
  uint64_t ctr;
  asm volatile("mrs %0, ctr_el0" : "=r"(ctr));
  const uintptr_t line = uintptr_t{4} << ((ctr >> 16) & 15);
  auto p = reinterpret_cast<uintptr_t>(data) & ~(line - 1);
  const auto end = reinterpret_cast<uintptr_t>(data) + nbytes;
  for (; p < end; p += line) asm volatile("dc civac, %0" : : "r"(p) : "memory");
  asm volatile("dmb ishst" : : : "memory");
#else
  (void)data;
  (void)nbytes;  // no portable way: a no-op, as in the reference
#endif
}

Any cache_flush_cpu_non_first_arg(const Any* args, int32_t num_args) {
  for (int32_t i = 1; i < num_args; ++i) {
    if (args[i].type_code() != KILN_TYPE_TENSOR) {
      throw TypeError(
          fmt::format("cache_flush_cpu_non_first_arg: argument {} expects tensor, "
                      "got {}",
                      i, args[i].type_name()));
    }
    Tensor t = args[i].cast<Tensor>();
    // The element count times the element size, from data (byte_offset is ignored as in
    // the reference).
    flush_range(t.dl()->data, t.nbytes());
  }
  return Any();
}

// The "l2_cache_bytes" attribute of device `id` of `backend`; 0 when it does not report it.
int64_t l2_cache_bytes(const DeviceBackend& backend, int32_t id) {
  for (const auto& [key, value] : backend.attributes(id)) {
    if (key == "l2_cache_bytes" && value.type_code() == KILN_TYPE_INT) return value.cast<int64_t>();
  }
  return 0;
}

// Device memory from `backend`, freed when it goes.
class DeviceBuffer {
 public:
  DeviceBuffer(const DeviceBackend& backend, int32_t id, size_t bytes)
      : backend_(backend), id_(id), ptr_(backend.alloc(id, bytes, 64)) {}
  ~DeviceBuffer() { backend_.free(id_, ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  const DeviceBackend& backend_;
  int32_t id_;
  void* ptr_;
};

// Flushes the L2 cache of the device of the first tensor argument, through the backend that
// tensor's memory came from (so it needs no runtime).
Any cache_flush_device_l2(const Any* args, int32_t num_args) {
  for (int32_t i = 0; i < num_args; ++i) {
    if (args[i].type_code() != KILN_TYPE_TENSOR) continue;
    const Tensor t = args[i].cast<Tensor>();
    const Device device = t.device();
    const Ref<DeviceBackend>& backend = t.get()->backend;
    const int64_t bytes = backend ? l2_cache_bytes(*backend, device.id) : 0;
    if (bytes <= 0) {
      throw ValueError(fmt::format(
          "cache_flush_device_l2: device {} reports no l2_cache_bytes attribute", device.str()));
    }
    // Copying one L2-sized buffer onto another writes every line of the cache with data no
    // argument shares. The buffers are made per call: allocation is not timed.
    const DeviceBuffer from(*backend, device.id, static_cast<size_t>(bytes));
    const DeviceBuffer to(*backend, device.id, static_cast<size_t>(bytes));
    backend->copy_on_device(device.id, from.get(), 0, to.get(), 0, static_cast<size_t>(bytes));
    backend->synchronize(device.id);
    return Any();
  }
  throw ValueError("cache_flush_device_l2: no tensor argument tells which device to flush");
}

const bool flushers_registered = [] {
  registry::set(
      "cache_flush_cpu_non_first_arg",
      Function::from_packed("cache_flush_cpu_non_first_arg", &cache_flush_cpu_non_first_arg), true);
  registry::set("cache_flush_device_l2",
                Function::from_packed("cache_flush_device_l2", &cache_flush_device_l2), true);
  return true;
}();

}  // namespace
}  // namespace kiln
