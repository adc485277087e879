// SPDX-License-Identifier: Apache-2.0
// An example out-of-tree device plugin, built against the installed Kiln SDK alone: a vendor
// device type "exampledev" with every slot group of the device ABI (docs/plugin-abi.md §10.1):
//
//   enumeration  one device (the plugin option `devices: N` in a plugin set changes the count)
//   memory       host memory, aligned as asked
//   timers       steady-clock timers (launches are synchronous, so start/stop bracket the work)
//   device code  format "exampledev_so": a shared library of kernels (exampledev_kernel.h),
//                loaded from memory, with per-kernel metadata checked at every launch
//
// A real vendor plugin would talk to its driver where this one touches host memory; the
// structure (a backend class, kiln::sdk::make_device_backend, KilnSDK::support for metadata,
// argument packing and in-memory loading) is the same. It passes kiln-conformance:
//
//   kiln-conformance --plugin-path build/plugins --device exampledev --require-device
//     --module exampledev:build/vector_add.exampledev:exampledev_so:vector_add
// (one command line; see CMakeLists.txt beside this file).
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exampledev_kernel.h"
#include "kiln/sdk/device_backend.hpp"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/kernel_args.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "kiln/sdk/support/memfd_library.hpp"

namespace {

// A vendor device type with no DLPack code takes a value >= 64, unique among loaded plugins
// (docs/plugin-abi.md "Reserving a device type code").
constexpr int32_t kExampledevType = 120;

// A loaded module: the kernel library and its metadata. Kernels point into both.
struct Module {
  void* library = nullptr;
  kiln::sdk::ModuleMetadata metadata;
  ~Module() {
    if (library != nullptr) dlclose(library);
  }
};

// A kernel handle: the function and its metadata entry.
struct Kernel {
  ExampledevKernel function;
  const kiln::sdk::KernelInfo* info;
};

struct Timer {
  std::chrono::steady_clock::time_point start, stop;
};

class ExampledevBackend {
 public:
  static constexpr const char* kErrorContext = "exampledev";

  void set_device_count(int32_t count) { count_ = count; }

  int32_t device_count(const char** why_none) {
    if (count_ == 0 && why_none != nullptr) *why_none = "the plugin set gave devices: 0";
    return count_;
  }

  void device_attributes(int32_t device_id, const kiln::sdk::AttributeVisitor& visit) {
    check_id(device_id);
    visit("name", "Example device " + std::to_string(device_id));
    visit("vendor", std::string("Kiln SDK example"));
    visit("memory", std::string("host"));
  }

  void* alloc(int32_t device_id, size_t nbytes, size_t alignment) {
    check_id(device_id);
    // aligned_alloc wants a size that is a multiple of the alignment.
    void* p = std::aligned_alloc(alignment, (nbytes + alignment - 1) / alignment * alignment);
    if (p == nullptr) {
      throw kiln::sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                             "cannot allocate " + std::to_string(nbytes) + " bytes");
    }
    return p;
  }
  void free(int32_t device_id, void* ptr) {
    check_id(device_id);
    std::free(ptr);
  }

