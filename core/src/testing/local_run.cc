// SPDX-License-Identifier: Apache-2.0
// kiln::testing::local_run (SPEC.md §1.8-1.9).
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/temp_dir.h"
#include "kiln/tensor.h"
#include "kiln/testing.h"
#include "kiln/vm/virtual_machine.h"
#include "testing/run_steps.h"

namespace kiln::testing {
namespace fs = std::filesystem;
using detail::step;

namespace detail {

std::vector<Any> args_to_device(const std::vector<Any>& args, Device device,
                                const DeviceContext& context) {
  std::vector<Any> out;
  out.reserve(args.size());
  for (const Any& a : args) {
    if (a.type_code() == KILN_TYPE_TENSOR) {
      Tensor src = a.cast<Tensor>();
      Tensor dst = Tensor::empty(std::vector<int64_t>(src.shape().begin(), src.shape().end()),
                                 src.dtype(), device, context);
      dst.copy_from(src);
      out.emplace_back(dst);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

std::vector<Any> args_to_host(const std::vector<Any>& args) {
  std::vector<Any> out;
  out.reserve(args.size());
  for (const Any& a : args) {
    out.push_back(a.type_code() == KILN_TYPE_TENSOR ? Any(a.cast<Tensor>().to_host()) : a);
  }
  return out;
}

Any result_to_host(const Any& value) {
  if (value.type_code() == KILN_TYPE_TENSOR) return Any(value.cast<Tensor>().to_host());
  if (Ref<vm::ArrayObj> tuple = value.as_object<vm::ArrayObj>()) {
    std::vector<Any> items;
    items.reserve(tuple->items.size());
    for (const Any& item : tuple->items) items.push_back(result_to_host(item));
    return vm::make_array(std::move(items));
  }
  return value;
}

}  // namespace detail

ExportPlan normalize_export_func(const ExportFunc& export_func,
                                 const std::optional<std::string>& output_format,
                                 const Runtime& runtime) {
  if (const auto* f = std::get_if<ExportFunction>(&export_func)) {
    if (!*f) throw ValueError("export_func is an empty callable");
    if (!output_format || output_format->empty()) {
      throw ValueError("output_format must be specified if `export_func` is callable");
    }
    return {export_func, *output_format};
  }
  const std::string& name = std::get<std::string>(export_func);
  if (name == "tar") return {name, "tar"};
  if (name == "ndk" || name == "so") return {name, "so"};
  const auto names = runtime.exporter_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    return {name, runtime.exporter(name).first->output_format};
  }
  throw ValueError(fmt::format("Unsupported export_func: {}", name));
}

RunResult local_run(Runtime& runtime, const Module& mod, const std::string& device_type,
                    const std::vector<Any>& args,
                    const std::optional<EvaluatorConfig>& evaluator_config,
                    const ExportFunc& export_func, const std::optional<std::string>& output_format,
                    const RunHooks& hooks) {
  // 1. Everything that can be checked before any work.
  const EvaluatorConfig config = EvaluatorConfig::normalized(evaluator_config);
  const ExportPlan plan = normalize_export_func(export_func, output_format, runtime);
  Device device = runtime.parse_device(device_type);
  device.id = hooks.device_index.value_or(0);  // the reference ignores the index: 0
  detail::check_run_args(args);
  const TimeEvaluatorOptions options = detail::run_evaluator_options(config, hooks);

  // 2.
  const TemporaryDirectory temp("kiln_local_run_");
  const fs::path artifact = temp.path() / ("kiln_tmp_mod." + plan.output_format);

  // 3.
  step(hooks, "export", [&] { detail::export_module(plan, mod, artifact, runtime); });

  // 4-5. Arguments to the device: always copies.
  std::vector<Any> device_args =
      step(hooks, "upload", [&] { return detail::args_to_device(args, device, runtime); });

  // 6.
  Module loaded = step(hooks, "load", [&] { return runtime.load_module(artifact); });
  const std::string function = hooks.function.empty() ? loaded.entry_name() : hooks.function;
  if (function.empty()) {
    throw NotFoundError(fmt::format("local_run: the module has no entry function; name one"));
  }
  Function f = loaded.get_function(function);

  // 7.
  BenchmarkResult profile = step(hooks, "time", [&] {
    TimeEvaluator evaluator(f, device, options, runtime);
    return evaluator(device_args);
  });

  // 8. One more call: the outputs (and the return value) the caller sees.
  Any returned;
  step(hooks, "call", [&] { returned = f.call_packed(device_args); });

  // 9.
  std::vector<Any> outputs =
      step(hooks, "download", [&] { return detail::args_to_host(device_args); });
  Any result = detail::result_to_host(returned);
  // 10. The temporary directory goes with `temp`.
  return RunResult{std::move(outputs), std::move(profile), std::move(result), {}};
}

}  // namespace kiln::testing
