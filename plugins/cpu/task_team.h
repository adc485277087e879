// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's task team (kiln/private/task_team.h): the all-at-once way of running work on
// the plugin's one pool (cpu_pool.h), for code whose tasks meet at barriers (TVM's parallel
// loops).
#ifndef KILN_PLUGINS_CPU_TASK_TEAM_H_
#define KILN_PLUGINS_CPU_TASK_TEAM_H_

#include <cstdint>
#include <string>

#include "cpu_pool.h"
#include "kiln/private/task_team.h"

namespace kiln::cpu {

// The KilnTaskTeam extension over `pool`: a launch runs its tasks as PoolLaunch::kAllAtOnce
// slots, each on its own thread; a launch that finds the pool busy (a nested one, or one from
// another thread while a launch or a parallel_for runs) runs as a single task on its caller.
class TaskTeam {
 public:
  // `pool` (borrowed) outlives this object; `size_source` says where its size came from.
  TaskTeam(CpuPool& pool, std::string size_source);
  TaskTeam(const TaskTeam&) = delete;
  TaskTeam& operator=(const TaskTeam&) = delete;

  // KilnTaskTeam::run. Never throws: workers that cannot be started are an error (no task ran).
  KilnError* run(int32_t num_tasks, KilnTeamTask task, void* closure, int32_t* failed) noexcept;

  // The extension to chain from the device backend table (self: this object).
  const KilnTaskTeam& extension() const { return extension_; }

 private:
  CpuPool& pool_;
  const std::string size_source_;
  KilnTaskTeam extension_{};
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_TASK_TEAM_H_
