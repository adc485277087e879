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
// Launch protocol: the caller writes the launch's fields and opens it (state_); a worker joins
// by incrementing the joined count while the launch is open, takes the next slot, runs it and
// leaves. The caller closes the launch (for kAllAtOnce: once every slot is taken) and waits until
// no worker is joined; a worker that wakes after the close never touches the launch's fields.
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
  void worker_loop(uint32_t seen);
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
  std::atomic<int32_t> next_slot_{0};  // the next slot a joining worker takes

  // kOpen while workers may join the current launch; the low bits count the workers joined.
  static constexpr uint32_t kOpen = 1u << 31;
  std::atomic<uint32_t> state_{0};

  std::atomic<uint32_t> generation_{0};  // bumped per launch; sleeping workers wait on it
  std::atomic<int32_t> sleepers_{0};     // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_CPU_POOL_H_
