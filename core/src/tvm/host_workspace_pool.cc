// SPDX-License-Identifier: Apache-2.0
#include "tvm/host_workspace_pool.h"

#include <fmt/format.h>

#include <cstdlib>

#include "kiln/error.h"

namespace kiln::tvm_interop {
namespace {

constexpr size_t kAlignment = 64;

// Sizes round up to a multiple of 64 bytes below 4 KiB and of 4 KiB above: one kernel's calls
// at a few shapes then share blocks.
size_t size_class(size_t nbytes) {
  const size_t step = nbytes <= 4096 ? kAlignment : 4096;
  return (std::max<size_t>(nbytes, 1) + step - 1) / step * step;
}

}  // namespace

HostWorkspacePool::HostWorkspacePool(size_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}

HostWorkspacePool::~HostWorkspacePool() {
  for (auto& [ptr, size] : live_) std::free(ptr);
}

void* HostWorkspacePool::alloc(size_t nbytes) {
  const size_t size = size_class(nbytes);
  std::lock_guard lock(mu_);
  if (auto it = idle_.find(size); it != idle_.end()) {
    void* ptr = it->second;
    idle_.erase(it);
    idle_bytes_ -= size;
    return ptr;
  }
  void* ptr = std::aligned_alloc(kAlignment, size);
  if (ptr == nullptr) {
    throw OutOfMemoryError(fmt::format("workspace of {} bytes: host allocation failed", nbytes));
  }
  live_.emplace(ptr, size);
  return ptr;
}

bool HostWorkspacePool::free(void* ptr) {
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const size_t size = it->second;
  if (idle_bytes_ + size <= max_idle_bytes_) {
    idle_.emplace(size, ptr);
    idle_bytes_ += size;
  } else {
    live_.erase(it);
    std::free(ptr);
  }
  return true;
}

}  // namespace kiln::tvm_interop
