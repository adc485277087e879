// SPDX-License-Identifier: Apache-2.0
// Host scratch memory for TVM-compiled code (__TVMBackendAllocWorkspace on a cpu device), kept
// for reuse by the library that asked: a kernel that takes scratch on every call (a norm, an
// activation, a KV-cache append) would otherwise go to the allocator every call, which costs
// an LLM decode step microseconds (TVM's runtime keeps a workspace pool for the same reason).
#ifndef KILN_CORE_TVM_HOST_WORKSPACE_POOL_H_
#define KILN_CORE_TVM_HOST_WORKSPACE_POOL_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

namespace kiln::tvm_interop {

class HostWorkspacePool {
 public:
  // Keeps at most `max_idle_bytes` of returned blocks for reuse; beyond that they are freed.
  explicit HostWorkspacePool(size_t max_idle_bytes = size_t{64} << 20);
  ~HostWorkspacePool();  // frees every block, idle or not
  HostWorkspacePool(const HostWorkspacePool&) = delete;
  HostWorkspacePool& operator=(const HostWorkspacePool&) = delete;

  // A block of at least `nbytes` (64-byte aligned): an idle one of its size class, else a new
  // one. OutOfMemoryError when the allocator fails. Thread-safe.
  void* alloc(size_t nbytes);
  // Takes back a block alloc() returned; false (and nothing done) for any other pointer.
  bool free(void* ptr);

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> its size
  std::multimap<size_t, void*> idle_;       // size -> block
  size_t idle_bytes_ = 0;
  size_t max_idle_bytes_;
};

}  // namespace kiln::tvm_interop

#endif  // KILN_CORE_TVM_HOST_WORKSPACE_POOL_H_
