// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's one pool of worker threads. Both ways the plugin hands out CPU work use it:
// SDK kernels' parallel_for (parallel_for.h) and the all-at-once task team TVM-compiled parallel
// loops need (task_team.h), so a process runs at most num_threads threads of Kiln's CPU work in
// total, the calling thread included (as IREE's executor: one set of workers, two ways to give
// them work).
#ifndef KILN_PLUGINS_CPU_CPU_POOL_H_
#define KILN_PLUGINS_CPU_CPU_POOL_H_

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace kiln::cpu {

// Slot `slot` of a launch of `slots` (0 <= slot < slots); never throws.
using PoolJob = void (*)(void* closure, int32_t slot, int32_t slots);

// How a launch's slots are to run.
enum class PoolLaunch {
  // Every slot on its own thread, all at once: a slot may wait for the others (a barrier). The
  // launch returns when all have run.
  kAllAtOnce,
  // Slot 0 on the caller, the others on whichever workers come while it runs: each slot pulls
  // shared work until none is left, so a slot that no worker took is no loss. The launch returns
  // when the caller's slot and the slots workers took are done; it never waits for a worker that
  // is still asleep.
  kAsAvailable,
};

// A caller and up to `size - 1` worker threads, started on the first launch that needs them and
// stopped by the destructor. A worker spins briefly after each launch (back-to-back launches then
// cost no wake-up), then sleeps on a futex. Workers run on `cpus` (the process's CPUs, which may
// be wider than the mask of the thread that starts them) and are named "kiln-cpu-<i>".
//
// One launch at a time: run() returns false without running anything when the pool is busy (a
// launch from inside a slot, or from another thread while one runs); its caller then does the
// work itself, so no launch ever waits for threads that cannot come. A child process made by
// fork() has none of the workers: its pools start new ones on their next launch.
//
// Launch protocols, told apart by the state word (state_) a woken worker reads:
// - kAllAtOnce: worker i runs slot i (when i < n), and every worker acknowledges the launch
//   (pending_), so the caller, which waits for all of them, knows none still reads its fields.
//   The word carries the launch's number, so that a worker acknowledges each launch once.
// - kAsAvailable: a worker joins while the launch is open, taking the next slot in the same
//   atomic step, runs it and leaves; the caller closes the launch after its own slot and waits
//   only for the workers that joined. One that wakes after the close touches nothing.
class CpuPool {
 public:
  // `size` >= 1 (the caller counts); `cpus` borrowed for the call (NULL: inherit the starting
  // thread's mask).
  CpuPool(int32_t size, const cpu_set_t* cpus);
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  // The most threads a launch uses: the workers and the caller.
  int32_t size() const { return size_; }

  // Runs job(closure, i, n) for slots i in [0, n), n = min(slots, size()) (>= 2), slot 0 on the
  // calling thread, as `how` says. Returns false, having run nothing, when n < 2 or the pool is
  // busy. Throws std::system_error when the workers cannot be started (nothing ran then).
  bool run(int32_t slots, PoolJob job, void* closure, PoolLaunch how);

  // In a child made by fork(): forgets the workers, which did not come along (their stacks stay
  // allocated). Called by the fork handler only.
  void forget_workers_after_fork() noexcept;

 private:
  void start_workers();  // throws std::system_error
  void worker_loop(int32_t index, uint32_t seen);
  void join_launch() noexcept;

  const int32_t size_;
  cpu_set_t cpus_{};
  bool has_cpus_ = false;

  // Set by the running launch; a launch that finds it set does not run. An atomic, not a
  // mutex: a nested launch comes from a thread that may be the running launch's caller.
  std::atomic<bool> busy_{false};
  std::vector<std::thread> workers_;  // under busy_
  bool started_ = false;              // under busy_

  // The current launch, written by its caller before it opens the launch.
  PoolJob job_ = nullptr;
  void* closure_ = nullptr;
  int32_t slots_ = 0;

  // The launch's state. kAllAtOnce: kAll | the launch's number (all_at_once_launches_).
  // kAsAvailable: kOpen while workers may join, bits 32-61 the slots workers took (slot = 1 + that
  // count), bits 0-31 the workers joined now. On a cache line of its own: the caller and the joined
  // workers write it while the others read generation_.
  static constexpr uint64_t kOpen = uint64_t{1} << 63;
  static constexpr uint64_t kAll = uint64_t{1} << 62;
  static constexpr uint64_t kTaken = uint64_t{1} << 32;
  static constexpr uint64_t kLowMask = kTaken - 1;
  alignas(64) std::atomic<uint64_t> state_{0};
  std::atomic<int32_t> pending_{0};    // kAllAtOnce: workers that have not acknowledged it yet
  uint64_t all_at_once_launches_ = 0;  // under busy_; numbers the kAllAtOnce state words

  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per launch; sleepers wait on it
  std::atomic<int32_t> sleepers_{0};                 // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_CPU_POOL_H_
