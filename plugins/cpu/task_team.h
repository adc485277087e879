// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's task team (kiln/c/task_team.h): threads that run the tasks of one launch all
// at once, for code whose tasks meet at barriers (TVM's parallel loops).
#ifndef KILN_PLUGINS_CPU_TASK_TEAM_H_
#define KILN_PLUGINS_CPU_TASK_TEAM_H_

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kiln/c/task_team.h"

namespace kiln::cpu {

// A caller and up to `size - 1` worker threads, started on the first launch that needs them
// and stopped by the destructor. A worker spins briefly after each launch (back-to-back
// launches then cost no wake-up), then sleeps on a futex. Workers run on `cpus` (the process's
// CPUs, which may be wider than the mask of the thread that starts them) and are named
// "kiln-cpu-<i>". One launch at a time: a launch that finds the team busy (a nested one, or one
// from another thread) runs as a single task on its caller, so no task ever waits for a thread
// that cannot come. A child process made by fork() has none of the workers: its teams start
// new ones on their next launch.
class TaskTeam {
 public:
  // `size` >= 1 (the caller counts); `cpus` borrowed for the call (NULL: inherit);
  // `size_source` says where the size came from.
  TaskTeam(int32_t size, const cpu_set_t* cpus, std::string size_source);
  ~TaskTeam();
  TaskTeam(const TaskTeam&) = delete;
  TaskTeam& operator=(const TaskTeam&) = delete;

  int32_t size() const { return size_; }

  // KilnTaskTeam::run. Never throws: a thread that cannot be started is an error (no task ran).
  KilnError* run(int32_t num_tasks, KilnTeamTask task, void* closure, int32_t* failed) noexcept;

  // The extension to chain from the device backend table (self: this object).
  const KilnTaskTeam& extension() const { return extension_; }

  // In a child made by fork(): forgets the workers, which did not come along (their stacks
  // stay allocated). Called by the fork handler only.
  void forget_workers_after_fork() noexcept;

 private:
  void start_workers();  // throws std::system_error
  void worker(int32_t index);
  void record_failure(int32_t rc);

  const int32_t size_;
  const std::string size_source_;
  cpu_set_t cpus_{};
  bool has_cpus_ = false;
  KilnTaskTeam extension_{};

  // Set by the running launch; a launch that finds it set runs serially. An atomic, not a
  // mutex: a nested launch comes from a thread that may be the running launch's caller.
  std::atomic<bool> busy_{false};
  std::vector<std::thread> workers_;  // under busy_
  bool started_ = false;              // under busy_

  // The current launch, written by the caller before it bumps generation_.
  KilnTeamTask task_ = nullptr;
  void* closure_ = nullptr;
  int32_t num_tasks_ = 0;
  std::atomic<int32_t> failed_{0};
  std::atomic<int32_t> pending_{0};  // worker tasks of the launch not finished yet

  std::atomic<uint32_t> generation_{0};  // bumped per launch; workers wait on it
  std::atomic<int32_t> sleepers_{0};     // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_TASK_TEAM_H_
