// SPDX-License-Identifier: Apache-2.0
// Kernel launches of the opencl backend.
#include "launcher.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <string>

#include "cl_error.h"
#include "handle_epoch.h"
#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_args.hpp"

namespace kiln::opencl {
namespace {

std::string extents_text(const uint32_t v[3]) {
  return std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]);
}

// The kernel and stream this thread last launched with, as validated while HandleEpoch was
// `epoch`, and the queue the stream stands for; `launcher` tells plugin instances apart.
struct LastLaunch {
  const void* launcher = nullptr;
  void* kernel = nullptr;
  void* stream = nullptr;
  uint64_t epoch = 0;
  cl_command_queue queue = nullptr;
};
thread_local LastLaunch last_launch;

// Whether two packed values are equal, as one 8-byte compare (std::array's == calls memcmp).
bool same_value(const sdk::PackedArgValue& a, const sdk::PackedArgValue& b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

}  // namespace

Launcher::Launcher(DeviceRegistry& devices, Queues& queues, Memory& memory, Modules& modules)
    : devices_(devices), queues_(queues), memory_(memory), modules_(modules) {}

Kernel& Launcher::kernel(void* handle, void* stream, cl_command_queue* queue) {
  // No kernel or stream has gone since this thread validated the same pair: both still live.
  const uint64_t epoch = HandleEpoch::current();
  LastLaunch& last = last_launch;
  if (last.kernel == handle && last.stream == stream && last.epoch == epoch &&
      last.launcher == this && handle != nullptr) {
    *queue = last.queue;
    return *static_cast<Kernel*>(handle);
  }
  // The kernel first: its error wins over the stream's.
  if (Kernel* k = modules_.find_kernel(handle)) {
    if (stream == nullptr) {
      // A default queue lives as long as the plugin instance: it can be remembered too.
      *queue = queues_.default_queue(*k->device);
      last = {this, handle, stream, epoch, *queue};
      return *k;
    }
    int32_t stream_device = 0;
    if (queues_.find_stream(stream, &stream_device)) {
      if (stream_device == k->device->id) {
        *queue = static_cast<cl_command_queue>(stream);
        last = {this, handle, stream, epoch, *queue};
        return *k;
      }
      throw sdk::Error(KILN_ERROR_VALUE, "launch: stream " + hex_pointer(stream) +
                                             " belongs to device " + std::to_string(stream_device) +
                                             ", but the kernel was loaded on device " +
                                             std::to_string(k->device->id));
    }
    throw sdk::Error(KILN_ERROR_VALUE, "launch: stream " + hex_pointer(stream) +
                                           " is not a live stream of the opencl backend");
  }
  devices_.require_devices();  // without devices there are no kernels: say why
  throw sdk::Error(KILN_ERROR_VALUE, "launch: " + hex_pointer(handle) +
                                         " is not a live kernel of the opencl backend (was its "
                                         "module unloaded?)");
}

