// SPDX-License-Identifier: Apache-2.0
// kiln::testing::rpc_run (SPEC.md §1.10).
#include <fmt/format.h>

#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/rpc/session.h"
#include "kiln/runtime.h"
#include "kiln/temp_dir.h"
#include "kiln/tensor.h"
#include "kiln/testing.h"
#include "testing/run_steps.h"

namespace kiln::testing {

using detail::step;

namespace detail {

RunResult run_in_session(const rpc::RPCSession& session, Device device,
                         const std::filesystem::path& artifact, const std::string& remote_path,
                         const std::vector<Any>& args, const TimeEvaluatorOptions& options,
                         const RunHooks& hooks, const DeviceContext& context) {
  RunResult result;
  // 6. Remote objects live in this scope only, so they are released before the caller's
  // cleanup removes the files.
  step(hooks, "upload_module", [&] { session.upload(artifact, remote_path); });
  std::vector<Any> device_args =
      step(hooks, "upload", [&] { return args_to_device(args, device, context); });
  rpc::RemoteModule remote_mod =
      step(hooks, "load", [&] { return session.load_module(remote_path); });
  const std::string function = hooks.function.empty() ? remote_mod.entry_name() : hooks.function;
  if (function.empty()) {
    throw NotFoundError("rpc_run: the module has no entry function; name one");
  }
  result.profile = step(hooks, "time", [&] {
    return remote_mod.time_evaluator(function, device, options)(device_args);
  });
  Any returned;
  step(hooks, "call",
       [&] { returned = remote_mod.get_function(function).call_packed(device_args); });
  result.outputs = step(hooks, "download", [&] { return args_to_host(device_args); });
  // Tensors and scalars come back; anything else (a remote tuple) stays on the server.
  const int32_t code = returned.type_code();
  if (code == KILN_TYPE_TENSOR || code == KILN_TYPE_INT || code == KILN_TYPE_FLOAT ||
      code == KILN_TYPE_BOOL) {
    result.result = result_to_host(returned);
  }
  return result;
}

}  // namespace detail

RunResult rpc_run(Runtime& runtime, const Module& mod, const std::string& device_type,
                  const std::vector<Any>& args,
                  const std::optional<EvaluatorConfig>& evaluator_config,
                  const std::optional<rpc::RPCConfig>& rpc_config, const ExportFunc& export_func,
                  const std::optional<std::string>& output_format, const RunHooks& hooks) {
  // 1. Everything that can be checked before any network access.
  const EvaluatorConfig config = EvaluatorConfig::normalized(evaluator_config);
  const rpc::RPCConfig rpc = rpc::RPCConfig::normalized(rpc_config);
  const ExportPlan plan = normalize_export_func(export_func, output_format, runtime);
  detail::check_run_args(args);
  TimeEvaluatorOptions options = detail::run_evaluator_options(config, hooks);
  options.on_repeat = nullptr;  // the loop runs on the server
  const Device local_device = runtime.parse_device(device_type);

  // 2.
  const TemporaryDirectory temp("kiln_rpc_run_");
  const std::string remote_path = "kiln_tmp_mod." + plan.output_format;
  const std::filesystem::path artifact = temp.path() / remote_path;

  // 3-4.
  rpc::RPCSession session = step(hooks, "connect", [&] { return rpc.connect_server(runtime); });
  const Device device = session.device(local_device.type, hooks.device_index.value_or(0));

  // 5. Outside the cleanup: a failed export has left nothing remote.
  step(hooks, "export", [&] { detail::export_module(plan, mod, artifact, runtime); });

  RunResult result;
  std::exception_ptr failure;
  try {
    result = detail::run_in_session(session, device, artifact, remote_path, args, options, hooks,
                                    runtime);
    result.server = session.peer();
  } catch (...) {
    failure = std::current_exception();
  }

  // 7. The reference's three removals in its order, then the linked library it leaves.
  step(hooks, "cleanup", [&] {
    for (const std::string& path : {remote_path, remote_path + "." + plan.output_format,
                                    std::string(), remote_path + ".so"}) {
      try {
        session.remove(path);
      } catch (const std::exception& e) {
        log(LogLevel::kDebug, "rpc_run", fmt::format("remove('{}'): {}", path, e.what()));
      }
    }
    session.close();
  });
  if (failure) std::rethrow_exception(failure);
  // 8. The local temporary directory goes with `temp`.
  return result;
}

}  // namespace kiln::testing
