// SPDX-License-Identifier: Apache-2.0
// The opencl plugin's state between negotiation and shutdown: the configuration, and one owner
// per concept, composed here and nothing more:
//   DeviceRegistry  (device_registry.h)  platforms, devices, their attributes and contexts
//   Queues          (queues.h)           default queues and streams
//   Memory          (memory.h)           buffers, the pointer -> cl_mem registry, copies
//   ProgramCache    (program_cache.h)    building programs, in-memory and on-disk caches
//   Timers          (timers.h)           marker-event timers
//   Modules         (modules.h)          modules and their kernels
//   Launcher        (launcher.h)         argument setting and enqueue
// Each keeps its own registry and lock. The "opencl" device table's slots are members of this
// class that forward to the owner (opencl_backend.cc).
#ifndef KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_
#define KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "device_registry.h"
#include "kiln/c/kiln.h"
#include "kiln/sdk/device_backend.hpp"
#include "launcher.h"
#include "memory.h"
#include "modules.h"
#include "plugin_options.h"
#include "program_cache.h"
#include "queues.h"
#include "timers.h"

namespace kiln::opencl {

class PluginState {
 public:
  // Builds the component table; the concepts are made by configure().
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  // Destroys the concepts in reverse dependency order: whatever the host left (kernels and
  // modules, timers, cached programs, buffers, streams) goes before the default queues and
  // the devices' contexts.
  ~PluginState();

  // Resolves the options (`options_json`, borrowed) and KILN_OPENCL_CACHE_DIR, then makes the
  // concepts in dependency order. Touches no OpenCL API: the driver is initialised on the
  // first device query. Throws kiln::sdk::Error(KILN_ERROR_VALUE) for bad options.
  void configure(const char* options_json);

  // The components this state owns (the "opencl" device table), valid for its lifetime.
  std::span<const KilnComponent> components() const { return components_; }
  const PluginOptions& options() const { return options_; }

  // The members below are the "opencl" device table's slots (kiln::sdk::make_device_backend,
  // with this state as `self`), each forwarding to the concept that owns it; their arguments,
  // errors and ownership are those of the owner's member. Called only after configure().
  // Errors are kiln::sdk::Error, prefixed with kErrorContext by the table.
  static constexpr const char* kErrorContext = "opencl";

  // ---- devices: DeviceRegistry ----
  int32_t device_count(const char** why_none);
  void device_attributes(int32_t id, const sdk::AttributeVisitor& visit);
  // ---- memory and copies: Memory ----
  void* alloc(int32_t id, size_t nbytes, size_t alignment);
  void free(int32_t id, void* ptr);
  void copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset, size_t nbytes,
                      void* stream);
  void copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst, size_t nbytes,
                    void* stream);
  void copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst, size_t dst_offset,
                      size_t nbytes, void* stream);
  // ---- streams: Queues ----
  void synchronize(int32_t id, void* stream);
  void* stream_create(int32_t id);
  void stream_destroy(int32_t id, void* stream);
  // ---- timers: Timers ----
  void* timer_create(int32_t id);
  void timer_start(void* timer, void* stream);
  void timer_stop(void* timer, void* stream);
  int64_t timer_elapsed_ns(void* timer);
  void timer_destroy(void* timer) noexcept;
  // ---- device code: Modules, Launcher ----
  void* module_load(int32_t id, const void* data, size_t size, const char* format,
                    const char* metadata_json);
  void* module_get_kernel(void* module, const char* name);
  void module_unload(void* module) noexcept;
  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream);

 private:
  // The "opencl" device table with this state as `self` (opencl_backend.cc, beside the slots).
  KilnDeviceBackend make_device_table();

  PluginOptions options_;
  // The concepts, in dependency order: each borrows only those declared above it. Made by
  // configure(); destroyed in reverse order.
  std::optional<DeviceRegistry> devices_;
  std::optional<Queues> queues_;
  std::optional<Memory> memory_;
  std::optional<ProgramCache> programs_;
  std::optional<Timers> timers_;
  std::optional<Modules> modules_;
  std::optional<Launcher> launcher_;

  KilnDeviceBackend device_table_;
  std::array<KilnComponent, 1> components_;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_
