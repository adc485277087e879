// SPDX-License-Identifier: Apache-2.0
// Device memory of the opencl backend: the buffers handed to the host (allocation, release,
// the registry of live buffers and the copies between them and the host), the sub-buffers a
// launch makes for tensors at a byte offset, and the extent of a tensor within its buffer.
#ifndef KILN_PLUGINS_OPENCL_MEMORY_H_
#define KILN_PLUGINS_OPENCL_MEMORY_H_

#include <CL/cl.h>
#include <dlpack/dlpack.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "cl_handle.h"
#include "device_registry.h"
#include "kiln/sdk/support/kernel_args.hpp"
#include "queues.h"

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

// Owns the buffers handed to the host. The pointer the host stores (DLTensor::data) *is* the
// cl_mem handle; every buffer is registered, so a pointer that is not a live buffer of the
// device is refused instead of reaching the driver. Thread-safe: mu_ guards the registry.
class Memory {
 public:
  // `devices` and `queues` (borrowed) must outlive this object.
  Memory(DeviceRegistry& devices, Queues& queues);
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  // Releases the buffers the host left.
  ~Memory();

  // A new buffer of `nbytes` (at least 1) on device `id`, owned by this object until free().
  // `alignment` must be 0 or a power of two, and is otherwise moot (a buffer starts at the
  // device's base address alignment). Throws as DeviceRegistry::device and
  // DeviceRecord::context; KILN_ERROR_VALUE for a bad alignment; KILN_ERROR_OUT_OF_MEMORY
  // past CL_DEVICE_MAX_MEM_ALLOC_SIZE or when clCreateBuffer runs out of memory.
  void* alloc(int32_t id, size_t nbytes, size_t alignment);
  // Releases buffer `ptr` of device `id` (NULL: nothing); work still using it keeps it alive
  // until done. Makes every kernel forget its buffer arguments (epoch()). Throws
  // KILN_ERROR_VALUE for a pointer that is not a live buffer of device `id`.
  void free(int32_t id, void* ptr);
  // Copies `nbytes` from `host_src` (borrowed for the call) to `dst` + `dst_offset` on
  // `stream` (NULL: the default queue) of device `id`; blocking. Throws KILN_ERROR_VALUE for a
  // pointer that is not a live buffer of the device, a range outside it or a NULL source, as
  // Queues::queue_for for the stream, and for a failed clEnqueueWriteBuffer.
  void copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset, size_t nbytes,
                      void* stream);
  // Copies `nbytes` from `src` + `src_offset` to `host_dst` (borrowed); blocking, so the data
  // is there on return. Errors as copy_to_device (clEnqueueReadBuffer).
  void copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst, size_t nbytes,
                    void* stream);
  // Copies `nbytes` between two buffers of device `id`, asynchronously on `stream`;
  // overlapping ranges of one buffer behave like memmove (through a temporary buffer). Errors
  // as copy_to_device (clEnqueueCopyBuffer, clCreateBuffer).
  void copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst, size_t dst_offset,
                      size_t nbytes, void* stream);

  // The live buffer `mem` if it belongs to device `device`, else nullopt. Takes mu_; never
  // throws. For the launch path, which words its own errors.
  std::optional<Buffer> find(cl_mem mem, int32_t device);
  // Advanced by every free(): a kernel that recorded its buffer arguments at another value
  // must forget them, since a new buffer may reuse a freed handle's value. Lock-free.
  uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

 private:
  // The buffer `ptr` on device `id`; throws KILN_ERROR_VALUE naming `what` when it is not a
  // live buffer of this plugin or belongs to another device.
  Buffer buffer(int32_t id, const void* ptr, const char* what);
  // Throws KILN_ERROR_VALUE unless [offset, offset + nbytes) lies inside `b`.
  static void check_range(const Buffer& b, size_t offset, size_t nbytes, const char* what);

  DeviceRegistry& devices_;
  Queues& queues_;
  std::mutex mu_;  // guards buffers_
  std::unordered_map<cl_mem, OwnedBuffer> buffers_;
  std::atomic<uint64_t> epoch_{1};  // advanced by every free
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
