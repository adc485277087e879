// Device code of the opencl backend: a module is a program (built or taken from the program
// cache) on one device with its metadata, and the kernels looked up in it.
#ifndef KILN_PLUGINS_OPENCL_PROGRAMS_H_
#define KILN_PLUGINS_OPENCL_PROGRAMS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cl_handle.h"
#include "device_registry.h"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "program_cache.h"

namespace kiln::opencl {

class Module;

// A kernel of a loaded module. clSetKernelArg and the enqueue that follows are serialised on
// `mu`, because a cl_kernel holds its argument values.
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
  uint64_t set_epoch = 0;        // PluginState's buffer epoch when the values were recorded
  uint32_t set_local_bytes = 0;  // the __local parameter's size, 0 when not set
};

// A program loaded on one device, with its metadata and the kernels looked up so far (owned).
class Module {
 public:
  Module(DeviceRecord& device, std::shared_ptr<Program> program, sdk::ModuleMetadata metadata)
      : device_(device), program_(std::move(program)), metadata_(std::move(metadata)) {}
  DeviceRecord& device() { return device_; }
  Program& program() { return *program_; }
  const sdk::ModuleMetadata& metadata() const { return metadata_; }
  std::mutex& mu() { return mu_; }
  std::map<std::string, std::unique_ptr<Kernel>>& kernels() { return kernels_; }

 private:
  DeviceRecord& device_;
  std::shared_ptr<Program> program_;
  sdk::ModuleMetadata metadata_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

// Names from CL_PROGRAM_KERNEL_NAMES ("a;b"), as "a, b"; empty when unavailable.
std::string program_kernel_names(cl_program program);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_PROGRAMS_H_
