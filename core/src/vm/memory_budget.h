// SPDX-License-Identifier: Apache-2.0
// MemoryBudget: the bytes one owner (an RPC session) may hold, shared by everything that
// allocates for it. The owner charges the storages its handles keep alive; the VMs made while
// it is installed (ScopedMemoryBudget) charge every byte their allocators take from a device,
// at the moment they take it, so no route a program takes — a storage returned bare or behind
// a small view, kept in a VM's outputs, cached by a pooled allocator, or never returned — holds
// memory the owner was not charged for.
#ifndef KILN_CORE_VM_MEMORY_BUDGET_H_
#define KILN_CORE_VM_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::vm {

class MemoryBudget {
 public:
  // At most `limit` bytes (0: no limit, only counted). `source` says where the limit comes
  // from in errors ("the server's --max-session-memory").
  MemoryBudget(uint64_t limit, std::string source);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Counts `nbytes` more. OutOfMemoryError "<what> <nbytes> bytes would exceed the memory limit
  // of <limit> bytes (<used> held; <source>)" when they would pass the limit; nothing is
  // counted then. Thread-safe.
  void charge(uint64_t nbytes, std::string_view what);
  // The same, returning false instead of throwing.
  bool try_charge(uint64_t nbytes);
  // Counts `nbytes` less: what an earlier charge counted, given back.
  void refund(uint64_t nbytes) noexcept;
  // Whether `nbytes` more would fit now.
  bool fits(uint64_t nbytes) const;
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  const std::string source_;
  std::atomic<uint64_t> used_{0};
};

// Installs `budget` on this thread while it lives (restoring the one before): VMs constructed
// here meanwhile charge their allocations to it for as long as they live, on any thread.
class ScopedMemoryBudget {
 public:
  explicit ScopedMemoryBudget(std::shared_ptr<MemoryBudget> budget);
  ~ScopedMemoryBudget();
  ScopedMemoryBudget(const ScopedMemoryBudget&) = delete;
  ScopedMemoryBudget& operator=(const ScopedMemoryBudget&) = delete;

 private:
  std::shared_ptr<MemoryBudget> previous_;
};

// The budget installed on this thread; null when none is (VMs then allocate unbounded).
std::shared_ptr<MemoryBudget> current_memory_budget();

}  // namespace kiln::vm

#endif  // KILN_CORE_VM_MEMORY_BUDGET_H_
