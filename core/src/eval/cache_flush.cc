// cache_flush_cpu_non_first_arg (SPEC.md §1.4): flushes from every cache level the memory of
// every tensor argument except the first, approximating cold weights while the activation
// (first argument) stays warm. Registered as a global function for f_preproc.
#include <fmt/format.h>

#include <cstdint>

#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

void flush_range(const void* data, size_t nbytes) {
  if (data == nullptr || nbytes == 0) return;
#if defined(__x86_64__)
  constexpr uintptr_t kLine = 64;
  auto p = reinterpret_cast<uintptr_t>(data) & ~(kLine - 1);
  const auto end = reinterpret_cast<uintptr_t>(data) + nbytes;
  for (; p < end; p += kLine) _mm_clflush(reinterpret_cast<const void*>(p));
  _mm_mfence();  // the flushes complete before the timed calls start
#elif defined(__aarch64__)
  uint64_t ctr;
  asm volatile("mrs %0, ctr_el0" : "=r"(ctr));
  const uintptr_t line = uintptr_t{4} << ((ctr >> 16) & 15);
  auto p = reinterpret_cast<uintptr_t>(data) & ~(line - 1);
  const auto end = reinterpret_cast<uintptr_t>(data) + nbytes;
  for (; p < end; p += line) asm volatile("dc civac, %0" : : "r"(p) : "memory");
  asm volatile("dmb ishst" : : : "memory");
#else
  (void)data;
  (void)nbytes;  // no portable way: a no-op, as in the reference
#endif
}

Any cache_flush_cpu_non_first_arg(const Any* args, int32_t num_args) {
  for (int32_t i = 1; i < num_args; ++i) {
    if (args[i].type_code() != KILN_TYPE_TENSOR) {
      throw TypeError(
          fmt::format("cache_flush_cpu_non_first_arg: argument {} expects tensor, "
                      "got {}",
                      i, args[i].type_name()));
    }
    Tensor t = args[i].cast<Tensor>();
    // The element count times the element size, from data (byte_offset is ignored as in
    // the reference).
    flush_range(t.dl()->data, t.nbytes());
  }
  return Any();
}

const bool registered = [] {
  registry::set(
      "cache_flush_cpu_non_first_arg",
      Function::from_packed("cache_flush_cpu_non_first_arg", &cache_flush_cpu_non_first_arg), true);
  return true;
}();

}  // namespace
}  // namespace kiln
