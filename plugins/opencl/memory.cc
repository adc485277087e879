// SPDX-License-Identifier: Apache-2.0
// Buffers, copies and sub-buffers of the opencl backend.
#include "memory.h"

#include <algorithm>
#include <string>

#include "cl_error.h"
#include "kiln/sdk/error.hpp"

namespace kiln::opencl {

std::optional<uint64_t> tensor_extent_bytes(const DLTensor& t) {
  const uint64_t elem_bits = uint64_t{t.dtype.bits} * std::max<uint16_t>(t.dtype.lanes, 1);
  const uint64_t elem_bytes = (elem_bits + 7) / 8;
  uint64_t last = 0;  // index of the last element, in elements
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return std::nullopt;
    if (t.shape[i] == 0) return 0;
    const int64_t stride = t.strides != nullptr ? t.strides[i] : 1;
    if (stride < 0) return std::nullopt;
    uint64_t step = 0;
    if (t.strides != nullptr) {
      step = static_cast<uint64_t>(stride);
    } else {
      step = 1;
      for (int j = i + 1; j < t.ndim; ++j) {
        if (__builtin_mul_overflow(step, static_cast<uint64_t>(t.shape[j]), &step)) {
          return std::nullopt;
        }
      }
    }
    uint64_t add = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1), step, &add) ||
        __builtin_add_overflow(last, add, &last)) {
      return std::nullopt;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_add_overflow(last, uint64_t{1}, &bytes) ||
      __builtin_mul_overflow(bytes, elem_bytes, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

MemHandle make_sub_buffer(cl_mem mem, size_t origin, size_t size, const std::string& what) {
  cl_buffer_region region{origin, size};
  cl_int err = CL_SUCCESS;
  MemHandle sub(
      clCreateSubBuffer(mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err));
  if (err != CL_SUCCESS || !sub) {
    throw_cl(what, "clCreateSubBuffer", err,
             err == CL_MISALIGNED_SUB_BUFFER_OFFSET ? KILN_ERROR_VALUE : 0);
  }
  return sub;
}

Memory::Memory(DeviceRegistry& devices, Queues& queues) : devices_(devices), queues_(queues) {}

Memory::~Memory() = default;  // the registry owns the buffers left

void* Memory::alloc(int32_t id, size_t nbytes, size_t alignment) {
  DeviceRecord& d = devices_.device(id);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "alloc: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  // A cl_mem has no host-visible address: its start is aligned to the device's
  // CL_DEVICE_MEM_BASE_ADDR_ALIGN whatever is asked, which is what kernels see.
  const size_t size = nbytes == 0 ? 1 : nbytes;
  if (d.max_alloc_bytes > 0 && size > d.max_alloc_bytes) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes on " + d.label() +
                         ": the device allows at most " + std::to_string(d.max_alloc_bytes) +
                         " bytes per buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
  }
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(d.context(), CL_MEM_READ_WRITE, size, nullptr, &err);
  if (err != CL_SUCCESS || mem == nullptr) {
    throw_cl(
        "cannot allocate " + std::to_string(nbytes) + " bytes on " + d.label(), "clCreateBuffer",
        err,
        err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE ? KILN_ERROR_OUT_OF_MEMORY : 0);
  }
  MemHandle owned(mem);
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.emplace(mem, OwnedBuffer{Buffer{id, size}, std::move(owned)});
  return mem;
}

void Memory::free(int32_t id, void* ptr) {
  devices_.device(id);
  if (ptr == nullptr) return;
  auto mem = static_cast<cl_mem>(ptr);
  MemHandle owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buffers_.find(mem);
    if (it == buffers_.end()) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "free: " + hex_pointer(ptr) + " is not a live buffer of the opencl backend");
    }
    if (it->second.info.device != id) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "free: buffer " + hex_pointer(ptr) + " belongs to device " +
                           std::to_string(it->second.info.device) + ", not " + std::to_string(id));
    }
    owned = std::move(it->second.mem);
    buffers_.erase(it);
  }
  epoch_.fetch_add(1, std::memory_order_release);  // kernels forget buffer arguments
  // Commands still using the buffer keep it alive until they finish.
  const cl_int err = owned.reset();
  if (err != CL_SUCCESS)
    throw_cl("free: releasing buffer " + hex_pointer(ptr), "clReleaseMemObject", err);
}

std::optional<Buffer> Memory::find(cl_mem mem, int32_t device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(mem);
  if (it == buffers_.end() || it->second.info.device != device) return std::nullopt;
  return it->second.info;
}

