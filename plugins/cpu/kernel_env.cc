#include "kernel_env.h"

#include <utility>

#include "kiln/sdk/plugin.hpp"
#include "parallel_for.h"

namespace kiln::cpu {

KernelEnv::KernelEnv(const KilnHostServices* host, tbb::task_arena* arena, int32_t num_threads,
                     std::string library_name)
    : host_(host),
      arena_(arena),
      num_threads_(num_threads),
      library_name_(std::move(library_name)) {
  env_ = sdk::make_table<KilnKernelEnv>();
  env_.ctx = this;
  env_.error_new = &KernelEnv::error_new;
  env_.error_free = &KernelEnv::error_free;
  env_.log = &KernelEnv::log;
  env_.parallel_for = &KernelEnv::parallel_for;
  env_.num_threads = num_threads;
}

KilnError* KernelEnv::error_new(void* ctx, int32_t code, const char* message) {
  const KilnHostServices* host = static_cast<KernelEnv*>(ctx)->host_;
  return host->error_new(host->host_ctx, code, message);
}

void KernelEnv::error_free(void* ctx, KilnError* error) {
  if (error == nullptr) return;
  const KilnHostServices* host = static_cast<KernelEnv*>(ctx)->host_;
  host->error_free(host->host_ctx, error);
}

void KernelEnv::log(void* ctx, int32_t level, const char* message) {
  const auto* self = static_cast<KernelEnv*>(ctx);
  const KilnHostServices* host = self->host_;
  if (host->log == nullptr) return;
  if (host->log_enabled != nullptr && !host->log_enabled(host->host_ctx, level)) return;
  // Formatting may throw std::bad_alloc; a log line is not worth crossing the ABI for.
  try {
    const std::string line = self->library_name_ + ": " + (message != nullptr ? message : "");
    host->log(host->host_ctx, level, sdk::plugin_name().c_str(), line.c_str());
  } catch (...) {
  }
}

KilnError* KernelEnv::parallel_for(void* ctx, int64_t begin, int64_t end, int64_t grain,
                                   KilnParallelBody body, void* closure) {
  const auto* self = static_cast<KernelEnv*>(ctx);
  return run_parallel_for(self->arena_, self->num_threads_, self->host_, begin, end, grain, body,
                          closure);
}

}  // namespace kiln::cpu
