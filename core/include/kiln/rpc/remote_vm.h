// SPDX-License-Identifier: Apache-2.0
// A VirtualMachine on an RPC server (SPEC.md §2.8 over a session, §2.13, §2.14, §3.10 item 10).
//
//   kiln::rpc::RemoteModule exec = session.load_module("mlp.kvm");
//   kiln::rpc::RemoteVirtualMachine vm(exec, {session.cpu()});
//   vm.set_input("main", {x, w, b});          // remote tensors of the session
//   vm.invoke_stateful("main");
//   kiln::Any y = vm.get_output("main");      // a remote tensor
//
// Made as the reference's Python VirtualMachine makes one: the executable's
// vm_load_executable() (vm_profiler_load_executable() when profiling) on the server, then
// vm_initialization with each device's type, index and allocator. Everything then runs on the
// server; only arguments and results cross the wire.
#ifndef KILN_RPC_REMOTE_VM_H_
#define KILN_RPC_REMOTE_VM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/profiling/report.h"
#include "kiln/rpc/session.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::rpc {

class RemoteVirtualMachine {
 public:
  // Makes a VM for the remote executable module `exec` (RPCSession::load_module of a .kvm,
  // .kvmt, VM package or TVM Relax library) on `devices`, which must be devices of exec's
  // session; the session's cpu(0) is appended unless the last device is a CPU (SPEC §2.8).
  // `memory_cfg` is looked up with the devices as given. `profile` enables profile(). Throws
  // ValueError for an empty list or a device of another session or a local one, and the
  // server's error (RPCError) for a device it does not have or an executable function it
  // cannot resolve.
  RemoteVirtualMachine(const RemoteModule& exec, std::vector<Device> devices,
                       const vm::MemoryConfig& memory_cfg = {}, bool profile = false);

  // The VM module's function `name` on the server: a VM function, a saved function, or one of
  // the fixed names of SPEC §2.6. RPCError when there is none.
  Function get_function(const std::string& name) const { return module_.get_function(name); }
  Function operator[](const std::string& name) const { return get_function(name); }

  // As VirtualMachine's (arguments: remote tensors of the session, scalars, strings).
  void save_function(const std::string& func, const std::string& saved_name,
                     const std::vector<Any>& args, bool include_return = true) const;
  void set_input(const std::string& func, const std::vector<Any>& args) const;
  void invoke_stateful(const std::string& func) const;
  // A value inside the saved output (a remote tensor, a scalar; a tuple is a remote object:
  // index further, get_output_arity gives its size).
  Any get_output(const std::string& func, const std::vector<int64_t>& index = {}) const;
  int64_t get_output_arity(const std::string& func, const std::vector<int64_t>& index = {}) const;
  // A time evaluator over `name` run on the server; `device` is a device of the session.
  RemoteTimeEvaluator time_evaluator(const std::string& name, Device device,
                                     TimeEvaluatorOptions options = {}) const;
  // Profiles one call on the server (after a warm-up) and returns its report. Needs a VM made
  // with profile = true (RPCError otherwise).
  profiling::Report profile(const std::string& func, const std::vector<Any>& args) const;

  // The VM module on the server (its function table, SPEC §2.6).
  const RemoteModule& module() const { return module_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  RemoteModule module_;
  std::vector<Device> devices_;
};

}  // namespace kiln::rpc

#endif  // KILN_RPC_REMOTE_VM_H_
