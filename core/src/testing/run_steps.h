// SPDX-License-Identifier: Apache-2.0
// Pieces local_run and rpc_run share.
#ifndef KILN_SRC_TESTING_RUN_STEPS_H_
#define KILN_SRC_TESTING_RUN_STEPS_H_

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kiln/any.h"
#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/module.h"
#include "kiln/rpc/session.h"
#include "kiln/testing.h"

namespace kiln::testing::detail {

// Runs one step and reports its wall time to the on_step hook.
template <typename Body>
auto step(const RunHooks& hooks, const char* name, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  const auto report = [&] {
    if (hooks.on_step) {
      hooks.on_step(
          name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  if constexpr (std::is_void_v<decltype(body())>) {
    body();
    report();
  } else {
    auto result = body();
    report();
    return result;
  }
}

// Tensors, ints, floats and bools are the arguments a runner accepts (SPEC.md §1.8).
inline void check_run_args(const std::vector<Any>& args) {
  for (const Any& a : args) {
    const int32_t code = a.type_code();
    if (code != KILN_TYPE_TENSOR && code != KILN_TYPE_INT && code != KILN_TYPE_FLOAT &&
        code != KILN_TYPE_BOOL) {
      throw ValueError(fmt::format("Unsupported input type: {}", a.type_name()));
    }
  }
}

// The evaluator options of a run: the hooks' options with number, repeat, min_repeat_ms and
// f_preproc from the runner's config.
inline TimeEvaluatorOptions run_evaluator_options(const EvaluatorConfig& config,
                                                  const RunHooks& hooks) {
  TimeEvaluatorOptions options = hooks.evaluator ? *hooks.evaluator : TimeEvaluatorOptions{};
  const TimeEvaluatorOptions from_config = config.to_options();
  options.number = from_config.number;
  options.repeat = from_config.repeat;
  options.min_repeat_ms = from_config.min_repeat_ms;
  // The config's cache flush (enable_cpu_cache_flush), else the hooks' own f_preproc (a run
  // config's `evaluator: {f_preproc: ...}`).
  if (!from_config.f_preproc.empty()) options.f_preproc = from_config.f_preproc;
  if (hooks.on_repeat) options.on_repeat = hooks.on_repeat;
  options.validate();
  return options;
}

// Copies of the tensor arguments on `device` of `context` (always copies); other values as
// they are.
std::vector<Any> args_to_device(const std::vector<Any>& args, Device device,
                                const DeviceContext& context);
// Host copies of the tensor arguments; other values as they are.
std::vector<Any> args_to_host(const std::vector<Any>& args);
// A returned value with its tensors on the host, also inside (nested) vm::ArrayObj tuples.
Any result_to_host(const Any& value);

// Writes `mod` to `artifact` with `plan`'s exporter: its callable, or the exporter it names
// (through `runtime`'s exporters).
inline void export_module(const ExportPlan& plan, const Module& mod,
                          const std::filesystem::path& artifact, const Runtime& runtime) {
  if (const auto* f = std::get_if<ExportFunction>(&plan.exporter)) {
    (*f)(mod, artifact.string());
  } else {
    mod.export_library(artifact, std::get<std::string>(plan.exporter), runtime);
  }
}

// rpc_run's step 6 on an open session: uploads `artifact` as `remote_path`, copies `args` to
// `device` (a device of the session) through `context`, loads the module, times the function
// (hooks.function, else the entry) with `options`, calls it once more and downloads the
// tensor arguments. Remote objects are released on return; the file stays for the caller to
// remove. Throws what the session or the server throws.
RunResult run_in_session(const rpc::RPCSession& session, Device device,
                         const std::filesystem::path& artifact, const std::string& remote_path,
                         const std::vector<Any>& args, const TimeEvaluatorOptions& options,
                         const RunHooks& hooks, const DeviceContext& context);

}  // namespace kiln::testing::detail

#endif  // KILN_SRC_TESTING_RUN_STEPS_H_
