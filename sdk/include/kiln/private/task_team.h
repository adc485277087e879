// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: the task team, an extension a CPU device backend may chain from its
 * KilnDeviceBackend::next.
 *
 * STATUS: a private agreement between libkiln and Kiln's cpu plugin in the vendor range of
 * extension types (abi.h, KILN_EXTENSION_TYPE_VENDOR_FIRST), not part of ABI 1.0. That is why it
 * lives in kiln/private/: on the in-tree SDK include path, but neither installed nor included by
 * the umbrella kiln/c/kiln.h, so no out-of-tree plugin can come to depend on it. It moves to
 * kiln/c/ when it becomes a numbered extension type of a later minor (docs/plugin-abi.md §10.1,
 * "The task team"). A host that does not know it skips it.
 *
 * Why: code compiled by TVM runs its parallel loops as a fixed number of tasks that may wait
 * for each other at a barrier (__TVMBackendParallelBarrier), so every task of a launch must run
 * at the same time, each on its own thread. A work-stealing scheduler (oneTBB) gives no such
 * guarantee. The team does: it runs at most max_tasks tasks, each on a thread of its own. */
#ifndef KILN_PRIVATE_TASK_TEAM_H_
#define KILN_PRIVATE_TASK_TEAM_H_

#include "kiln/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "KILN" in ASCII: a vendor-range number unlikely to be chosen by anyone else; a reader also
 * checks `magic`. */
#define KILN_EXTENSION_TYPE_TASK_TEAM 0x4B494C4E
#define KILN_TASK_TEAM_MAGIC 0x6D61657473616B74ull /* "tkasteam" */

/* Task `task` of a launch of `num_tasks` tasks (0 <= task < num_tasks). Returns 0, or nonzero
 * for a failure the launcher reads back (the team does not interpret it). */
typedef int32_t (*KilnTeamTask)(void* closure, int32_t task, int32_t num_tasks);

/* Owned by the plugin; lives as long as the backend table that points at it. */
typedef struct KilnTaskTeam {
  KilnExtension header; /* type KILN_EXTENSION_TYPE_TASK_TEAM, struct_size its size */
  uint64_t magic;       /* KILN_TASK_TEAM_MAGIC */
  void* self;           /* passed back to `run` */
  /* The most tasks one launch runs at once: the team's threads, the caller's included. >= 1. */
  int32_t max_tasks;
  int32_t reserved;
  /* Where max_tasks came from, for people: "option num_threads", "KILN_NUM_THREADS", "the
   * process's CPU affinity (2 CPUs)". Owned by the plugin. */
  const char* size_source;
  /* Runs task(closure, i, n) for every i in [0, n), each on its own thread and all at once,
   * task 0 on the calling thread, and returns when all have returned. n is `num_tasks` capped
   * at max_tasks (num_tasks <= 0: max_tasks), or 1 when the team is busy with another launch
   * (a nested launch, or one from another thread): a launch never waits for threads that
   * cannot come. `*failed` receives the first nonzero value a task returned, else 0. Returns
   * NULL, or an error when the team's threads cannot be started (no task ran then). */
  KilnError* (*run)(void* self, int32_t num_tasks, KilnTeamTask task, void* closure,
                    int32_t* failed);
} KilnTaskTeam;

#define KILN_TASK_TEAM_SIZE_FIRST KILN_SIZE_THROUGH(KilnTaskTeam, run)

/* The task team chained from `chain` (a KilnDeviceBackend's `next`), or NULL when there is
 * none or the extension found is not one (wrong size or magic). */
static inline const KilnTaskTeam* kiln_find_task_team(const KilnExtension* chain) {
  const KilnExtension* e = kiln_find_extension(chain, KILN_EXTENSION_TYPE_TASK_TEAM);
  if (!e || e->struct_size < KILN_TASK_TEAM_SIZE_FIRST) return NULL; /* NOLINT: C header */
  const KilnTaskTeam* team = (const KilnTaskTeam*)e;
  if (team->magic != KILN_TASK_TEAM_MAGIC || !team->run || team->max_tasks < 1) {
    return NULL; /* NOLINT(modernize-use-nullptr): this header is C */
  }
  return team;
}

#ifdef __cplusplus
}
#endif

#endif /* KILN_PRIVATE_TASK_TEAM_H_ */
