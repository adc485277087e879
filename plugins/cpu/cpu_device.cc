#include "cpu_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "kernel_library.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::cpu {
namespace {

// The host is one device: oneTBB spreads work over its cores inside a kernel call.
constexpr int32_t kDeviceCount = 1;
// Prefix of this component's error messages.
constexpr const char* kContext = "cpu";

// The plugin state behind a table's `self`.
PluginState& state_of(void* self) { return *static_cast<PluginState*>(self); }

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

// Reports one device; never fails except for a NULL `count`.
KilnError* device_count(void* /*self*/, int32_t* count, const char** /*why_none*/) {
  return sdk::guard(kContext, [&] {
    if (count == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "device_count: count is NULL");
    *count = kDeviceCount;
  });
}

// Visits the cached CPU attributes (strings borrowed for the visit only).
KilnError* device_attributes(void* self, int32_t device_id, KilnAttributeVisitor visit, void* ctx) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    if (visit == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "device_attributes: visit is NULL");
    for (const CpuAttribute& attribute : state_of(self).cpu_attributes()) {
      KilnAny value{};
      std::visit(
          [&](const auto& v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, int64_t>) {
              value.type_code = KILN_TYPE_INT;
              value.value.v_int64 = v;
            } else {
              value.type_code = KILN_TYPE_STRING;
              value.value.v_str = v.c_str();
            }
          },
          attribute.value);
      visit(ctx, attribute.key.c_str(), &value);
    }
  });
}

// ---- memory ----

// Allocates max(nbytes, 1 alignment unit) at max(alignment, kMinAlignment) into `*out`
// (owned by the caller until free_memory). Errors: VALUE for an alignment that is not a power
// of two, OUT_OF_MEMORY naming the size.
KilnError* alloc(void* /*self*/, int32_t device_id, size_t nbytes, size_t alignment, void** out) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    if (out == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "alloc: out is NULL");
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
    *out = p;
  });
}

// Frees memory from alloc(); NULL is a no-op.
KilnError* free_memory(void* /*self*/, int32_t device_id, void* ptr) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    std::free(ptr);
  });
}

// Copies `nbytes` from host memory to `dst + dst_offset`; synchronous.
KilnError* copy_to_device(void* /*self*/, int32_t device_id, const void* host_src, void* dst,
                          size_t dst_offset, size_t nbytes, void* /*stream*/) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    check_pointer(host_src, nbytes, "copy_to_device: source");
    check_pointer(dst, nbytes, "copy_to_device: destination");
    if (nbytes > 0) std::memcpy(static_cast<char*>(dst) + dst_offset, host_src, nbytes);
  });
}

// Copies `nbytes` from `src + src_offset` to host memory; synchronous.
KilnError* copy_to_host(void* /*self*/, int32_t device_id, const void* src, size_t src_offset,
                        void* host_dst, size_t nbytes, void* /*stream*/) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    check_pointer(src, nbytes, "copy_to_host: source");
    check_pointer(host_dst, nbytes, "copy_to_host: destination");
    if (nbytes > 0) std::memcpy(host_dst, static_cast<const char*>(src) + src_offset, nbytes);
  });
}

// Copies `nbytes` between two device ranges, which may overlap; synchronous.
KilnError* copy_on_device(void* /*self*/, int32_t device_id, const void* src, size_t src_offset,
                          void* dst, size_t dst_offset, size_t nbytes, void* /*stream*/) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    check_pointer(src, nbytes, "copy_on_device: source");
    check_pointer(dst, nbytes, "copy_on_device: destination");
    // memmove: both ranges are device memory and may overlap (e.g. shifting within a buffer).
    if (nbytes > 0) {
      std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset,
                   nbytes);
    }
  });
}

// ---- streams ----

// Returns at once after validating `device_id`.
KilnError* synchronize(void* /*self*/, int32_t device_id, void* /*stream*/) {
  // Every call of this backend completes before it returns, so there is nothing to wait for.
  return sdk::guard(kContext, [&] { check_device(device_id); });
}

// ---- timers ----

// A timer: the two points start and stop recorded. Work is synchronous, so "now" at
// timer_stop is when the work issued before it finished.
struct Timer {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point stop;
  bool started = false;
  bool stopped = false;
};

// Makes a Timer, owned by the caller until destroy_timer.
KilnError* create_timer(void* /*self*/, int32_t device_id, void** timer) {
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_create: timer is NULL");
    *timer = new Timer;
  });
}

// Records the start point (now) and clears an earlier stop.
KilnError* start_timer(void* /*self*/, void* timer, void* /*stream*/) {
  return sdk::guard(kContext, [&] {
    if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_start: timer is NULL");
    auto* t = static_cast<Timer*>(timer);
    t->start = std::chrono::steady_clock::now();
    t->started = true;
    t->stopped = false;
  });
}

