// SPDX-License-Identifier: Apache-2.0
// RemoteVirtualMachine: the VM module's functions on the server, called through the session.
#include "kiln/rpc/remote_vm.h"

#include <fmt/format.h>

#include <utility>

#include "kiln/error.h"

namespace kiln::rpc {
namespace {

std::vector<Any> with_prefix(std::vector<Any> prefix, const std::vector<Any>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

std::vector<Any> name_and_index(const std::string& func, const std::vector<int64_t>& index) {
  std::vector<Any> args{Any(func)};
  for (int64_t i : index) args.emplace_back(i);
  return args;
}

}  // namespace

RemoteVirtualMachine::RemoteVirtualMachine(const RemoteModule& exec, std::vector<Device> devices,
                                           const vm::MemoryConfig& memory_cfg, bool profile)
    : devices_(std::move(devices)) {
  if (devices_.empty()) throw ValueError("RemoteVirtualMachine: the device list is empty");
  const RPCSession session = exec.session();
  for (const Device& d : devices_) {
    if (!d.is_remote() || d.session_index() != session.index()) {
      throw ValueError(fmt::format(
          "RemoteVirtualMachine: {} is not a device of the executable's RPC session ({})", d.str(),
          session.peer()));
    }
  }
  // The host is always the last device (§2.8), here the server's.
  if (devices_.back().server_device().type != kDLCPU) devices_.push_back(session.cpu(0));
  const Any vm_module =
      exec.get_function(profile ? "vm_profiler_load_executable" : "vm_load_executable")();
  module_ = RemoteModule::from_value(vm_module);
  std::vector<Any> init;
  for (const Device& d : devices_) {
    const Device on_server = d.server_device();
    init.emplace_back(static_cast<int64_t>(on_server.type));
    init.emplace_back(static_cast<int64_t>(on_server.id));
    init.emplace_back(static_cast<int64_t>(memory_cfg.kind_for(d)));
  }
  module_.get_function("vm_initialization").call_packed(init);
}

void RemoteVirtualMachine::save_function(const std::string& func, const std::string& saved_name,
                                         const std::vector<Any>& args, bool include_return) const {
  get_function("save_function")
      .call_packed(with_prefix({Any(func), Any(saved_name), Any(include_return)}, args));
}

void RemoteVirtualMachine::set_input(const std::string& func, const std::vector<Any>& args) const {
  get_function("set_input").call_packed(with_prefix({Any(func)}, args));
}

void RemoteVirtualMachine::invoke_stateful(const std::string& func) const {
  get_function("invoke_stateful")(func);
}

Any RemoteVirtualMachine::get_output(const std::string& func,
                                     const std::vector<int64_t>& index) const {
  return get_function("get_output").call_packed(name_and_index(func, index));
}

int64_t RemoteVirtualMachine::get_output_arity(const std::string& func,
                                               const std::vector<int64_t>& index) const {
  return get_function("get_output_arity").call_packed(name_and_index(func, index)).cast<int64_t>();
}

RemoteTimeEvaluator RemoteVirtualMachine::time_evaluator(const std::string& name, Device device,
                                                         TimeEvaluatorOptions options) const {
  return module_.time_evaluator(name, device, std::move(options));
}

profiling::Report RemoteVirtualMachine::profile(const std::string& func,
                                                const std::vector<Any>& args) const {
  const Any json = get_function("profile").call_packed(with_prefix({Any(func)}, args));
  return profiling::Report::from_json(json.cast<std::string>());
}

}  // namespace kiln::rpc
