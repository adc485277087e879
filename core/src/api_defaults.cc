// SPDX-License-Identifier: Apache-2.0
// The API-edge defaults: every convenience overload that takes no Runtime, in one place. Each
// forwards to its explicit form with Runtime::global(), the process-wide runtime made with
// default options on first use. Library code never calls these (nor Runtime::global()); it
// passes the Runtime (or DeviceContext) its caller gave it.
#include "kiln/detail/run_config.h"
#include "kiln/evaluator.h"
#include "kiln/module.h"
#include "kiln/profiling/collector.h"
#include "kiln/profiling/profiler.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
#include "kiln/testing.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln {

Runtime& Runtime::global() {
  // Never destroyed: plugins stay loaded until the process exits, so objects in other
  // statics can still use them during exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Tensor Tensor::empty(std::vector<int64_t> shape, DataType dtype, Device device) {
  return empty(std::move(shape), dtype, device, Runtime::global());
}

Tensor Tensor::to(Device device) const { return to(device, Runtime::global()); }

Module Module::load(const std::filesystem::path& path) { return load(path, Runtime::global()); }

void Module::export_library(const std::filesystem::path& path, const std::string& exporter) const {
  export_library(path, exporter, Runtime::global());
}

TimeEvaluator::TimeEvaluator(Function f, Device device, TimeEvaluatorOptions options)
    : TimeEvaluator(std::move(f), device, std::move(options), Runtime::global()) {}

TimeEvaluator time_evaluator(const Module& module, const std::string& func_name, Device device,
                             int32_t number, int32_t repeat, int32_t min_repeat_ms,
                             int32_t limit_zero_time_iterations, int32_t cooldown_interval_ms,
                             int32_t repeats_to_cooldown, int64_t cache_flush_bytes,
                             const std::string& f_preproc) {
  TimeEvaluatorOptions o;
  o.number = number;
  o.repeat = repeat;
  o.min_repeat_ms = min_repeat_ms;
  o.limit_zero_time_iterations = limit_zero_time_iterations;
  o.cooldown_interval_ms = cooldown_interval_ms;
  o.repeats_to_cooldown = repeats_to_cooldown;
  o.cache_flush_bytes = cache_flush_bytes;
  o.f_preproc = f_preproc;
  return TimeEvaluator(module.get_function(func_name), device, std::move(o));
}

TimeEvaluator time_evaluator(Function f, Device device, TimeEvaluatorOptions options) {
  return TimeEvaluator(std::move(f), device, std::move(options));
}

}  // namespace kiln

namespace kiln::run {

RunSpec parse_run_config(const std::filesystem::path& path) {
  return parse_run_config(path, Runtime::global().device_types());
}

}  // namespace kiln::run

namespace kiln::vm {

VirtualMachine::VirtualMachine(Executable exec, std::vector<Module> kernel_libraries,
                               std::vector<Device> devices, MemoryConfig memory_cfg, bool profile)
    : VirtualMachine(std::move(exec), std::move(kernel_libraries), std::move(devices),
                     Runtime::global(), std::move(memory_cfg), profile) {}

Module make_executable_module(Executable exec, std::vector<Module> kernel_libraries,
                              const std::string& name) {
  return make_executable_module(std::move(exec), std::move(kernel_libraries), name,
                                Runtime::global());
}

}  // namespace kiln::vm

namespace kiln::profiling {

Profiler::Profiler(std::vector<Device> devices,
                   std::vector<std::shared_ptr<MetricCollector>> collectors,
                   MetricMap configuration)
    : Profiler(std::move(devices), std::move(collectors), std::move(configuration),
               Runtime::global()) {}

std::shared_ptr<MetricCollector> plugin_collector(const std::string& name) {
  return plugin_collector(name, Runtime::global());
}

}  // namespace kiln::profiling

namespace kiln::rpc {

RPCSession connect(const std::string& host, int port, const ConnectOptions& options) {
  return connect(host, port, options, Runtime::global());
}

RPCSession connect(const std::string& host, int port, const std::string& key,
                   double session_timeout_s) {
  ConnectOptions options;
  options.key = key;
  options.session_timeout_s = session_timeout_s;
  return connect(host, port, options, Runtime::global());
}

RPCSession TrackerSession::request(const std::string& key, int priority, double session_timeout_s,
                                   int max_retry, std::optional<std::chrono::milliseconds> wait,
                                   const std::string& token) {
  return request(Runtime::global(), key, priority, session_timeout_s, max_retry, wait, token);
}

RPCSession RPCConfig::connect_server() const { return connect_server(Runtime::global()); }

Server::Server(ServerOptions options) : Server(std::move(options), Runtime::global()) {}

}  // namespace kiln::rpc

namespace kiln::testing {

RunResult local_run(const Module& mod, const std::string& device_type, const std::vector<Any>& args,
                    const std::optional<EvaluatorConfig>& evaluator_config,
                    const ExportFunc& export_func, const std::optional<std::string>& output_format,
                    const RunHooks& hooks) {
  return local_run(Runtime::global(), mod, device_type, args, evaluator_config, export_func,
                   output_format, hooks);
}

RunResult rpc_run(const Module& mod, const std::string& device_type, const std::vector<Any>& args,
                  const std::optional<EvaluatorConfig>& evaluator_config,
                  const std::optional<rpc::RPCConfig>& rpc_config, const ExportFunc& export_func,
                  const std::optional<std::string>& output_format, const RunHooks& hooks) {
  return rpc_run(Runtime::global(), mod, device_type, args, evaluator_config, rpc_config,
                 export_func, output_format, hooks);
}

}  // namespace kiln::testing