// Records the stop point; VALUE error before any start.
KilnError* stop_timer(void* /*self*/, void* timer, void* /*stream*/) {
  return sdk::guard(kContext, [&] {
    if (timer == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "timer_stop: timer is NULL");
    auto* t = static_cast<Timer*>(timer);
    if (!t->started) throw sdk::Error(KILN_ERROR_VALUE, "timer_stop before timer_start");
    t->stop = std::chrono::steady_clock::now();
    t->stopped = true;
  });
}

// Writes stop - start in nanoseconds; VALUE error unless started and stopped.
KilnError* elapsed_ns(void* /*self*/, void* timer, int64_t* ns) {
  return sdk::guard(kContext, [&] {
    if (timer == nullptr || ns == nullptr) {
      throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: timer or ns is NULL");
    }
    const auto* t = static_cast<const Timer*>(timer);
    if (!t->stopped) {
      throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: the timer was not started and stopped");
    }
    *ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t->stop - t->start).count();
  });
}

// Frees a Timer from create_timer; NULL is a no-op.
void destroy_timer(void* /*self*/, void* timer) { delete static_cast<Timer*>(timer); }

// ---- device code ----

// Loads a kernel library from `size` bytes (format "so" only) into `*module`, a
// KernelLibrary owned by the caller until module_unload. Errors: VALUE for another format or
// bytes the dynamic loader rejects, plus those of KernelLibrary::open_bytes.
KilnError* module_load(void* self, int32_t device_id, const void* data, size_t size,
                       const char* format, const char* /*metadata_json*/, void** module) {
  // metadata_json describes launch extents of GPU kernels; a kernel library carries its own
  // signatures, so it is not needed here.
  return sdk::guard(kContext, [&] {
    check_device(device_id);
    if (module == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_load: module is NULL");
    if (format == nullptr || std::strcmp(format, "so") != 0) {
      throw sdk::Error(KILN_ERROR_VALUE, std::string("cpu backend cannot load format '") +
                                             (format != nullptr ? format : "(null)") +
                                             "' (it loads 'so' kernel libraries only)");
    }
    *module = KernelLibrary::open_bytes(state_of(self), data, size).release();
  });
}

// Finds function `name` of `module`; NOT_FOUND lists the available names.
KilnError* module_get_kernel(void* /*self*/, void* module, const char* name, void** kernel) {
  return sdk::guard(kContext, [&] {
    if (module == nullptr || kernel == nullptr) {
      throw sdk::Error(KILN_ERROR_VALUE, "module_get_kernel: module or kernel is NULL");
    }
    const KilnKernelFunction& f = static_cast<KernelLibrary*>(module)->function(name);
    // The function entry lives in the library's static storage until module_unload.
    *kernel = const_cast<KilnKernelFunction*>(&f);
  });
}

// Unloads a module from module_load; its kernels become invalid.
void module_unload(void* /*self*/, void* module) { delete static_cast<KernelLibrary*>(module); }

// Calls `kernel` with `args` (borrowed) on the calling thread and returns its error, if any.
KilnError* launch(void* /*self*/, void* kernel, const KilnAny* args, int32_t num_args,
                  const uint32_t* /*grid*/, const uint32_t* /*block*/,
                  uint32_t /*dynamic_shared_bytes*/, void* /*stream*/) {
  // grid, block and shared memory describe a GPU's thread hierarchy. A CPU kernel is one
  // call that covers the whole problem and parallelises itself through the environment's
  // parallel_for (sized to the plugin's arena), so the extents carry no information here.
  if (kernel == nullptr || num_args < 0 || (num_args > 0 && args == nullptr)) {
    return sdk::guard(kContext, [] {
      throw sdk::Error(KILN_ERROR_VALUE, "launch: kernel is NULL or the arguments are malformed");
    });
  }
  const auto* f = static_cast<const KilnKernelFunction*>(kernel);
  // The kernel's own errors come from the host factory already and are passed on unchanged;
  // its return value is discarded, as a launch has none.
  KilnAny ret{};
  ret.type_code = KILN_TYPE_NONE;
  return f->fn(f->self, args, num_args, &ret);
}

}  // namespace

KilnDeviceBackend make_device_backend(PluginState* state) {
  KilnDeviceBackend b = sdk::make_table<KilnDeviceBackend>();
  b.self = state;
  b.dl_device_type = kDLCPU;
  b.device_count = &device_count;
  b.device_attributes = &device_attributes;
  b.alloc = &alloc;
  b.free = &free_memory;
  b.copy_to_device = &copy_to_device;
  b.copy_to_host = &copy_to_host;
  b.copy_on_device = &copy_on_device;
  b.synchronize = &synchronize;
  b.timer_create = &create_timer;
  b.timer_start = &start_timer;
  b.timer_stop = &stop_timer;
  b.timer_elapsed_ns = &elapsed_ns;
  b.timer_destroy = &destroy_timer;
  b.module_load = &module_load;
  b.module_get_kernel = &module_get_kernel;
  b.module_unload = &module_unload;
  b.launch = &launch;
  return b;
}

}  // namespace kiln::cpu
