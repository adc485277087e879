// SPDX-License-Identifier: Apache-2.0
// Kernel launches of the opencl backend: the kernel and stream checks, tensor arguments (with
// sub-buffers for byte offsets), argument setting (skipping values the cl_kernel already
// holds) and the enqueue. The launch path allocates nothing on success, and a launch that
// repeats the previous one's kernel, stream and buffers takes one lock (the kernel's) and no
// registry lookup: the host cost of a launch is what the bare OpenCL calls cost, or close.
#ifndef KILN_PLUGINS_OPENCL_LAUNCHER_H_
#define KILN_PLUGINS_OPENCL_LAUNCHER_H_

#include <CL/cl.h>
#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

#include "device_registry.h"
#include "kiln/c/kiln.h"
#include "memory.h"
#include "modules.h"
#include "queues.h"

namespace kiln::opencl {

// Launches the kernels of Modules on the queues of Queues with the buffers of Memory. Owns no
// registry: its state is each thread's last validated (kernel, stream) pair, trusted while
// HandleEpoch is unchanged, and the argument values each Kernel records under its own mutex.
// Thread-safe: threads may launch the same kernel concurrently.
class Launcher {
 public:
  // `devices`, `queues`, `memory` and `modules` (borrowed) must outlive this object.
  Launcher(DeviceRegistry& devices, Queues& queues, Memory& memory, Modules& modules);
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Enqueues `kernel` on `stream` (NULL: the default queue of the kernel's device) with
  // `num_args` arguments at `args` (borrowed for the call; tensors on the kernel's device, in
  // live buffers), global size grid x block and local size block per axis, and
  // `dynamic_shared_bytes` for the trailing __local parameter of a kernel whose metadata has
  // the dynamic_shared_bytes tag. Asynchronous. Throws kiln::sdk::Error: KILN_ERROR_VALUE for
  // a kernel or stream that is not live (KILN_ERROR_UNAVAILABLE with the reason when there is
  // no device), a stream of another device, bad extents or arguments, or a launch the driver
  // refuses as such; KILN_ERROR_TYPE for an argument of the wrong kind (pack_kernel_args);
  // else as throw_cl.
  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream);

 private:
  // The kernel `handle` and the queue `stream` stands for in `*queue` (the default queue of
  // the kernel's device for NULL); KILN_ERROR_VALUE for a handle or stream that is not live,
  // or a stream of another device.
  Kernel& kernel(void* handle, void* stream, cl_command_queue* queue);
  // The cl_mem a tensor argument of `k` passes, making a sub-buffer for a byte_offset (owned
  // by `sub_buffers`, which the caller keeps until the launch is enqueued). Called with `k.mu`
  // held: a buffer `k` already holds as argument `index` is known live and is not looked up.
  cl_mem tensor_argument(Kernel& k, const DLTensor& t, size_t index, SubBuffers& sub_buffers);

  DeviceRegistry& devices_;
  Queues& queues_;
  Memory& memory_;
  Modules& modules_;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_LAUNCHER_H_