Buffer Memory::buffer(int32_t id, const void* ptr, const char* what) {
  if (ptr == nullptr) throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(static_cast<cl_mem>(const_cast<void*>(ptr)));
  if (it == buffers_.end()) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " " + hex_pointer(ptr) +
                                           " is not a live buffer of the opencl backend "
                                           "(freed, or not allocated by it)");
  }
  if (it->second.info.device != id) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " " + hex_pointer(ptr) +
                                           " belongs to device " +
                                           std::to_string(it->second.info.device) +
                                           ", not device " + std::to_string(id));
  }
  return it->second.info;
}

void Memory::check_range(const Buffer& b, size_t offset, size_t nbytes, const char* what) {
  if (offset > b.size || nbytes > b.size - offset) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + ": bytes [" + std::to_string(offset) +
                                           ", " + std::to_string(offset) + " + " +
                                           std::to_string(nbytes) + ") lie outside the buffer of " +
                                           std::to_string(b.size) + " bytes");
  }
}

void Memory::copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset,
                            size_t nbytes, void* stream) {
  DeviceRecord& d = devices_.device(id);
  const Buffer b = buffer(id, dst, "copy_to_device: destination");
  check_range(b, dst_offset, nbytes, "copy_to_device");
  if (nbytes == 0) return;
  if (host_src == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "copy_to_device: source is NULL");
  cl_command_queue q = queues_.queue_for(id, stream);
  // Blocking: the host source is only borrowed for the call.
  const cl_int err = clEnqueueWriteBuffer(q, static_cast<cl_mem>(dst), CL_TRUE, dst_offset, nbytes,
                                          host_src, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    throw_cl("copy_to_device of " + std::to_string(nbytes) + " bytes on " + d.label(),
             "clEnqueueWriteBuffer", err);
  }
}

void Memory::copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst,
                          size_t nbytes, void* stream) {
  DeviceRecord& d = devices_.device(id);
  const Buffer b = buffer(id, src, "copy_to_host: source");
  check_range(b, src_offset, nbytes, "copy_to_host");
  if (nbytes == 0) return;
  if (host_dst == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "copy_to_host: destination is NULL");
  cl_command_queue q = queues_.queue_for(id, stream);
  // Blocking, so the data is there when the call returns (the ABI only promises it after a
  // synchronize; this is stricter).
  const cl_int err = clEnqueueReadBuffer(q, static_cast<cl_mem>(const_cast<void*>(src)), CL_TRUE,
                                         src_offset, nbytes, host_dst, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    throw_cl("copy_to_host of " + std::to_string(nbytes) + " bytes on " + d.label(),
             "clEnqueueReadBuffer", err);
  }
}

void Memory::copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst,
                            size_t dst_offset, size_t nbytes, void* stream) {
  DeviceRecord& d = devices_.device(id);
  const Buffer sb = buffer(id, src, "copy_on_device: source");
  const Buffer db = buffer(id, dst, "copy_on_device: destination");
  check_range(sb, src_offset, nbytes, "copy_on_device (source)");
  check_range(db, dst_offset, nbytes, "copy_on_device (destination)");
  if (nbytes == 0) return;
  cl_command_queue q = queues_.queue_for(id, stream);
  auto s = static_cast<cl_mem>(const_cast<void*>(src));
  auto t = static_cast<cl_mem>(dst);
  const std::string what = "copy_on_device of " + std::to_string(nbytes) + " bytes on " + d.label();
  const bool overlap =
      s == t && src_offset < dst_offset + nbytes && dst_offset < src_offset + nbytes;
  if (!overlap) {
    const cl_int err =
        clEnqueueCopyBuffer(q, s, t, src_offset, dst_offset, nbytes, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) throw_cl(what, "clEnqueueCopyBuffer", err);
    return;
  }
  // clEnqueueCopyBuffer refuses overlapping ranges (CL_MEM_COPY_OVERLAP); go through a
  // temporary buffer, as memmove would.
  // The temporary is released on return; OpenCL frees it once both copies are done.
  cl_int err = CL_SUCCESS;
  const MemHandle temp(clCreateBuffer(d.context(), CL_MEM_READ_WRITE, nbytes, nullptr, &err));
  if (err != CL_SUCCESS || !temp) throw_cl(what + " (overlapping)", "clCreateBuffer", err);
  err = clEnqueueCopyBuffer(q, s, temp.get(), src_offset, 0, nbytes, 0, nullptr, nullptr);
  if (err == CL_SUCCESS)
    err = clEnqueueCopyBuffer(q, temp.get(), t, 0, dst_offset, nbytes, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) throw_cl(what + " (overlapping)", "clEnqueueCopyBuffer", err);
}

}  // namespace kiln::opencl
