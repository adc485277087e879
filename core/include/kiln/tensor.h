// SPDX-License-Identifier: Apache-2.0
// Tensor: a reference-counted n-dimensional array on a device, DLPack's DLTensor inside.
#ifndef KILN_TENSOR_H_
#define KILN_TENSOR_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/dtype.h"
#include "kiln/object.h"

namespace kiln {

class DeviceContext;

// The object behind a Tensor. `dl` points at the shape and strides stored here; the memory
// at dl.data belongs to `storage` (null for a non-owning view).
class TensorObj : public Object {
 public:
  DLTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact row-major
  Ref<Object> storage;
  // The backend whose memory dl.data points into; copies go through it. Null for host memory
  // and for views of memory Kiln did not allocate (which then cannot be copied off a device).
  Ref<DeviceBackend> backend;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorObj> obj) : obj_(std::move(obj)) {}

  // Allocates an uninitialised tensor on `device` through `context`'s backend for its type
  // (the core's own aligned host allocator serves "cpu" when no cpu plugin is loaded).
  // Throws ValueError for a negative dimension, NotFoundError when no backend serves the
  // device type, and the backend's error when allocation fails.
  static Tensor empty(std::vector<int64_t> shape, DataType dtype, Device device,
                      const DeviceContext& context);
  // An uninitialised tensor in host memory from the core's own aligned allocator (no runtime
  // needed). ValueError as empty().
  static Tensor empty_host(std::vector<int64_t> shape, DataType dtype);
  // API-edge default: empty(shape, dtype, device, Runtime::global()).
  static Tensor empty(std::vector<int64_t> shape, DataType dtype, Device device = Device::cpu());
  // A non-owning view of `dl` (which must outlive the Tensor and its copies). `backend`, when
  // given, serves copies of device memory.
  static Tensor view(const DLTensor* dl, Ref<DeviceBackend> backend = {});
  // Takes ownership of a DLPack managed tensor; its deleter runs when the last copy goes.
  // `backend`, when given, serves copies of device memory.
  static Tensor from_dlpack(DLManagedTensor* managed, Ref<DeviceBackend> backend = {});
  // Exports a new DLPack managed tensor sharing this memory; the caller calls its deleter.
  DLManagedTensor* to_dlpack() const;

  // Reads a .npy file into a new tensor on `device` of `context` (see npy.h for the accepted
  // files).
  static Tensor load_npy(const std::filesystem::path& path, Device device,
                         const DeviceContext& context);
  // A host tensor read from a .npy file.
  static Tensor load_npy(const std::filesystem::path& path);
  // Writes this tensor (downloaded when on a device) to `path` atomically.
  void save_npy(const std::filesystem::path& path) const;

  bool defined() const { return static_cast<bool>(obj_); }
  const DLTensor* dl() const { return &obj_->dl; }
  DLTensor* dl() { return &obj_->dl; }
  std::span<const int64_t> shape() const { return obj_->shape; }
  std::span<const int64_t> strides() const { return obj_->strides; }
  int32_t ndim() const { return obj_->dl.ndim; }
  DataType dtype() const { return obj_->dl.dtype; }
  Device device() const { return Device::from_dlpack(obj_->dl.device); }
  void* data() const { return static_cast<char*>(obj_->dl.data) + obj_->dl.byte_offset; }
  int64_t numel() const;
  size_t nbytes() const;
  bool is_contiguous() const;
  TensorObj* get() const { return obj_.get(); }

  // Copies `nbytes` (must equal nbytes()) from host memory into this tensor.
  void copy_from(const void* host_data, size_t nbytes);
  // Copies from `src` (same shape and dtype, any device).
  void copy_from(const Tensor& src);
  // Copies this tensor into host memory of `nbytes` (must equal nbytes()).
  void copy_to(void* host_data, size_t nbytes) const;
  // Copies into `dst` (same shape and dtype, any device).
  void copy_to(Tensor& dst) const;
  // A copy on `device`, allocated through `context`.
  Tensor to(Device device, const DeviceContext& context) const;
  // A copy on `device`: through this tensor's own backend when it is of the same type, else
  // (API-edge default) through Runtime::global().
  Tensor to(Device device) const;
  // A copy in host memory (needs no runtime).
  Tensor to_host() const;

  // Typed access to host tensors; throws TypeError on a dtype mismatch and ValueError when
  // the tensor is not on the CPU or not contiguous.
  template <typename T>
  std::span<T> host_span() const {
    check_host_access(sizeof(T));
    return {static_cast<T*>(data()), static_cast<size_t>(numel())};
  }

  // "Tensor(shape=[2, 3], dtype=float32, device=cpu:0)".
  std::string str() const;

 private:
  void check_host_access(size_t element_size) const;
  Ref<TensorObj> obj_;
};

}  // namespace kiln

#endif  // KILN_TENSOR_H_
