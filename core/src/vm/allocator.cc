// SPDX-License-Identifier: Apache-2.0
#include "vm/allocator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

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
  const Allocator& owner() const { return *owner_; }

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
    charge(size);
    void* ptr = nullptr;
    try {
      ptr = backend_->alloc(device_.id, size, alignment);
    } catch (...) {
      refund(size);
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    used_ += size;
    return make_object<Block>(Ref<Allocator>(this), ptr, size);
  }
  void give_back(void* ptr, size_t nbytes) override {
    backend_->free(device_.id, ptr);
    refund(nbytes);
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
// Blocks are asked of the device at the alignment the storage needs (64 for every dtype Kiln
// has), not at a page: page-aligned blocks put every tensor of a kernel at the same offset in
// its page, and their loads and stores alias in the L1 cache (an LLM decode step's matmuls ran
// up to 14% slower on such buffers than on TVM's, whose pool asks for 64).
class PooledAllocator : public Allocator {
 public:
  static constexpr size_t kPageSize = 4096;
  static constexpr size_t kMinAlignment = 64;
  static constexpr size_t kMaxAlignment = 4096;
  using Allocator::Allocator;
  ~PooledAllocator() override { clear(); }

  Ref<StorageObj> alloc(size_t nbytes, size_t alignment) override {
    if (alignment > kMaxAlignment) {
      throw ValueError(
          fmt::format("pooled allocator: alignment {} above {}", alignment, kMaxAlignment));
    }
    alignment = std::max(alignment, kMinAlignment);
    const size_t size = (std::max<size_t>(nbytes, 1) + kPageSize - 1) / kPageSize * kPageSize;
    void* ptr = nullptr;
    {
      // The most recently returned block of this size that meets the alignment.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        auto& list = it->second;
        for (auto b = list.rbegin(); b != list.rend(); ++b) {
          if (reinterpret_cast<uintptr_t>(*b) % alignment == 0) {
            ptr = *b;
            list.erase(std::next(b).base());
            break;
          }
        }
      }
    }
    if (ptr == nullptr) {
      if (budget_ && !budget_->try_charge(size)) {
        clear();       // cached blocks count against the budget too: they go first
        charge(size);  // still short: OutOfMemoryError
      }
      try {
        ptr = take_from_device(size, alignment);
      } catch (...) {
        refund(size);
        throw;
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
  // A fresh block from the device; when the device has no room, once more after releasing
  // every cached block.
  void* take_from_device(size_t size, size_t alignment) {
    try {
      return backend_->alloc(device_.id, size, alignment);
    } catch (const Error& e) {
      kiln::log(LogLevel::kWarn, "vm",
                fmt::format("pooled allocator on {}: allocation of {} bytes failed: {}; "
                            "releasing all cached blocks and trying again",
                            device_.str(), size, e.what()));
      clear();
      return backend_->alloc(device_.id, size, alignment);
    }
  }
  void clear() override {
    std::map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      for (const auto& [size, list] : blocks) used_ -= size * list.size();
    }
    for (const auto& [size, list] : blocks) {
      for (void* p : list) {
        backend_->free(device_.id, p);
        refund(size);
      }
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

void Allocator::charge(size_t size) {
  if (budget_) budget_->charge(size, fmt::format("a VM allocation on {} of", device_.str()));
}

void Allocator::refund(size_t size) noexcept {
  if (budget_) budget_->refund(size);
}

Ref<Allocator> make_allocator(MemoryConfig::Kind kind, Ref<DeviceBackend> backend, Device device,
                              std::shared_ptr<MemoryBudget> budget) {
  if (kind == MemoryConfig::Kind::kNaive) {
    return make_object<NaiveAllocator>(std::move(backend), device, std::move(budget));
  }
  return make_object<PooledAllocator>(std::move(backend), device, std::move(budget));
}

bool charged_to(const StorageObj& storage, const MemoryBudget* budget) {
  const auto* block = dynamic_cast<const Block*>(&storage);
  return budget != nullptr && block != nullptr && block->owner().budget().get() == budget;
}

size_t alignment_of(DataType dtype) {
  return std::max<size_t>(64, static_cast<size_t>(dtype.lanes) * dtype.bits / 8);
}

size_t checked_nbytes(const std::vector<int64_t>& shape, DataType dtype, const char* who) {
  // In 64 bits a product can wrap to a small number: a tensor that size checks would pass
  // while its shape reaches far past its memory.
  uint64_t n = dtype.bytes();
  for (int64_t d : shape) {
    if (d < 0) throw ValueError(fmt::format("{}: negative dimension {}", who, d));
    if (d != 0 && n > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d)) {
      throw ValueError(fmt::format("{}: shape [{}] of {} has more bytes than memory can hold", who,
                                   fmt::join(shape, ", "), dtype.str()));
    }
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(n);
}

Tensor tensor_in_storage(const Ref<StorageObj>& storage, int64_t offset, std::vector<int64_t> shape,
                         DataType dtype) {
  const auto nbytes = static_cast<int64_t>(checked_nbytes(shape, dtype, "alloc_tensor"));
  if (offset < 0 || offset > static_cast<int64_t>(storage->size()) ||
      nbytes > static_cast<int64_t>(storage->size()) - offset) {
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
  auto storage =
      allocator.alloc(checked_nbytes(shape, dtype, "allocating a tensor"), alignment_of(dtype));
  return tensor_in_storage(storage, 0, shape, dtype);
}

}  // namespace kiln::vm
