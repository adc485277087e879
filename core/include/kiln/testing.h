// SPDX-License-Identifier: Apache-2.0
// kiln::testing: run a module on a device, local or remote, and get its outputs and timing
// (SPEC.md §1.8-1.10).
#ifndef KILN_TESTING_H_
#define KILN_TESTING_H_

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/any.h"
#include "kiln/evaluator.h"
#include "kiln/module.h"
#include "kiln/rpc/rpc_config.h"

namespace kiln {
class Runtime;
}  // namespace kiln

namespace kiln::testing {

// A custom exporter: writes `module` to `path`.
using ExportFunction = std::function<void(const Module& module, const std::string& path)>;

// How local_run exports: an exporter name ("tar", "ndk", "so", or any loaded exporter) or a
// custom callable (which needs an explicit output_format).
using ExportFunc = std::variant<std::string, ExportFunction>;

struct ExportPlan {
  ExportFunc exporter;
  std::string output_format;  // file extension of the artifact
};

// The reference's normalisation: "tar" -> format "tar"; "ndk" and "so" -> "so"; another name
// that an exporter of `runtime` has -> its output format; a callable needs `output_format`, else
// ValueError("output_format must be specified if `export_func` is callable"); an unknown name
// is ValueError("Unsupported export_func: <name>").
ExportPlan normalize_export_func(const ExportFunc& export_func,
                                 const std::optional<std::string>& output_format,
                                 const Runtime& runtime);

// What local_run returns: the arguments after the final call (tensors as host tensors, other
// values unchanged) and the timing of the entry function.
struct RunResult {
  std::vector<Any> outputs;
  BenchmarkResult profile;
  // What the final call returned (none for a kernel), tensors copied to the host, tuples
  // (vm::ArrayObj) as host tuples of the same shape. rpc_run keeps tensors and scalars only:
  // other values stay on the server (none here).
  Any result;
  // rpc_run: the server that measured ("host:port"); empty for a local run.
  std::string server;
};

// Hooks for progress reporting and the run's settings beyond the reference's. All optional.
struct RunHooks {
  // Called with a step name ("export", "load", "upload", "time", "call", "download") and its
  // wall time in seconds once the step is done.
  std::function<void(const std::string& step, double seconds)> on_step;
  // Passed to the evaluator (repeats done, total).
  std::function<void(int32_t, int32_t)> on_repeat;
  // The function to time and call (default: the module's entry function).
  std::string function;
  // Evaluator options beyond EvaluatorConfig (noise rule, raw samples); number, repeat,
  // min_repeat_ms and f_preproc still come from the EvaluatorConfig.
  std::optional<TimeEvaluatorOptions> evaluator;
  // The device index to run on; unset: 0, as the reference (`kiln run` passes the one its
  // config names, after checking that the backend has it).
  std::optional<int32_t> device_index;
};

// Exports `mod` into a fresh temporary directory, loads it back, copies `args` to
// device_type:0 (host Tensors and Tensors are copied, int64 / double / bool pass through,
// anything else is ValueError("Unsupported input type: <type>")), times the entry function
// with `evaluator_config`, calls it once more, copies tensor arguments back to the host, and
// removes the temporary directory, also when a step throws. `device_type` is a device name
// such as "cpu" or "opencl", optionally with ":<index>" (ignored: device 0 is used, as in the
// reference). Everything goes through `runtime`: its exporters, loaders and devices.
RunResult local_run(Runtime& runtime, const Module& mod, const std::string& device_type,
                    const std::vector<Any>& args,
                    const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                    const ExportFunc& export_func = std::string("tar"),
                    const std::optional<std::string>& output_format = std::nullopt,
                    const RunHooks& hooks = {});
// API-edge default: local_run(Runtime::global(), mod, ...), the reference's signature.
RunResult local_run(const Module& mod, const std::string& device_type, const std::vector<Any>& args,
                    const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                    const ExportFunc& export_func = std::string("tar"),
                    const std::optional<std::string>& output_format = std::nullopt,
                    const RunHooks& hooks = {});

// local_run on a remote device (SPEC.md §1.10): normalises the configs (ValueError before
// any network access for missing tracker settings), connects through the tracker
// (rpc_config.connect_server()), exports `mod` locally, uploads the artifact as
// "kiln_tmp_mod.<format>", copies `args` to device_type:0 of the session, loads the module
// remotely, runs the time evaluator on the server, calls the function once more and
// downloads the tensor arguments. Whatever happens after the export, it then removes, in the
// reference's order, "kiln_tmp_mod.<format>", "kiln_tmp_mod.<format>.<format>", "" (a
// no-op), and also "kiln_tmp_mod.<format>.so", and releases every remote object (the loaded
// module included) before it closes the session. hooks.on_repeat is not forwarded (the
// measurement runs remotely); steps are "connect", "export", "upload_module" (the artifact),
// "upload" (the arguments), "load", "time", "call", "download", "cleanup". Exports, local
// copies and the session's remote devices go through `runtime`.
RunResult rpc_run(Runtime& runtime, const Module& mod, const std::string& device_type,
                  const std::vector<Any>& args,
                  const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                  const std::optional<rpc::RPCConfig>& rpc_config = std::nullopt,
                  const ExportFunc& export_func = std::string("tar"),
                  const std::optional<std::string>& output_format = std::nullopt,
                  const RunHooks& hooks = {});
// API-edge default: rpc_run(Runtime::global(), mod, ...), the reference's signature.
RunResult rpc_run(const Module& mod, const std::string& device_type, const std::vector<Any>& args,
                  const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                  const std::optional<rpc::RPCConfig>& rpc_config = std::nullopt,
                  const ExportFunc& export_func = std::string("tar"),
                  const std::optional<std::string>& output_format = std::nullopt,
                  const RunHooks& hooks = {});

}  // namespace kiln::testing

#endif  // KILN_TESTING_H_