  void copy_to_device(int32_t device_id, const void* host_src, void* dst, size_t dst_offset,
                      size_t nbytes, void* /*stream*/) {
    check_id(device_id);
    std::memcpy(static_cast<char*>(dst) + dst_offset, host_src, nbytes);
  }
  void copy_to_host(int32_t device_id, const void* src, size_t src_offset, void* host_dst,
                    size_t nbytes, void* /*stream*/) {
    check_id(device_id);
    std::memcpy(host_dst, static_cast<const char*>(src) + src_offset, nbytes);
  }
  void copy_on_device(int32_t device_id, const void* src, size_t src_offset, void* dst,
                      size_t dst_offset, size_t nbytes, void* /*stream*/) {
    check_id(device_id);
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset,
                 nbytes);
  }
  // Every operation completes before it returns: nothing to wait for.
  void synchronize(int32_t device_id, void* /*stream*/) { check_id(device_id); }

  void* timer_create(int32_t device_id) {
    check_id(device_id);
    return new Timer();
  }
  void timer_start(void* timer, void* /*stream*/) {
    static_cast<Timer*>(timer)->start = std::chrono::steady_clock::now();
  }
  void timer_stop(void* timer, void* /*stream*/) {
    static_cast<Timer*>(timer)->stop = std::chrono::steady_clock::now();
  }
  int64_t timer_elapsed_ns(void* timer) {
    const Timer& t = *static_cast<Timer*>(timer);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.stop - t.start).count();
  }
  void timer_destroy(void* timer) noexcept { delete static_cast<Timer*>(timer); }

  void* module_load(int32_t device_id, const void* data, size_t size, const char* format,
                    const char* metadata_json) {
    check_id(device_id);
    if (std::strcmp(format, "exampledev_so") != 0) {
      throw kiln::sdk::Error(KILN_ERROR_VALUE, std::string("unsupported module format '") + format +
                                                   "' (this device loads exampledev_so)");
    }
    auto module = std::make_unique<Module>();
    // Parse first: malformed metadata is refused before any code is loaded.
    module->metadata = kiln::sdk::parse_module_metadata(metadata_json);
    module->library = kiln::sdk::dlopen_bytes(data, size, "exampledev module");
    return module.release();
  }

  void* module_get_kernel(void* module, const char* name) {
    auto* m = static_cast<Module*>(module);
    // The metadata must describe the kernel: launch checks its arguments against it.
    const kiln::sdk::KernelInfo& info = kiln::sdk::find_kernel(m->metadata, name);
    auto function = reinterpret_cast<ExampledevKernel>(dlsym(m->library, name));
    if (function == nullptr) {
      throw kiln::sdk::Error(KILN_ERROR_NOT_FOUND,
                             std::string("the module exports no kernel '") + name + "'");
    }
    // Kernel handles live until their module is unloaded. Slots may be called from several
    // threads at once, hence the lock.
    std::lock_guard<std::mutex> lock(mutex_);
    kernels_of_module_.emplace_back(m, std::make_unique<Kernel>(Kernel{function, &info}));
    return kernels_of_module_.back().second.get();
  }

  void module_unload(void* module) noexcept {
    auto* m = static_cast<Module*>(module);
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(kernels_of_module_, [m](const auto& k) { return k.first == m; });
    delete m;
  }

  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t /*dynamic_shared_bytes*/, void* /*stream*/) {
    const Kernel& k = *static_cast<Kernel*>(kernel);
    // Checks the count and kinds against the metadata and packs the values; tensors become
    // their device address (data + byte_offset), after checking they live on this device.
    kiln::sdk::PackedArgs packed;
    kiln::sdk::pack_kernel_args(
        *k.info, args, num_args,
        [](const DLTensor& t, size_t index) -> uint64_t {
          if (kiln::sdk::device_type_code(t.device) != kExampledevType) {
            throw kiln::sdk::Error(KILN_ERROR_VALUE, "argument " + std::to_string(index) +
                                                         " is a tensor on another device");
          }
          return reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
        },
        packed);
    ExampledevThread thread{};
    for (int axis = 0; axis < 3; ++axis) {
      thread.grid_dim[axis] = grid[axis] == 0 ? 1 : grid[axis];
      thread.block_dim[axis] = block[axis] == 0 ? 1 : block[axis];
    }
    // Every thread of every block, one after another.
    for (uint32_t bz = 0; bz < thread.grid_dim[2]; ++bz)
      for (uint32_t by = 0; by < thread.grid_dim[1]; ++by)
        for (uint32_t bx = 0; bx < thread.grid_dim[0]; ++bx)
          for (uint32_t tz = 0; tz < thread.block_dim[2]; ++tz)
            for (uint32_t ty = 0; ty < thread.block_dim[1]; ++ty)
              for (uint32_t tx = 0; tx < thread.block_dim[0]; ++tx) {
                thread.block_idx[0] = bx, thread.block_idx[1] = by, thread.block_idx[2] = bz;
                thread.thread_idx[0] = tx, thread.thread_idx[1] = ty, thread.thread_idx[2] = tz;
                k.function(packed.kernel_params(), &thread);
              }
  }

 private:
  void check_id(int32_t device_id) const {
    if (device_id < 0 || device_id >= count_) {
      throw kiln::sdk::Error(KILN_ERROR_INDEX, "no device " + std::to_string(device_id) +
                                                   " (there are " + std::to_string(count_) + ")");
    }
  }

  int32_t count_ = 1;
  std::mutex mutex_;
  std::vector<std::pair<Module*, std::unique_ptr<Kernel>>> kernels_of_module_;
};

// Reads the plugin option `devices` (a plugin set's `options: {devices: N}`), default 1. The
// options arrive as a JSON object; this example reads its one integer by hand to stay free of
// a JSON library.
int32_t device_count_option(const char* options_json) {
  if (options_json == nullptr) return 1;
  const char* key = std::strstr(options_json, "\"devices\"");
  if (key == nullptr) return 1;
  const char* colon = std::strchr(key, ':');
  char* end = nullptr;
  const long n = colon != nullptr ? std::strtol(colon + 1, &end, 10) : -1;
  if (colon == nullptr || end == colon + 1 || n < 0 || n > 64) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "option devices must be an integer from 0 to 64");
  }
  return static_cast<int32_t>(n);
}

}  // namespace

extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  static ExampledevBackend backend;
  static KilnDeviceBackend table = kiln::sdk::make_device_backend(&backend, kExampledevType);
  static const KilnComponent components[] = {
      kiln::sdk::component(KILN_COMPONENT_DEVICE, "exampledev", &table)};
  // KILN_PLUGIN_VERSION: kiln_add_plugin() defines it from the project's VERSION, the same
  // value it writes into the manifest.
  kiln::sdk::PluginDescription description{"exampledev", KILN_PLUGIN_VERSION, components};
  description.configure = [](const KilnNegotiateIn& offer) {
    backend.set_device_count(device_count_option(offer.options_json));
  };
  return kiln::sdk::negotiate(in, out, description);
}
