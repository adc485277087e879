// SPDX-License-Identifier: Apache-2.0
// Device code of the opencl backend: the modules handed to the host (a program, built or
// taken from the program cache, on one device with its metadata) and the kernels looked up in
// them.
#ifndef KILN_PLUGINS_OPENCL_MODULES_H_
#define KILN_PLUGINS_OPENCL_MODULES_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cl_handle.h"
#include "device_registry.h"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "program_cache.h"

namespace kiln::opencl {

class Module;

// A kernel of a loaded module, owned by it. clSetKernelArg and the enqueue that follows
// (Launcher) are serialised on `mu`, because a cl_kernel holds its argument values.
struct Kernel {
  Module* module = nullptr;
  DeviceRecord* device = nullptr;
  KernelHandle kernel;
  const sdk::KernelInfo* info = nullptr;  // owned by the module's metadata
  // The kernel takes one more parameter than its metadata arguments: a trailing __local
  // pointer sized by the launch's dynamic_shared_bytes.
  bool dynamic_local = false;
  size_t work_group_size = 0;  // CL_KERNEL_WORK_GROUP_SIZE on its device
  std::mutex mu;
  // The argument values last given to clSetKernelArg (the cl_kernel keeps them), so that a
  // launch repeating them skips the call. Guarded by `mu`. Buffer arguments are forgotten
  // whenever any buffer is freed (a new buffer may reuse a freed handle's value); sub-buffers
  // are never remembered.
  std::vector<std::array<uint8_t, 8>> set_values;
  std::vector<uint8_t> set_valid;
  // The size of the buffer behind each argument, written when a tensor argument's buffer is
  // looked up; read instead of the lookup while set_valid says the cl_kernel holds that buffer
  // (no buffer was freed since, so it is still the same live buffer).
  std::vector<size_t> buffer_bytes;
  uint64_t set_epoch = 0;        // Memory::epoch() when the values were recorded
  uint32_t set_local_bytes = 0;  // the __local parameter's size, 0 when not set
};

// A program loaded on one device, with its metadata and the kernels looked up so far (owned;
// `mu()` guards the kernel map).
class Module {
 public:
  // `device` (borrowed, owned by the DeviceRegistry) is where `program` (shared with the
  // program cache) was built; `metadata` is the module's parsed sidecar.
  Module(DeviceRecord& device, std::shared_ptr<Program> program, sdk::ModuleMetadata metadata)
      : device_(device), program_(std::move(program)), metadata_(std::move(metadata)) {}
  // The device, program and metadata, valid for the module's lifetime.
  DeviceRecord& device() { return device_; }
  Program& program() { return *program_; }
  const sdk::ModuleMetadata& metadata() const { return metadata_; }
  // Guards kernels().
  std::mutex& mu() { return mu_; }
  // The kernels created so far, by name (owned).
  std::map<std::string, std::unique_ptr<Kernel>>& kernels() { return kernels_; }

 private:
  DeviceRecord& device_;
  std::shared_ptr<Program> program_;
  sdk::ModuleMetadata metadata_;
  std::mutex mu_;  // guards kernels_
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

// Owns the modules handed to the host and keeps the registry of their kernels; the void*
// module and kernel of the ABI are the Module* and Kernel*. Thread-safe: mu_ guards both
// registries; a module's own mutex guards its kernel map (taken before mu_, never after).
class Modules {
 public:
  // `devices` and `cache` (borrowed) must outlive this object; `build_options` (the plugin
  // option) is appended to every module's build options.
  Modules(DeviceRegistry& devices, ProgramCache& cache, std::string build_options);
  Modules(const Modules&) = delete;
  Modules& operator=(const Modules&) = delete;
  // Releases the modules (and kernels) the host left.
  ~Modules();

  // Loads `size` bytes at `data` (borrowed) in `format` on device `id`, with `metadata_json`
  // (the sidecar, borrowed; NULL or empty: none). The module is owned by this object until
  // unload(). Throws as DeviceRegistry::device, sdk::parse_module_metadata and
  // ProgramCache::get (KILN_ERROR_VALUE for a NULL format).
  void* load(int32_t id, const void* data, size_t size, const char* format,
             const char* metadata_json);
  // The kernel `name` of `module`, created on the first call and owned by the module. Throws
  // KILN_ERROR_VALUE for a module that is not live (KILN_ERROR_UNAVAILABLE with the reason
  // when there is no device), a NULL name, or a parameter count other than the metadata's;
  // KILN_ERROR_NOT_FOUND for a name the metadata or the program lacks.
  void* get_kernel(void* module, const char* name);
  // Releases `module` and its kernels; NULL or a handle that is not live is ignored. Advances
  // HandleEpoch. Never throws.
  void unload(void* module) noexcept;

  // The kernel `handle` when it is live, else NULL. Takes mu_; never throws. For the launch
  // path, which words its own errors.
  Kernel* find_kernel(void* handle);

 private:
  // The live module `handle`; throws KILN_ERROR_VALUE naming `slot` otherwise.
  Module& module(void* handle, const char* slot);

  DeviceRegistry& devices_;
  ProgramCache& cache_;
  const std::string build_options_;
  std::mutex mu_;  // guards modules_ and kernels_
  std::unordered_map<Module*, std::unique_ptr<Module>> modules_;
  std::unordered_set<Kernel*> kernels_;  // not owning: each Module owns its kernels
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_MODULES_H_
