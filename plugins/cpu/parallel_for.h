// SPDX-License-Identifier: Apache-2.0
// The parallel-for kernels get through KilnKernelEnv, backed by oneTBB.
#ifndef KILN_PLUGINS_CPU_PARALLEL_FOR_H_
#define KILN_PLUGINS_CPU_PARALLEL_FOR_H_

#include <oneapi/tbb/task_arena.h>

#include <cstdint>

#include "kiln/c/host.h"
#include "kiln/c/kernel.h"

namespace kiln::cpu {

// Runs `body(closure, b, e)` over contiguous chunks covering [begin, end), each at least
// `grain` elements (grain < 1 counts as 1) except when the whole range is smaller, inside
// `arena` (borrowed; NULL or a one-thread arena runs serially on the caller). Returns NULL,
// or the first error a chunk returned; chunks not started yet are then skipped and every
// later error is freed through `host` (borrowed). Safe to call from inside a body of another
// parallel_for (nested loops run in the same arena) and from any thread. Never throws: a
// failure of oneTBB itself becomes a KILN_ERROR_RUNTIME / OUT_OF_MEMORY error.
KilnError* run_parallel_for(tbb::task_arena* arena, int32_t num_threads,
                            const KilnHostServices* host, int64_t begin, int64_t end, int64_t grain,
                            KilnParallelBody body, void* closure) noexcept;

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PARALLEL_FOR_H_
