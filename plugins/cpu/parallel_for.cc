// SPDX-License-Identifier: Apache-2.0
#include "parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <string>

#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

// One parallel_for: [begin, end) split into `chunks` contiguous pieces whose sizes differ by at
// most one, so that every piece is at least n / chunks >= grain elements long, and what its
// slots share.
struct Loop {
  int64_t begin;
  uint64_t n;
  uint64_t chunks;
  int32_t slots;
  KilnParallelBody body;
  void* closure;
  const KilnHostServices* host;
  std::atomic<uint64_t> next{0};  // the first chunk no slot has taken
  std::atomic<KilnError*> first{nullptr};

  // The start of chunk `c`, computed without the product c * n, which could overflow. The span
  // may exceed INT64_MAX (e.g. [INT64_MIN, INT64_MAX)); unsigned arithmetic on the
  // two's-complement values is exact.
  int64_t start(uint64_t c) const {
    const uint64_t q = n / chunks;
    const uint64_t r = n % chunks;
    return static_cast<int64_t>(static_cast<uint64_t>(begin) + c * q + std::min(c, r));
  }
};

// A slot: takes runs of chunks, an eighth of what is left per slot (guided scheduling: few body
// calls while much is left, single chunks at the end), until none is left or a chunk failed. The
// runs stay small enough that a thread the OS preempts in the middle of one holds up the loop by
// little: the others cannot take work back from it, as a work-stealing pool could.
void run_slot(void* closure, int32_t /*slot*/, int32_t /*slots*/) {
  auto& loop = *static_cast<Loop*>(closure);
  const uint64_t share = 8 * static_cast<uint64_t>(loop.slots);
  uint64_t c = loop.next.load(std::memory_order_relaxed);
  while (c < loop.chunks && loop.first.load(std::memory_order_relaxed) == nullptr) {
    const uint64_t take = std::max<uint64_t>(1, (loop.chunks - c) / share);
    if (!loop.next.compare_exchange_weak(c, c + take, std::memory_order_relaxed)) continue;
    KilnError* error = loop.body(loop.closure, loop.start(c), loop.start(c + take));
    if (error != nullptr) {
      KilnError* expected = nullptr;
      if (!loop.first.compare_exchange_strong(expected, error)) {
        loop.host->error_free(loop.host->host_ctx, error);
      }
      return;
    }
    c = loop.next.load(std::memory_order_relaxed);
  }
}

}  // namespace

KilnError* run_parallel_for(CpuPool* pool, const KilnHostServices* host, int64_t begin, int64_t end,
                            int64_t grain, KilnParallelBody body, void* closure) noexcept {
  if (body == nullptr) return sdk::make_error(KILN_ERROR_VALUE, "parallel_for: body is NULL");
  if (end <= begin) return nullptr;
  const uint64_t n = static_cast<uint64_t>(end) - static_cast<uint64_t>(begin);
  const uint64_t g = grain < 1 ? 1 : static_cast<uint64_t>(grain);
  if (pool == nullptr || pool->size() <= 1 || n < 2 * g) return body(closure, begin, end);

  const uint64_t chunks = n / g;
  Loop loop{
      begin,  n,
      chunks, static_cast<int32_t>(std::min<uint64_t>(chunks, static_cast<uint64_t>(pool->size()))),
      body,   closure,
      host};
  try {
    if (!pool->run(loop.slots, run_slot, &loop, PoolLaunch::kAsAvailable)) {
      return body(closure, begin, end);  // the pool is busy: this thread does it all
    }
  } catch (const std::exception& e) {
    return sdk::make_error(KILN_ERROR_RUNTIME, "parallel_for: cannot start the cpu plugin's " +
                                                   std::to_string(pool->size() - 1) +
                                                   " worker threads: " + e.what());
  }
  return loop.first.load();
}

}  // namespace kiln::cpu
