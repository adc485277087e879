// SPDX-License-Identifier: Apache-2.0
#include "device_tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/error.h"

#include <algorithm>

namespace kiln::llm {
namespace {

// Device memory taken from a backend, given back when the last tensor over it goes.
class BackendAllocation : public Object {
 public:
  BackendAllocation(Ref<DeviceBackend> backend, int32_t device_id, void* ptr)
      : backend_(std::move(backend)), device_id_(device_id), ptr_(ptr) {}
  ~BackendAllocation() override { backend_->free(device_id_, ptr_); }

 private:
  Ref<DeviceBackend> backend_;
  int32_t device_id_;
  void* ptr_;
};

constexpr size_t kAlignment = 64;

}  // namespace

Tensor empty_beside(const Tensor& like, std::vector<int64_t> shape, DataType dtype) {
  const Ref<DeviceBackend>& backend = like.get()->backend;
  const Device device = like.device();
  if (!backend) {
    if (device.type == kDLCPU) return Tensor::empty_host(std::move(shape), dtype);
    throw ValueError(fmt::format(
        "cannot allocate beside a tensor on {} that has no device backend (it views memory Kiln "
        "did not allocate)",
        device.str()));
  }
  auto obj = make_object<TensorObj>();
  obj->shape = std::move(shape);
  int64_t numel = 1;
  for (int64_t d : obj->shape) {
    if (d < 0) throw ValueError(fmt::format("negative dimension in shape {}", obj->shape));
    numel *= d;
  }
  const size_t nbytes = static_cast<size_t>(numel) * dtype.bytes();
  void* ptr = backend->alloc(device.id, nbytes == 0 ? 1 : nbytes, kAlignment);
  obj->storage = make_object<BackendAllocation>(backend, device.id, ptr);
  obj->backend = backend;
  obj->dl.data = ptr;
  obj->dl.device = device.to_dlpack();
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.shape = obj->shape.data();
  obj->dl.dtype = dtype;
  return Tensor(std::move(obj));
}

Tensor leading_view(const Tensor& base, std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel > base.numel() || !base.is_contiguous()) {
    throw ValueError(fmt::format("a view of shape {} does not fit in a tensor of shape {}", shape,
                                 base.shape()));
  }
  auto obj = make_object<TensorObj>();
  obj->dl = *base.dl();
  obj->shape = std::move(shape);
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.shape = obj->shape.data();
  obj->dl.strides = nullptr;
  obj->storage = Ref<Object>(base.get());
  obj->backend = base.get()->backend;
  return Tensor(std::move(obj));
}

void reuse_leading_view(const Tensor& base, std::initializer_list<int64_t> shape, Tensor& view) {
  if (view.defined() && view.get()->storage.get() == base.get() &&
      std::equal(shape.begin(), shape.end(), view.shape().begin(), view.shape().end())) {
    return;
  }
  view = leading_view(base, std::vector<int64_t>(shape));
}

void synchronize_beside(const Tensor& like) {
  const Ref<DeviceBackend>& backend = like.get()->backend;
  if (backend && like.device().type != kDLCPU) backend->synchronize(like.device().id);
}

void upload_int32(const Tensor& base, std::span<const int32_t> values, Tensor& view) {
  reuse_leading_view(base, {static_cast<int64_t>(values.size())}, view);
  if (values.empty()) return;
  const Ref<DeviceBackend>& backend = view.get()->backend;
  if (!backend || view.device().type == kDLCPU) {
    view.copy_from(values.data(), values.size_bytes());
    return;
  }
  // Ordered on the device's stream and not synchronized here: the caller synchronizes once
  // after all its uploads (a pass uploads ten arrays; on PoCL each synchronize costs tens of
  // microseconds) and keeps `values` alive until then.
  const DLTensor* dl = view.dl();
  backend->copy_to_device(view.device().id, values.data(), dl->data, dl->byte_offset,
                          values.size_bytes());
}

}  // namespace kiln::llm
