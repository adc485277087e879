// Everything the opencl plugin owns between negotiation and shutdown: the configuration, the
// devices (enumerated lazily, once), and the objects handed to the host (buffers, streams,
// timers, modules, kernels), each kept in a registry so that a handle the plugin did not make,
// or one already released, is an error rather than a crash. The registries own what they hold
// (RAII handles of cl_handle.h); the members are defined by concept: plugin_state.cc (devices),
// memory.cc, queues.cc (streams and timers), programs.cc (modules and kernels), launch.cc.
#ifndef KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_
#define KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_

#include <CL/cl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "device_registry.h"
#include "kiln/c/kiln.h"
#include "kiln/sdk/device_backend.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "memory.h"
#include "plugin_options.h"
#include "program_cache.h"
#include "programs.h"
#include "queues.h"

namespace kiln::opencl {

class PluginState {
 public:
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  // Releases whatever is left (the host destroys its objects first) and the devices.
  ~PluginState();

  // Resolves the options (`options_json`, borrowed) and KILN_OPENCL_CACHE_DIR. Touches no
  // OpenCL API: the driver is initialised on the first device query. Throws
  // kiln::sdk::Error(KILN_ERROR_VALUE) for bad options.
  void configure(const char* options_json);

  std::span<const KilnComponent> components() const { return components_; }

  // The members below serve the "opencl" device table (kiln::sdk::make_device_backend, with
  // this state as `self`); they throw kiln::sdk::Error, prefixed with kErrorContext by the table.
  static constexpr const char* kErrorContext = "opencl";

  // ---- devices ----
  // The number of devices; when 0, `*why_none` (if not NULL) points at the reason, owned by
  // this state.
  int32_t device_count(const char** why_none);
  // Visits the attributes of device `id` (errors as device()).
  void device_attributes(int32_t id, const sdk::AttributeVisitor& visit);
  // The enumeration, done once on first call (thread-safe).
  const Enumeration& enumeration();
  // Device `id`. Throws KILN_ERROR_UNAVAILABLE with the reason when there is no device,
  // KILN_ERROR_INDEX for an id out of range.
  DeviceRecord& device(int32_t id);
  // Throws KILN_ERROR_UNAVAILABLE with the reason when there is no device.
  void require_devices();

  // ---- memory and copies ----
  void* alloc(int32_t id, size_t nbytes, size_t alignment);
  void free(int32_t id, void* ptr);
  void copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset, size_t nbytes,
                      void* stream);
  void copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst, size_t nbytes,
                    void* stream);
  void copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst, size_t dst_offset,
                      size_t nbytes, void* stream);

  // ---- streams ----
  // The queue `stream` stands for on device `id` (NULL: the default queue).
  cl_command_queue queue_for(int32_t id, void* stream);
  void synchronize(int32_t id, void* stream);
  void* stream_create(int32_t id);
  void stream_destroy(int32_t id, void* stream);

  // ---- timers ----
  void* timer_create(int32_t id);
  void timer_start(void* timer, void* stream);
  void timer_stop(void* timer, void* stream);
  int64_t timer_elapsed_ns(void* timer);
  void timer_destroy(void* timer) noexcept;

  // ---- device code ----
  void* module_load(int32_t id, const void* data, size_t size, const char* format,
                    const char* metadata_json);
  void* module_get_kernel(void* module, const char* name);
  void module_unload(void* module) noexcept;
  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream);

  const PluginOptions& options() const { return options_; }

 private:
  // The buffer `ptr` on device `id`; throws KILN_ERROR_VALUE naming `what` when it is not a
  // live buffer of this plugin or belongs to another device.
  Buffer buffer(int32_t id, const void* ptr, const char* what);
  // Throws KILN_ERROR_VALUE unless [offset, offset + nbytes) lies inside `b`.
  static void check_range(const Buffer& b, size_t offset, size_t nbytes, const char* what);
  Timer& timer(void* handle, const char* slot);
  // Records a profiling marker for the start (`start`) or stop of `timer` on `stream`.
  void timer_mark(void* timer, void* stream, bool start);
  Module& module(void* handle, const char* slot);
  // The kernel `handle` and, for a non-NULL `stream`, its queue in `*queue` (NULL for the
  // default queue); KILN_ERROR_VALUE for a handle or stream that is not live, or a stream of
  // another device.
  Kernel& kernel(void* handle, void* stream, cl_command_queue* queue);
  // The cl_mem a tensor argument of `k` passes, making a sub-buffer for a byte_offset (owned
  // by `sub_buffers`, which the caller keeps until the launch is enqueued). Called with `k.mu`
  // held: a buffer `k` already holds as argument `index` is known live and is not looked up.
  cl_mem tensor_argument(Kernel& k, const DLTensor& t, size_t index, SubBuffers& sub_buffers);

  PluginOptions options_;
  std::unique_ptr<ProgramCache> cache_;
  std::once_flag enumerate_once_;
  Enumeration enumeration_;

  std::mutex buffers_mu_;
  std::unordered_map<cl_mem, OwnedBuffer> buffers_;
  std::atomic<uint64_t> buffer_epoch_{1};  // bumped by every free
  // Bumped whenever a kernel or a stream goes (module_unload, stream_destroy, destruction):
  // a launch may skip the registry lookups for the kernel and stream its thread validated at
  // the current value (launch.cc). One counter for every instance, so that a new state at a
  // destroyed one's address never sees an old value again.
  static inline std::atomic<uint64_t> handles_epoch_{1};
  std::mutex objects_mu_;  // guards the registries below
  std::unordered_map<cl_command_queue, Stream> streams_;
  std::unordered_map<Timer*, std::unique_ptr<Timer>> timers_;
  std::unordered_map<Module*, std::unique_ptr<Module>> modules_;
  std::unordered_set<Kernel*> kernels_;  // not owning: each Module owns its kernels

  KilnDeviceBackend device_table_;
  std::array<KilnComponent, 1> components_;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_PLUGIN_STATE_H_
