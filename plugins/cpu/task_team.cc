// SPDX-License-Identifier: Apache-2.0
#include "task_team.h"

#include <atomic>
#include <exception>
#include <string>

#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

KilnError* run_task_team(void* self, int32_t num_tasks, KilnTeamTask task, void* closure,
                         int32_t* failed) {
  return static_cast<TaskTeam*>(self)->run(num_tasks, task, closure, failed);
}

// One launch: the task and the first nonzero result any task returned.
struct TeamLaunch {
  KilnTeamTask task;
  void* closure;
  std::atomic<int32_t> failed{0};
};

void run_slot(void* closure, int32_t slot, int32_t slots) {
  auto& launch = *static_cast<TeamLaunch*>(closure);
  const int32_t rc = launch.task(launch.closure, slot, slots);
  if (rc == 0) return;
  int32_t none = 0;
  launch.failed.compare_exchange_strong(none, rc);
}

}  // namespace

TaskTeam::TaskTeam(CpuPool& pool, std::string size_source)
    : pool_(pool), size_source_(std::move(size_source)) {
  extension_.header.struct_size = sizeof(KilnTaskTeam);
  extension_.header.type = KILN_EXTENSION_TYPE_TASK_TEAM;
  extension_.magic = KILN_TASK_TEAM_MAGIC;
  extension_.self = this;
  extension_.max_tasks = pool_.size();
  extension_.size_source = size_source_.c_str();
  extension_.run = run_task_team;
}

KilnError* TaskTeam::run(int32_t num_tasks, KilnTeamTask task, void* closure,
                         int32_t* failed) noexcept {
  if (task == nullptr || failed == nullptr) {
    return sdk::make_error(KILN_ERROR_VALUE, "task team: task or failed is NULL");
  }
  const int32_t n = num_tasks <= 0 ? pool_.size() : num_tasks;
  TeamLaunch launch{task, closure};
  try {
    if (!pool_.run(n, run_slot, &launch, PoolLaunch::kAllAtOnce)) {
      // One task, or the pool is busy: the caller alone runs the launch as one task.
      *failed = task(closure, 0, 1);
      return nullptr;
    }
  } catch (const std::exception& e) {
    return sdk::make_error(KILN_ERROR_RUNTIME, "cannot start the cpu plugin's " +
                                                   std::to_string(pool_.size() - 1) +
                                                   " worker threads: " + e.what());
  }
  *failed = launch.failed.load();
  return nullptr;
}

}  // namespace kiln::cpu
