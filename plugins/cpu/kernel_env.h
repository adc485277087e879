// The environment a loaded kernel library gets: errors, logging and a parallel-for.
#ifndef KILN_PLUGINS_CPU_KERNEL_ENV_H_
#define KILN_PLUGINS_CPU_KERNEL_ENV_H_

#include <oneapi/tbb/task_arena.h>

#include <cstdint>
#include <string>

#include "kiln/c/host.h"
#include "kiln/c/kernel.h"

namespace kiln::cpu {

// Owns the KilnKernelEnv handed to kiln_kernel_library(). Errors and log lines are forwarded
// to the host services; parallel_for runs in the plugin's task arena. Must outlive every use
// by the library, i.e. be destroyed only after the library is dlclose()d (KernelLibrary
// ensures that). Not copyable or movable: the library keeps the address of get().
class KernelEnv {
 public:
  // `host` and `arena` are borrowed from the plugin state and outlive this object (arena may
  // be NULL: serial loops); `library_name` prefixes the library's log lines.
  KernelEnv(const KilnHostServices* host, tbb::task_arena* arena, int32_t num_threads,
            std::string library_name);
  KernelEnv(const KernelEnv&) = delete;
  KernelEnv& operator=(const KernelEnv&) = delete;

  // The C view; valid as long as this object.
  const KilnKernelEnv* get() const { return &env_; }

 private:
  // The KilnKernelEnv slots; `ctx` is this object.
  // Forwards to the host's error_new: the result is a host error owned by the caller.
  static KilnError* error_new(void* ctx, int32_t code, const char* message);
  // Forwards to the host's error_free; NULL is a no-op.
  static void error_free(void* ctx, KilnError* error);
  // Logs `message` (borrowed) through the host as "<library>: message"; drops it when the
  // host does not print `level`.
  static void log(void* ctx, int32_t level, const char* message);
  // See run_parallel_for() in parallel_for.h.
  static KilnError* parallel_for(void* ctx, int64_t begin, int64_t end, int64_t grain,
                                 KilnParallelBody body, void* closure);

  const KilnHostServices* host_;
  tbb::task_arena* arena_;
  int32_t num_threads_;
  std::string library_name_;
  KilnKernelEnv env_;
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_KERNEL_ENV_H_
