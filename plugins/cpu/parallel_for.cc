// SPDX-License-Identifier: Apache-2.0
#include "parallel_for.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>

#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

// Splits [0, n) into `chunks` contiguous pieces whose sizes differ by at most one, so that
// every piece is at least n / chunks >= grain elements long. Computed without the product
// c * n, which could overflow.
struct ChunkMap {
  uint64_t n;
  uint64_t chunks;
  uint64_t start(uint64_t c) const {
    const uint64_t q = n / chunks;
    const uint64_t r = n % chunks;
    return c * q + std::min(c, r);
  }
};

}  // namespace

KilnError* run_parallel_for(tbb::task_arena* arena, int32_t num_threads,
                            const KilnHostServices* host, int64_t begin, int64_t end, int64_t grain,
                            KilnParallelBody body, void* closure) noexcept {
  if (body == nullptr) return sdk::make_error(KILN_ERROR_VALUE, "parallel_for: body is NULL");
  if (end <= begin) return nullptr;
  // The span may exceed INT64_MAX (e.g. [INT64_MIN, INT64_MAX)); unsigned arithmetic on the
  // two's-complement values is exact.
  const uint64_t n = static_cast<uint64_t>(end) - static_cast<uint64_t>(begin);
  const uint64_t g = grain < 1 ? 1 : static_cast<uint64_t>(grain);
  if (arena == nullptr || num_threads <= 1 || n < 2 * g) return body(closure, begin, end);

  const ChunkMap map{n, n / g};
  std::atomic<KilnError*> first{nullptr};
  // An own context per call: cancelling it after an error stops the chunks of this loop only,
  // not the enclosing loop this call may be nested in (its parent context is not touched).
  tbb::task_group_context context;
  try {
    // isolate: while this thread waits for the loop it runs only the loop's own chunks. When
    // the call is nested, it would otherwise pick up chunks of the enclosing loop, re-entering
    // a kernel body on a thread that is still inside it (a hazard for thread-local scratch or
    // locks held across the inner loop).
    arena->execute([&] {
      tbb::this_task_arena::isolate([&] {
        // Grain 1 over chunk indices: the auto partitioner hands each task a run of whole
        // chunks, and one body call per run keeps per-call overhead to a few per thread.
        tbb::parallel_for(
            tbb::blocked_range<uint64_t>(0, map.chunks, 1),
            [&](const tbb::blocked_range<uint64_t>& r) {
              if (first.load(std::memory_order_relaxed) != nullptr) return;
              const int64_t b =
                  static_cast<int64_t>(static_cast<uint64_t>(begin) + map.start(r.begin()));
              const int64_t e =
                  static_cast<int64_t>(static_cast<uint64_t>(begin) + map.start(r.end()));
              KilnError* error = body(closure, b, e);
              if (error == nullptr) return;
              KilnError* expected = nullptr;
              if (first.compare_exchange_strong(expected, error)) {
                context.cancel_group_execution();
              } else {
                host->error_free(host->host_ctx, error);
              }
            },
            tbb::auto_partitioner(), context);
      });
    });
  } catch (...) {
    // Only oneTBB itself (or a body that broke the C contract by throwing) gets here. A
    // recorded chunk error is the more useful report; the exception is then dropped.
    if (KilnError* recorded = first.load()) return recorded;
    return sdk::error_from_current_exception("parallel_for");
  }
  return first.load();
}

}  // namespace kiln::cpu
