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
#include "kiln/dtype.h"
#include "kiln/object.h"

namespace kiln {

class Runtime;

// The object behind a Tensor. `dl` points at the shape and strides stored here; the memory
// at dl.data belongs to `storage` (null for a non-owning view).
class TensorObj : public Object {
 public:
  DLTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact row-major
  Ref<Object> storage;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorObj> obj) : obj_(std::move(obj)) {}

  // Allocates an uninitialised tensor on `device` through `runtime`'s backend for its type
  // (the core's own aligned host allocator serves "cpu" when no cpu plugin is loaded).
  // Throws ValueError for a negative dimension, NotFoundError when no backend serves the
  // device type, and the backend's error when allocation fails.
  static Tensor empty(std::vector<int64_t> shape, DataType dtype, Device device = Device::cpu());
  static Tensor empty(std::vector<int64_t> shape, DataType dtype, Device device, Runtime& runtime);
  // A non-owning view of `dl` (which must outlive the Tensor and its copies).
  static Tensor view(const DLTensor* dl);
  // Takes ownership of a DLPack managed tensor; its deleter runs when the last copy goes.
  static Tensor from_dlpack(DLManagedTensor* managed);
  // Exports a new DLPack managed tensor sharing this memory; the caller calls its deleter.
  DLManagedTensor* to_dlpack() const;

  // Reads a .npy file into a new tensor on `device` (see npy.h for the accepted files).
  static Tensor load_npy(const std::filesystem::path& path, Device device = Device::cpu());
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
  // A copy on `device` (or this tensor's host copy).
  Tensor to(Device device) const;
  Tensor to_host() const { return to(Device::cpu()); }

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
