// Device memory of the opencl backend: the buffers handed to the host, the sub-buffers a
// launch makes for tensors at a byte offset, and the extent of a tensor within its buffer.
#ifndef KILN_PLUGINS_OPENCL_MEMORY_H_
#define KILN_PLUGINS_OPENCL_MEMORY_H_

#include <CL/cl.h>
#include <dlpack/dlpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "cl_handle.h"
#include "kiln/sdk/support/kernel_args.hpp"

namespace kiln::opencl {

// What the plugin knows of a live buffer: its device and its size in bytes.
struct Buffer {
  int32_t device = 0;
  size_t size = 0;
};

// A buffer allocated for the host: its description and the reference the plugin owns.
struct OwnedBuffer {
  Buffer info;
  MemHandle mem;
};

// The sub-buffers of one launch, released when it goes out of scope (OpenCL keeps a released
// memory object alive until the commands that use it have finished). Fixed storage, one slot
// per possible kernel argument: the launch path allocates nothing. Only the slots in use are
// touched, so a launch without sub-buffers pays nothing for the 128 slots.
class SubBuffers {
 public:
  SubBuffers() = default;
  SubBuffers(const SubBuffers&) = delete;
  SubBuffers& operator=(const SubBuffers&) = delete;
  ~SubBuffers() {
    for (size_t i = 0; i < count_; ++i) clReleaseMemObject(list_[i]);
  }

  // Keeps `sub` until this object goes and returns the cl_mem it holds. Throws nothing: there
  // is at most one sub-buffer per tensor argument, and pack_kernel_args refuses more than
  // kMaxKernelArgs arguments.
  cl_mem add(MemHandle sub) {
    cl_mem mem = sub.release();
    list_[count_++] = mem;
    return mem;
  }

 private:
  std::array<cl_mem, sdk::kMaxKernelArgs> list_;  // [0, count_) owned; the rest never read
  size_t count_ = 0;
};

// Bytes from the first to one past the last element of `t` (0 for an empty tensor), or nullopt
// when strides are negative or the size overflows.
std::optional<uint64_t> tensor_extent_bytes(const DLTensor& t);

// Makes a sub-buffer of `size` bytes at `origin` of `mem` (borrowed); the reference returned
// is the caller's. Throws kiln::sdk::Error prefixed with `what`: KILN_ERROR_VALUE for a
// misaligned origin (CL_MISALIGNED_SUB_BUFFER_OFFSET), else as throw_cl.
MemHandle make_sub_buffer(cl_mem mem, size_t origin, size_t size, const std::string& what);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_MEMORY_H_
