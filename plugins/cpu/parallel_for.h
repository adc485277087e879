// SPDX-License-Identifier: Apache-2.0
// The parallel-for kernels get through KilnKernelEnv: the as-available way of running work on
// the plugin's one pool (cpu_pool.h).
#ifndef KILN_PLUGINS_CPU_PARALLEL_FOR_H_
#define KILN_PLUGINS_CPU_PARALLEL_FOR_H_

#include <cstdint>

#include "cpu_pool.h"
#include "kiln/c/host.h"
#include "kiln/c/kernel.h"

namespace kiln::cpu {

// Runs `body(closure, b, e)` over contiguous chunks covering [begin, end), each at least
// `grain` elements (grain < 1 counts as 1) except when the whole range is smaller, on `pool`
// (borrowed; NULL or a one-thread pool runs serially on the caller). The caller and the workers
// that come pull runs of chunks from a shared counter, largest first, so the body is called a
// few times per thread. Returns NULL, or the first error a chunk returned; chunks not started
// yet are then skipped and every later error is freed through `host` (borrowed). Safe from any
// thread: a call that finds the pool busy (nested in a body of another parallel_for or in a
// task-team task, or made beside another thread's launch) runs serially on its caller, so the
// process never runs more than the pool's threads. Never throws: workers that cannot be started
// become a KILN_ERROR_RUNTIME error (no chunk ran).
KilnError* run_parallel_for(CpuPool* pool, const KilnHostServices* host, int64_t begin, int64_t end,
                            int64_t grain, KilnParallelBody body, void* closure) noexcept;

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PARALLEL_FOR_H_
