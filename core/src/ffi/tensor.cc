// SPDX-License-Identifier: Apache-2.0
#include "kiln/tensor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "kiln/device_backend.h"
#include "kiln/device_context.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr size_t kTensorAlignment = 64;

// Memory from a device backend, freed through it.
class DeviceAllocation : public Object {
 public:
  DeviceAllocation(Ref<DeviceBackend> backend, int32_t id, void* ptr)
      : backend(std::move(backend)), id(id), ptr(ptr) {}
  ~DeviceAllocation() override { backend->free(id, ptr); }
  Ref<DeviceBackend> backend;
  int32_t id;
  void* ptr;
};

// Host memory from the core's own allocator, used for "cpu" when no cpu plugin is loaded.
class HostAllocation : public Object {
 public:
  explicit HostAllocation(size_t nbytes) {
    const size_t rounded = (nbytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    ptr = std::aligned_alloc(kTensorAlignment, rounded == 0 ? kTensorAlignment : rounded);
    if (ptr == nullptr) throw OutOfMemoryError(fmt::format("cannot allocate {} bytes", nbytes));
  }
  ~HostAllocation() override { std::free(ptr); }
  void* ptr;
};

// A DLPack producer's memory, released through its deleter.
class ManagedHolder : public Object {
 public:
  explicit ManagedHolder(DLManagedTensor* m) : managed(m) {}
  ~ManagedHolder() override {
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
  DLManagedTensor* managed;
};

Ref<TensorObj> make_tensor_obj(std::vector<int64_t> shape, DataType dtype, Device device) {
  auto obj = make_object<TensorObj>();
  obj->shape = std::move(shape);
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.shape = obj->shape.data();
  obj->dl.strides = nullptr;
  obj->dl.dtype = dtype;
  obj->dl.device = device.to_dlpack();
  obj->dl.byte_offset = 0;
  return obj;
}

// The backend behind a tensor's device memory. A view of device memory Kiln did not allocate
// has none: say so rather than guess which runtime's backend owns it.
const Ref<DeviceBackend>& backend_of(const Tensor& t) {
  if (!t.get()->backend) {
    throw ValueError(fmt::format(
        "tensor on {} has no device backend to copy through: it views memory Kiln did not "
        "allocate (pass the backend to Tensor::view / Tensor::from_dlpack)",
        t.device().str()));
  }
  return t.get()->backend;
}

// `obj` in fresh host memory of `nbytes` from the core's own allocator.
Ref<TensorObj> host_tensor_obj(Ref<TensorObj> obj, size_t nbytes) {
  auto alloc = make_object<HostAllocation>(nbytes);
  obj->dl.data = alloc->ptr;
  obj->storage = alloc;
  return obj;
}

std::string shape_str(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The bytes a tensor of `shape` and `dtype` takes; ValueError for a negative dimension, an
// overflow or a dtype without size.
size_t checked_nbytes(std::span<const int64_t> shape, DataType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ValueError(fmt::format("negative dimension in shape {}", shape_str(shape)));
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
      throw ValueError(fmt::format("shape {} has too many elements", shape_str(shape)));
    }
    numel *= d;
  }
  if (dtype.lanes == 0 || dtype.bits == 0) {
    throw ValueError(fmt::format("cannot allocate elements of dtype {}", dtype.str()));
  }
  return static_cast<size_t>(numel) * dtype.bytes();
}
}  // namespace

Tensor Tensor::empty_host(std::vector<int64_t> shape, DataType dtype) {
  const size_t nbytes = checked_nbytes(shape, dtype);
  return Tensor(host_tensor_obj(make_tensor_obj(std::move(shape), dtype, Device::cpu()), nbytes));
}

Tensor Tensor::empty(std::vector<int64_t> shape, DataType dtype, Device device,
                     const DeviceContext& context) {
  const size_t nbytes = checked_nbytes(shape, dtype);
  auto obj = make_tensor_obj(std::move(shape), dtype, device);
  Ref<DeviceBackend> backend = context.find_backend(device.type);
  if (!backend && device.type == kDLCPU) return Tensor(host_tensor_obj(std::move(obj), nbytes));
  if (!backend) backend = context.backend(device.type);  // throws NotFoundError
  void* ptr = backend->alloc(device.id, nbytes == 0 ? 1 : nbytes, kTensorAlignment);
  obj->dl.data = ptr;
  obj->storage = make_object<DeviceAllocation>(backend, device.id, ptr);
  obj->backend = std::move(backend);
  return Tensor(std::move(obj));
}

Tensor Tensor::view(const DLTensor* dl, Ref<DeviceBackend> backend) {
  auto obj = make_object<TensorObj>();
  obj->backend = std::move(backend);
  obj->dl = *dl;
  obj->shape.assign(dl->shape, dl->shape + dl->ndim);
  obj->dl.shape = obj->shape.data();
  if (dl->strides != nullptr) {
    obj->strides.assign(dl->strides, dl->strides + dl->ndim);
    obj->dl.strides = obj->strides.data();
  }
  return Tensor(std::move(obj));
}

