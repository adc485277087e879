// SPDX-License-Identifier: Apache-2.0
// VM memory: allocators per device ("naive" and "pooled", SPEC.md §2.8) and the storages they
// hand out. A storage keeps its allocator alive, so memory goes back to the right pool however
// long a tensor viewing it outlives the VM.
#ifndef KILN_CORE_VM_ALLOCATOR_H_
#define KILN_CORE_VM_ALLOCATOR_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/device_backend.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"
#include "kiln/vm/virtual_machine.h"
#include "vm/memory_budget.h"

namespace kiln::vm {

class Allocator : public Object {
 public:
  // `budget` (may be null: unbounded) is charged every byte taken from the device until it
  // goes back to the device; cached blocks of a pooled allocator stay charged.
  Allocator(Ref<DeviceBackend> backend, Device device, std::shared_ptr<MemoryBudget> budget)
      : backend_(std::move(backend)), device_(device), budget_(std::move(budget)) {}
  const char* type_key() const override { return "vm.Allocator"; }
  Device device() const { return device_; }
  const Ref<DeviceBackend>& backend() const { return backend_; }
  const std::shared_ptr<MemoryBudget>& budget() const { return budget_; }
  // A storage of at least `nbytes` (> 0 after rounding up from 0) aligned to `alignment`.
  // OutOfMemoryError when the budget or the device has no room (or the backend's error).
  virtual Ref<StorageObj> alloc(size_t nbytes, size_t alignment) = 0;
  // Takes back the memory of a storage that died.
  virtual void give_back(void* ptr, size_t nbytes) = 0;
  // Frees every cached block (pooled); nothing for naive.
  virtual void clear() {}
  // Bytes currently taken from the device.
  virtual size_t device_bytes() const = 0;

 protected:
  // Charges `size` bytes about to be taken from the device to the budget (if any).
  void charge(size_t size);
  // Gives back what charge() counted once the memory went back to the device.
  void refund(size_t size) noexcept;

  Ref<DeviceBackend> backend_;
  Device device_;
  std::shared_ptr<MemoryBudget> budget_;
};

// Makes the allocator of `kind` for `device`, served by `backend`, charging `budget` (null:
// unbounded).
Ref<Allocator> make_allocator(MemoryConfig::Kind kind, Ref<DeviceBackend> backend, Device device,
                              std::shared_ptr<MemoryBudget> budget);

// Whether the memory of `storage` is charged to `budget` already (it came from an allocator
// of that budget): an owner that holds it must not count it a second time.
bool charged_to(const StorageObj& storage, const MemoryBudget* budget);

// The bytes of a tensor of `shape` and `dtype`; ValueError naming `who` for a negative
// dimension or a size past INT64_MAX (which would wrap).
size_t checked_nbytes(const std::vector<int64_t>& shape, DataType dtype, const char* who);

// A tensor of `shape` and `dtype` viewing `storage` at byte `offset`. ValueError when it does
// not fit ("storage allocation failure, attempted to allocate <n> at offset <o> in region that
// is <s> bytes").
Tensor tensor_in_storage(const Ref<StorageObj>& storage, int64_t offset, std::vector<int64_t> shape,
                         DataType dtype);

// A fresh tensor from `allocator` (what argument conversion and constants use).
Tensor empty_tensor(Allocator& allocator, const std::vector<int64_t>& shape, DataType dtype);

// The flat allocation alignment of `dtype`: max(64, lanes * bits / 8).
size_t alignment_of(DataType dtype);

}  // namespace kiln::vm

#endif  // KILN_CORE_VM_ALLOCATOR_H_
