// SPDX-License-Identifier: Apache-2.0
#include "cpu_pool.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

namespace kiln::cpu {
namespace {

// How long a worker spins for the next launch before it sleeps: long enough that launches in
// a timing loop find it awake, short enough that an idle pool costs nothing measurable.
constexpr auto kSpinFor = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins (politely: the CPU may be shared with more threads than it has) until `done()`.
template <typename Done>
void spin_until(Done done) {
  for (uint32_t i = 1; !done(); ++i) {
    cpu_relax();
    if (i % 64 == 0) std::this_thread::yield();
  }
}

// The live pools, for the fork handler (a child process has no worker threads, and a launch
// there must not wait for them). Off the run path: touched when a pool is made or destroyed and
// at fork(). glibc drops the handlers when the plugin is unloaded.
std::mutex g_pools_mu;
std::set<CpuPool*>& live_pools() {
  static std::set<CpuPool*> pools;
  return pools;
}

void register_pool(CpuPool* pool) {
  static const bool handlers = [] {
    pthread_atfork([] { g_pools_mu.lock(); }, [] { g_pools_mu.unlock(); },
                   [] {
                     for (CpuPool* p : live_pools()) p->forget_workers_after_fork();
                     g_pools_mu.unlock();
                   });
    return true;
  }();
  (void)handlers;
  std::lock_guard<std::mutex> lock(g_pools_mu);
  live_pools().insert(pool);
}

void unregister_pool(CpuPool* pool) {
  std::lock_guard<std::mutex> lock(g_pools_mu);
  live_pools().erase(pool);
}

}  // namespace

CpuPool::CpuPool(int32_t size, const cpu_set_t* cpus) : size_(std::max(size, 1)) {
  if (cpus != nullptr) {
    cpus_ = *cpus;
    has_cpus_ = true;
  }
  register_pool(this);
}

CpuPool::~CpuPool() {
  unregister_pool(this);
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CpuPool::forget_workers_after_fork() noexcept {
  for (std::thread& t : workers_) t.detach();
  workers_.clear();
  started_ = false;
  state_.store(0);
  pending_.store(0);
  sleepers_.store(0);
  busy_.store(false);
}

void CpuPool::start_workers() {
  const uint32_t generation = generation_.load();
  // Where the process has a CPU for every pool thread, the workers keep off the CPU the caller
  // runs on now: a worker started beside its caller may stay there (the load balancer sees two
  // threads that mostly spin and yield), and every launch then pays two context switches
  // (about 1 us instead of 0.3 us on 2 CPUs). The caller itself is never pinned.
  cpu_set_t workers_cpus = cpus_;
  if (has_cpus_ && CPU_COUNT(&cpus_) >= size_) {
    const int caller_cpu = sched_getcpu();
    if (caller_cpu >= 0 && CPU_ISSET(caller_cpu, &workers_cpus)) CPU_CLR(caller_cpu, &workers_cpus);
  }
  workers_.reserve(static_cast<size_t>(size_ - 1));
  for (int32_t i = 1; i < size_; ++i) {
    workers_.emplace_back([this, i, generation] { worker_loop(i, generation); });
    const pthread_t handle = workers_.back().native_handle();
    const std::string name = "kiln-cpu-" + std::to_string(i);
    pthread_setname_np(handle, name.c_str());
    if (has_cpus_) pthread_setaffinity_np(handle, sizeof(workers_cpus), &workers_cpus);
  }
}

void CpuPool::worker_loop(int32_t index, uint32_t seen) {
  uint64_t acknowledged = 0;  // the state word of the last kAllAtOnce launch acknowledged
  for (;;) {
    // Wait for the next launch: spin a while, then sleep.
    const auto until = std::chrono::steady_clock::now() + kSpinFor;
    uint32_t spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen &&
           (++spins % 128 != 0 || std::chrono::steady_clock::now() < until)) {
      cpu_relax();
      if (spins % 64 == 0) std::this_thread::yield();
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      // seq_cst with the launcher's bump-then-read-sleepers: one of the two sees the other.
      sleepers_.fetch_add(1);
      while (generation_.load() == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    const uint64_t state = state_.load(std::memory_order_acquire);
    if ((state & kAll) == 0) {
      join_launch();
    } else if (state != acknowledged) {
      // Its caller waits for this worker's acknowledgement, so the fields stay this launch's.
      acknowledged = state;
      if (index < slots_) job_(closure_, index, slots_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void CpuPool::join_launch() noexcept {
  // Join only while the launch is open: after the close its caller may already be writing the
  // next launch's fields, or have returned and freed what `closure_` points to.
  uint64_t s = state_.load(std::memory_order_acquire);
  do {
    if ((s & kOpen) == 0) return;
  } while (!state_.compare_exchange_weak(s, s + kTaken + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire));
  // A slot past the last (a worker that came late) runs nothing.
  const uint64_t slot = 1 + ((s & ~kOpen) >> 32);
  if (slot < static_cast<uint64_t>(slots_)) job_(closure_, static_cast<int32_t>(slot), slots_);
  state_.fetch_sub(1, std::memory_order_release);
}

bool CpuPool::run(int32_t slots, PoolJob job, void* closure, PoolLaunch how) {
  const int32_t n = std::min(slots, size_);
  if (n < 2) return false;
  bool idle = false;
  if (!busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) return false;
  if (!started_) {
    try {
      start_workers();
      started_ = true;
    } catch (...) {
      stop_.store(true);
      generation_.fetch_add(1);
      generation_.notify_all();
      for (std::thread& t : workers_) t.join();
      workers_.clear();
      stop_.store(false);
      busy_.store(false, std::memory_order_release);
      throw;
    }
  }
  job_ = job;
  closure_ = closure;
  slots_ = n;
  if (how == PoolLaunch::kAllAtOnce) {
    pending_.store(size_ - 1, std::memory_order_relaxed);
    state_.store(kAll | (++all_at_once_launches_ & (kAll - 1)), std::memory_order_release);
  } else {
    state_.store(kOpen, std::memory_order_release);
  }
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  job(closure, 0, n);
  if (how == PoolLaunch::kAllAtOnce) {
    // Every worker acknowledges, those past n too: none still reads this launch's fields after.
    spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; });
  } else {
    state_.fetch_and(~kOpen, std::memory_order_acq_rel);
    spin_until([this] { return (state_.load(std::memory_order_acquire) & kLowMask) == 0; });
  }
  busy_.store(false, std::memory_order_release);
  return true;
}

}  // namespace kiln::cpu
