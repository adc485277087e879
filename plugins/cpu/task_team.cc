// SPDX-License-Identifier: Apache-2.0
#include "task_team.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

// How long a worker spins for the next launch before it sleeps: long enough that launches in
// a timing loop find it awake, short enough that an idle team costs nothing measurable.
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

KilnError* run_task_team(void* self, int32_t num_tasks, KilnTeamTask task, void* closure,
                         int32_t* failed) {
  return static_cast<TaskTeam*>(self)->run(num_tasks, task, closure, failed);
}

// The live teams, for the fork handler (a child process has no worker threads, and a launch
// there must not wait for their acknowledgements). Off the run path: touched when a team is
// made or destroyed and at fork(). glibc drops the handlers when the plugin is unloaded.
std::mutex g_teams_mu;
std::set<TaskTeam*>& live_teams() {
  static std::set<TaskTeam*> teams;
  return teams;
}

void register_team(TaskTeam* team) {
  static const bool handlers = [] {
    pthread_atfork([] { g_teams_mu.lock(); }, [] { g_teams_mu.unlock(); },
                   [] {
                     for (TaskTeam* t : live_teams()) t->forget_workers_after_fork();
                     g_teams_mu.unlock();
                   });
    return true;
  }();
  (void)handlers;
  std::lock_guard<std::mutex> lock(g_teams_mu);
  live_teams().insert(team);
}

void unregister_team(TaskTeam* team) {
  std::lock_guard<std::mutex> lock(g_teams_mu);
  live_teams().erase(team);
}

}  // namespace

TaskTeam::TaskTeam(int32_t size, const cpu_set_t* cpus, std::string size_source)
    : size_(std::max(size, 1)), size_source_(std::move(size_source)) {
  if (cpus != nullptr) {
    cpus_ = *cpus;
    has_cpus_ = true;
  }
  extension_.header.struct_size = sizeof(KilnTaskTeam);
  extension_.header.type = KILN_EXTENSION_TYPE_TASK_TEAM;
  extension_.magic = KILN_TASK_TEAM_MAGIC;
  extension_.self = this;
  extension_.max_tasks = size_;
  extension_.size_source = size_source_.c_str();
  extension_.run = run_task_team;
  register_team(this);
}

TaskTeam::~TaskTeam() {
  unregister_team(this);
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TaskTeam::forget_workers_after_fork() noexcept {
  for (std::thread& t : workers_) t.detach();
  workers_.clear();
  started_ = false;
  pending_.store(0);
  sleepers_.store(0);
  busy_.store(false);
}

void TaskTeam::start_workers() {
  const uint32_t generation = generation_.load();
  // Where the process has a CPU for every team thread, the workers keep off the CPU the caller
  // runs on now: a worker started beside its caller may stay there (the load balancer sees two
  // threads that mostly spin and yield), and every launch then pays two context switches
  // (about 1 us instead of 0.3 us on 2 CPUs). The caller itself is never pinned.
  cpu_set_t workers_cpus = cpus_;
  bool place = has_cpus_;
  if (has_cpus_ && CPU_COUNT(&cpus_) >= size_) {
    const int caller_cpu = sched_getcpu();
    if (caller_cpu >= 0 && CPU_ISSET(caller_cpu, &workers_cpus)) CPU_CLR(caller_cpu, &workers_cpus);
  }
  workers_.reserve(static_cast<size_t>(size_ - 1));
  for (int32_t i = 1; i < size_; ++i) {
    workers_.emplace_back([this, i, generation] {
      uint32_t seen = generation;
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
        if (i < num_tasks_) record_failure(task_(closure_, i, num_tasks_));
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    });
    const pthread_t handle = workers_.back().native_handle();
    const std::string name = "kiln-cpu-" + std::to_string(i);
    pthread_setname_np(handle, name.c_str());
    if (place) pthread_setaffinity_np(handle, sizeof(workers_cpus), &workers_cpus);
  }
}

void TaskTeam::record_failure(int32_t rc) {
  if (rc == 0) return;
  int32_t none = 0;
  failed_.compare_exchange_strong(none, rc);
}

KilnError* TaskTeam::run(int32_t num_tasks, KilnTeamTask task, void* closure,
                         int32_t* failed) noexcept {
  if (task == nullptr || failed == nullptr) {
    return sdk::make_error(KILN_ERROR_VALUE, "task team: task or failed is NULL");
  }
  const int32_t n = num_tasks <= 0 ? size_ : std::min(num_tasks, size_);
  bool idle = false;
  if (n <= 1 || !busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    *failed = task(closure, 0, 1);
    return nullptr;
  }
  if (!started_) {
    try {
      start_workers();
      started_ = true;
    } catch (const std::exception& e) {
      const size_t running = workers_.size();
      stop_.store(true);
      generation_.fetch_add(1);
      generation_.notify_all();
      for (std::thread& t : workers_) t.join();
      workers_.clear();
      stop_.store(false);
      busy_.store(false, std::memory_order_release);
      return sdk::make_error(KILN_ERROR_RUNTIME, "cannot start the task team's threads (" +
                                                     std::to_string(running + 1) + " of " +
                                                     std::to_string(size_) + "): " + e.what());
    }
  }
  task_ = task;
  closure_ = closure;
  num_tasks_ = n;
  failed_.store(0, std::memory_order_relaxed);
  // Every worker acknowledges every launch, those beyond n too: none is still reading this
  // launch's fields when the next one writes them.
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  record_failure(task(closure, 0, n));
  spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; });
  *failed = failed_.load(std::memory_order_relaxed);
  busy_.store(false, std::memory_order_release);
  return nullptr;
}

}  // namespace kiln::cpu
