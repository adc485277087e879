// VM memory: allocators per device ("naive" and "pooled", SPEC.md §2.8) and the storages they
// hand out. A storage keeps its allocator alive, so memory goes back to the right pool however
// long a tensor viewing it outlives the VM.
#ifndef KILN_CORE_VM_ALLOCATOR_H_
#define KILN_CORE_VM_ALLOCATOR_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "kiln/device_backend.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::vm {

class Allocator : public Object {
 public:
  Allocator(Ref<DeviceBackend> backend, Device device)
      : backend_(std::move(backend)), device_(device) {}
  const char* type_key() const override { return "vm.Allocator"; }
  Device device() const { return device_; }
  const Ref<DeviceBackend>& backend() const { return backend_; }
  // A storage of at least `nbytes` (> 0 after rounding up from 0) aligned to `alignment`.
  // OutOfMemoryError (or the backend's error) when the device has no room.
  virtual Ref<StorageObj> alloc(size_t nbytes, size_t alignment) = 0;
  // Takes back the memory of a storage that died.
  virtual void give_back(void* ptr, size_t nbytes) = 0;
  // Frees every cached block (pooled); nothing for naive.
  virtual void clear() {}
  // Bytes currently taken from the device.
  virtual size_t device_bytes() const = 0;

 protected:
  Ref<DeviceBackend> backend_;
  Device device_;
};

// Makes the allocator of `kind` for `device`, served by `backend`.
Ref<Allocator> make_allocator(MemoryConfig::Kind kind, Ref<DeviceBackend> backend, Device device);

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