Tensor Tensor::from_dlpack(DLManagedTensor* managed, Ref<DeviceBackend> backend) {
  if (managed == nullptr) throw ValueError("from_dlpack: null DLManagedTensor");
  Tensor t = view(&managed->dl_tensor, std::move(backend));
  t.obj_->storage = make_object<ManagedHolder>(managed);
  return t;
}

DLManagedTensor* Tensor::to_dlpack() const {
  auto* managed = new DLManagedTensor{};
  managed->dl_tensor = obj_->dl;
  obj_->retain();
  managed->manager_ctx = obj_.get();
  managed->deleter = [](DLManagedTensor* self) {
    static_cast<TensorObj*>(self->manager_ctx)->release();
    delete self;
  };
  return managed;
}

int64_t Tensor::numel() const {
  return std::accumulate(obj_->shape.begin(), obj_->shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype().bytes(); }

bool Tensor::is_contiguous() const {
  if (obj_->strides.empty()) return true;
  int64_t expected = 1;
  for (int32_t i = ndim() - 1; i >= 0; --i) {
    if (obj_->shape[i] != 1 && obj_->strides[i] != expected) return false;
    expected *= obj_->shape[i];
  }
  return true;
}

void Tensor::copy_from(const void* host_data, size_t nbytes) {
  if (nbytes != this->nbytes()) {
    throw ValueError(fmt::format("copy_from: {} bytes given for a tensor of {} bytes ({} {})",
                                 nbytes, this->nbytes(), shape_str(shape()), dtype().str()));
  }
  if (!is_contiguous()) throw ValueError("copy_from: the tensor is not contiguous");
  if (nbytes == 0) return;
  if (device().type == kDLCPU) {
    std::memcpy(data(), host_data, nbytes);
    return;
  }
  Ref<DeviceBackend> backend = backend_of(*this);
  backend->copy_to_device(device().id, host_data, obj_->dl.data, obj_->dl.byte_offset, nbytes);
  backend->synchronize(device().id);
}

void Tensor::copy_to(void* host_data, size_t nbytes) const {
  if (nbytes != this->nbytes()) {
    throw ValueError(fmt::format("copy_to: {} bytes given for a tensor of {} bytes ({} {})", nbytes,
                                 this->nbytes(), shape_str(shape()), dtype().str()));
  }
  if (!is_contiguous()) throw ValueError("copy_to: the tensor is not contiguous");
  if (nbytes == 0) return;
  if (device().type == kDLCPU) {
    std::memcpy(host_data, data(), nbytes);
    return;
  }
  Ref<DeviceBackend> backend = backend_of(*this);
  backend->copy_to_host(device().id, obj_->dl.data, obj_->dl.byte_offset, host_data, nbytes);
  backend->synchronize(device().id);
}

void Tensor::copy_from(const Tensor& src) {
  if (!std::equal(shape().begin(), shape().end(), src.shape().begin(), src.shape().end()) ||
      dtype() != src.dtype()) {
    throw ValueError(fmt::format("copy between tensors of shape {} {} and {} {}",
                                 shape_str(src.shape()), src.dtype().str(), shape_str(shape()),
                                 dtype().str()));
  }
  if (!is_contiguous() || !src.is_contiguous()) {
    throw ValueError("copy between tensors: both must be contiguous");
  }
  if (src.device().type == kDLCPU) return copy_from(src.data(), src.nbytes());
  if (device().type == kDLCPU) return src.copy_to(data(), nbytes());
  if (src.device() == device() || src.device().type == device().type) {
    Ref<DeviceBackend> backend = backend_of(*this);
    if (src.device() == device()) {
      backend->copy_on_device(device().id, src.obj_->dl.data, src.obj_->dl.byte_offset,
                              obj_->dl.data, obj_->dl.byte_offset, nbytes());
      backend->synchronize(device().id);
      return;
    }
  }
  // Different devices: stage through the host.
  Tensor staging = src.to_host();
  copy_from(staging.data(), staging.nbytes());
}

void Tensor::copy_to(Tensor& dst) const { dst.copy_from(*this); }

Tensor Tensor::to(Device device, const DeviceContext& context) const {
  Tensor out =
      empty(std::vector<int64_t>(shape().begin(), shape().end()), dtype(), device, context);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to_host() const {
  Tensor out = empty_host(std::vector<int64_t>(shape().begin(), shape().end()), dtype());
  out.copy_from(*this);
  return out;
}

void Tensor::check_host_access(size_t element_size) const {
  if (device().type != kDLCPU) {
    throw ValueError(
        fmt::format("host access to a tensor on {}; call to_host() first", device().str()));
  }
  if (!is_contiguous()) throw ValueError("host access to a non-contiguous tensor");
  if (dtype().bytes() != element_size) {
    throw TypeError(fmt::format("host access with {}-byte elements to a {} tensor", element_size,
                                dtype().str()));
  }
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor(shape={}, dtype={}, device={})", shape_str(shape()), dtype().str(),
                     device().str());
}

}  // namespace kiln