cl_mem Launcher::tensor_argument(Kernel& k, const DLTensor& t, size_t index,
                                 SubBuffers& sub_buffers) {
  // Messages are built only on failure: this runs for every tensor of every launch.
  auto where = [&] { return "kernel '" + k.info->name + "' argument " + std::to_string(index); };
  const int32_t type = sdk::device_type_code(t.device);
  if (type != kDLOpenCL) {
    throw sdk::Error(KILN_ERROR_VALUE, where() + " is a tensor on device type " +
                                           std::to_string(type) +
                                           ", not on an opencl device (copy it to opencl:" +
                                           std::to_string(k.device->id) + " first)");
  }
  if (t.device.device_id != k.device->id) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + " is a tensor on opencl:" + std::to_string(t.device.device_id) +
                         ", but the kernel was loaded on opencl:" + std::to_string(k.device->id));
  }
  Buffer b{k.device->id, 0};
  uint64_t bits = 0;
  std::memcpy(&bits, &t.data, sizeof(t.data));
  if (k.set_valid[index] != 0 && std::bit_cast<uint64_t>(k.set_values[index]) == bits) {
    b.size = k.buffer_bytes[index];  // the buffer the cl_kernel holds, live (see Kernel)
  } else {
    const std::optional<Buffer> found = memory_.find(static_cast<cl_mem>(t.data), k.device->id);
    if (!found) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       where() + ": tensor data " + hex_pointer(t.data) +
                           " is not a live buffer of opencl:" + std::to_string(k.device->id) +
                           " (freed, or not allocated by this backend)");
    }
    b = *found;
    k.buffer_bytes[index] = b.size;
  }
  const std::optional<uint64_t> extent = tensor_extent_bytes(t);
  if (!extent || t.byte_offset > b.size || *extent > b.size - t.byte_offset) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + ": the tensor (byte_offset " + std::to_string(t.byte_offset) + ", " +
                         (extent ? std::to_string(*extent) : std::string("overflowing")) +
                         " bytes) does not fit in its buffer of " + std::to_string(b.size) +
                         " bytes");
  }
  auto mem = static_cast<cl_mem>(t.data);
  if (t.byte_offset == 0) return mem;
  // A kernel receives whole buffers: an offset becomes a sub-buffer, which OpenCL allows only
  // at multiples of the device's base address alignment.
  const size_t align = std::max<cl_uint>(k.device->base_address_align_bytes, 1);
  if (t.byte_offset % align != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + ": byte_offset " + std::to_string(t.byte_offset) +
                         " is not a multiple of " + std::to_string(align) +
                         " bytes, the sub-buffer alignment of " + k.device->label() +
                         " (CL_DEVICE_MEM_BASE_ADDR_ALIGN); OpenCL kernels take whole buffers, so "
                         "pass a tensor at an aligned offset or a copy of it");
  }
  const size_t origin = static_cast<size_t>(t.byte_offset);
  size_t size = static_cast<size_t>(std::max<uint64_t>(*extent, 1));
  if (size > b.size - origin) size = b.size - origin;
  if (size == 0) {
    throw sdk::Error(KILN_ERROR_VALUE, where() + ": byte_offset " + std::to_string(t.byte_offset) +
                                           " is at the end of its buffer");
  }
  return sub_buffers.add(make_sub_buffer(
      mem, origin, size,
      where() + ": cannot make a sub-buffer at byte_offset " + std::to_string(t.byte_offset)));
}

