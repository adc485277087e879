// SPDX-License-Identifier: Apache-2.0
// The floor of the call-overhead benchmarks: the fastest of several placements of one loop.
//
// A tight loop of indirect calls runs faster or slower by up to ~0.4 ns per call depending on
// where the linker happens to put it (the same three-instruction `call *%rbp; sub; jne` loop took
// 1.67 ns per call in one link of kiln_bench_calls and 1.24 ns in a link of the same source with
// other cases added), so a floor from one placement measures code layout, not calls, and can
// land above the figure it is the floor of. Here each placement is its own 64-byte-aligned
// function with a different run of padding ahead of its loop; a batch is timed in every
// placement and the fastest counts. Same statements, same calls: the best this machine does for
// that loop.
#ifndef KILN_BENCH_FASTEST_LOOP_H_
#define KILN_BENCH_FASTEST_LOOP_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <utility>

namespace kiln_bench {

// `calls` runs of body(i), the loop placed after `Pad` bytes of padding. The body is taken by
// value so that what it captures stays in registers.
template <int Pad, typename Body>
[[gnu::noinline, gnu::aligned(64)]] void placed_loop(Body body, int64_t calls) {
  asm volatile(".rept %c0\n\tnop\n\t.endr" ::"i"(Pad));
  for (int64_t i = 0; i < calls; ++i) body(i);
}

template <int Pad, typename Body>
double batch_seconds(const Body& body, int64_t calls) {
  const auto start = std::chrono::steady_clock::now();
  placed_loop<Pad>(body, calls);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <typename Body, int... Pads>
double fastest_batch_seconds(const Body& body, int64_t calls, std::integer_sequence<int, Pads...>) {
  double best = std::numeric_limits<double>::infinity();
  ((best = std::min(best, batch_seconds<Pads>(body, calls))), ...);
  return best;
}

// Seconds of the fastest of 8 placements (padding 0, 8, ..., 56 bytes) of a batch of `calls`
// calls of body(i), each batch between two reads of the steady clock.
template <typename Body>
double fastest_batch_seconds(const Body& body, int64_t calls) {
  return fastest_batch_seconds(body, calls,
                               std::integer_sequence<int, 0, 8, 16, 24, 32, 40, 48, 56>{});
}

}  // namespace kiln_bench

#endif  // KILN_BENCH_FASTEST_LOOP_H_
