#include "vm/allocator.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::vm {
namespace {

// A block taken from an allocator; gives it back when the last tensor viewing it dies.
class Block : public StorageObj {
 public:
  Block(Ref<Allocator> owner, void* ptr, size_t size)
      : owner_(std::move(owner)), ptr_(ptr), size_(size) {}
  ~Block() override { owner_->give_back(ptr_, size_); }
  Device device() const override { return owner_->device(); }
  void* data() const override { return ptr_; }
  size_t size() const override { return size_; }
  Ref<DeviceBackend> backend() const override { return owner_->backend(); }

 private:
  Ref<Allocator> owner_;
  void* ptr_;
  size_t size_;
};

// Every allocation from the device, every free to it.
class NaiveAllocator : public Allocator {
 public:
  using Allocator::Allocator;
  Ref<StorageObj> alloc(size_t nbytes, size_t alignment) override {
    const size_t size = std::max<size_t>(nbytes, 1);
    void* ptr = backend_->alloc(device_.id, size, alignment);
    std::lock_guard<std::mutex> lock(mu_);
    used_ += size;
    return make_object<Block>(Ref<Allocator>(this), ptr, size);
  }
  void give_back(void* ptr, size_t nbytes) override {
    backend_->free(device_.id, ptr);
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= nbytes;
  }
  size_t device_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }

 private:
  mutable std::mutex mu_;
  size_t used_ = 0;
};

// Page-rounded blocks kept per size and reused last-in first-out; memory goes back to the
// device only on clear() or when an allocation fails (then once more after releasing all).
class PooledAllocator : public Allocator {
 public:
  static constexpr size_t kPageSize = 4096;
  static constexpr size_t kAlignment = 4096;  // every block fits any alignment up to a page
  using Allocator::Allocator;
  ~PooledAllocator() override { clear(); }

  Ref<StorageObj> alloc(size_t nbytes, size_t alignment) override {
    if (alignment > kAlignment) {
      throw ValueError(
          fmt::format("pooled allocator: alignment {} above {}", alignment, kAlignment));
    }
    const size_t size = (std::max<size_t>(nbytes, 1) + kPageSize - 1) / kPageSize * kPageSize;
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
      }
    }
    if (ptr == nullptr) {
      try {
        ptr = backend_->alloc(device_.id, size, kAlignment);
      } catch (const Error& e) {
        kiln::log(LogLevel::kWarn, "vm",
                  fmt::format("pooled allocator on {}: allocation of {} bytes failed: {}; "
                              "releasing all cached blocks and trying again",
                              device_.str(), size, e.what()));
        clear();
        ptr = backend_->alloc(device_.id, size, kAlignment);
      }
      std::lock_guard<std::mutex> lock(mu_);
      used_ += size;
    }
    return make_object<Block>(Ref<Allocator>(this), ptr, size);
  }
  void give_back(void* ptr, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_[nbytes].push_back(ptr);
  }
  void clear() override {
    std::map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      for (const auto& [size, list] : blocks) used_ -= size * list.size();
    }
    for (const auto& [size, list] : blocks) {
      for (void* p : list) backend_->free(device_.id, p);
    }
  }
  size_t device_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t used_ = 0;
};

}  // namespace

Ref<Allocator> make_allocator(MemoryConfig::Kind kind, Ref<DeviceBackend> backend, Device device) {
  if (kind == MemoryConfig::Kind::kNaive) {
    return make_object<NaiveAllocator>(std::move(backend), device);
  }
  return make_object<PooledAllocator>(std::move(backend), device);
}

size_t alignment_of(DataType dtype) {
  return std::max<size_t>(64, static_cast<size_t>(dtype.lanes) * dtype.bits / 8);
}

Tensor tensor_in_storage(const Ref<StorageObj>& storage, int64_t offset, std::vector<int64_t> shape,
                         DataType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ValueError(fmt::format("alloc_tensor: negative dimension {}", d));
    numel *= d;
  }
  const auto nbytes = static_cast<int64_t>(numel * dtype.bytes());
  if (offset < 0 || offset + nbytes > static_cast<int64_t>(storage->size())) {
    throw ValueError(fmt::format(
        "storage allocation failure, attempted to allocate {} at offset {} in region that is {} "
        "bytes",
        nbytes, offset, storage->size()));
  }
  auto obj = make_object<TensorObj>();
  obj->shape = std::move(shape);
  obj->storage = storage;
  obj->backend = storage->backend();
  obj->dl.data = storage->data();
  obj->dl.byte_offset = static_cast<uint64_t>(offset);
  obj->dl.device = storage->device().to_dlpack();
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.dtype = dtype;
  obj->dl.shape = obj->shape.data();
  obj->dl.strides = nullptr;
  return Tensor(std::move(obj));
}

Tensor empty_tensor(Allocator& allocator, const std::vector<int64_t>& shape, DataType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  auto storage = allocator.alloc(static_cast<size_t>(numel) * dtype.bytes(), alignment_of(dtype));
  return tensor_in_storage(storage, 0, shape, dtype);
}

}  // namespace kiln::vm