void Launcher::launch(void* handle, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
                      const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream) {
  cl_command_queue q = nullptr;
  Kernel& k = kernel(handle, stream, &q);
  const DeviceRecord& d = *k.device;
  const std::string& name = k.info->name;
  if (grid == nullptr || block == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': grid or block is NULL");
  }
  if (num_args < 0 || (num_args > 0 && args == nullptr)) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': malformed argument list");
  }
  // Global size = grid * block per axis, local size = block; axes past the last one used are
  // left out of work_dim.
  size_t global[3];
  size_t local[3];
  size_t group = 1;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) {
      throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': grid " +
                                             extents_text(grid) + " and block " +
                                             extents_text(block) + " must be >= 1 on every axis");
    }
    if (block[i] > d.max_work_item_sizes[static_cast<size_t>(i)]) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "launch of kernel '" + name + "': block " + extents_text(block) +
                           " exceeds the maximum work-item sizes " +
                           std::to_string(d.max_work_item_sizes[0]) + "x" +
                           std::to_string(d.max_work_item_sizes[1]) + "x" +
                           std::to_string(d.max_work_item_sizes[2]) + " of " + d.label());
    }
    global[i] = size_t{grid[i]} * block[i];
    local[i] = block[i];
    group *= block[i];
  }
  if (group > k.work_group_size) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': block " +
                                           extents_text(block) + " has " + std::to_string(group) +
                                           " work-items, more than the " +
                                           std::to_string(k.work_group_size) +
                                           " this kernel allows per work-group on " + d.label() +
                                           " (CL_KERNEL_WORK_GROUP_SIZE)");
  }
  const cl_uint dims = grid[2] > 1 || block[2] > 1 ? 3 : grid[1] > 1 || block[1] > 1 ? 2 : 1;
  if (k.dynamic_local && dynamic_shared_bytes == 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "launch of kernel '" + name +
                         "': its trailing __local parameter needs dynamic_shared_bytes > 0");
  }
  if (!k.dynamic_local && dynamic_shared_bytes != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "launch of kernel '" + name + "': dynamic_shared_bytes " +
                         std::to_string(dynamic_shared_bytes) +
                         " given, but the kernel's metadata has no dynamic_shared_bytes launch "
                         "tag (and no trailing __local parameter to receive it)");
  }
  // Argument values live in the cl_kernel, and what it holds says which buffers are known live.
  std::lock_guard<std::mutex> lock(k.mu);
  const size_t count = k.info->args.size();
  if (k.set_values.size() != count) {
    k.set_values.assign(count, {});
    k.set_valid.assign(count, 0);
    k.buffer_bytes.assign(count, 0);
  }
  const uint64_t epoch = memory_.epoch();
  if (epoch != k.set_epoch) {
    for (size_t i = 0; i < count; ++i) {
      if (k.info->args[i] == sdk::ArgKind::kTensor) k.set_valid[i] = 0;
    }
    k.set_epoch = epoch;
  }
  SubBuffers subs;  // released once the launch is enqueued (or has failed)
  struct Context {
    Launcher* self;
    Kernel* kernel;
    SubBuffers* subs;
  } ctx{this, &k, &subs};
  sdk::PackedArgs packed;  // on the stack: the launch path allocates nothing
  sdk::pack_kernel_args(
      *k.info, args, num_args,
      [c = &ctx](const DLTensor& t, size_t index) -> uint64_t {
        static_assert(sizeof(cl_mem) <= sizeof(uint64_t));
        cl_mem mem = c->self->tensor_argument(*c->kernel, t, index, *c->subs);
        uint64_t bits = 0;
        std::memcpy(&bits, &mem, sizeof(mem));
        return bits;
      },
      packed);
  for (size_t i = 0; i < count; ++i) {
    if (k.set_valid[i] != 0 && same_value(k.set_values[i], packed.values[i]))
      continue;  // already set
    k.set_valid[i] = 0;
    const cl_int err = clSetKernelArg(k.kernel.get(), static_cast<cl_uint>(i), packed.sizes[i],
                                      packed.pointers[i]);
    if (err != CL_SUCCESS) {
      throw_cl("launch of kernel '" + name + "': setting argument " + std::to_string(i) + " (" +
                   sdk::to_string(k.info->args[i]) +
                   "; does the metadata match the kernel's parameter types?)",
               "clSetKernelArg", err, KILN_ERROR_VALUE);
    }
    const bool sub_buffer =
        k.info->args[i] == sdk::ArgKind::kTensor && args[i].value.v_tensor->byte_offset != 0;
    k.set_values[i] = packed.values[i];
    k.set_valid[i] = sub_buffer ? 0 : 1;  // a sub-buffer lives for this launch only
  }
  if (k.dynamic_local && k.set_local_bytes != dynamic_shared_bytes) {
    k.set_local_bytes = 0;
    const cl_int err =
        clSetKernelArg(k.kernel.get(), static_cast<cl_uint>(count), dynamic_shared_bytes, nullptr);
    if (err != CL_SUCCESS) {
      throw_cl("launch of kernel '" + name + "': setting the __local parameter to " +
                   std::to_string(dynamic_shared_bytes) + " bytes",
               "clSetKernelArg", err, KILN_ERROR_VALUE);
    }
    k.set_local_bytes = dynamic_shared_bytes;
  }
  const cl_int err =
      clEnqueueNDRangeKernel(q, k.kernel.get(), dims, nullptr, global, local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const bool bad_launch = err == CL_INVALID_WORK_GROUP_SIZE || err == CL_INVALID_WORK_ITEM_SIZE ||
                            err == CL_INVALID_GLOBAL_WORK_SIZE || err == CL_INVALID_KERNEL_ARGS ||
                            err == CL_INVALID_WORK_DIMENSION;
    throw_cl("launch of kernel '" + name + "' with grid " + extents_text(grid) + " and block " +
                 extents_text(block) + " on " + d.label(),
             "clEnqueueNDRangeKernel", err, bad_launch ? KILN_ERROR_VALUE : 0);
  }
}

}  // namespace kiln::opencl
