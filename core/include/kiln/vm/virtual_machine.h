// SPDX-License-Identifier: Apache-2.0
// VirtualMachine: runs a VM executable (SPEC.md §2.3–§2.14; docs/vm.md "Running programs").
//
//   kiln::Module exec = kiln::load_module("mlp.kvm");     // or vm::load_executable_module
//   kiln::vm::VirtualMachine vm(exec, {kiln::Device::cpu()});
//   kiln::Any y = vm["main"](x, w0, b0);
//
// Values the VM handles beyond the ABI's (tuples, closures, storages) are host objects held in
// an Any of type kTypeObject: vm::ArrayObj, vm::ClosureObj, vm::StorageObj.
#ifndef KILN_VM_VIRTUAL_MACHINE_H_
#define KILN_VM_VIRTUAL_MACHINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_context.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/module.h"
#include "kiln/profiling/profiler.h"
#include "kiln/profiling/report.h"
#include "kiln/vm/executable.h"

namespace kiln::vm {

// How deeply the VM lets its values nest (tuples in tuples, closures capturing tuples or
// wrapping closures): a program looping over make_tuple or make_closure would otherwise build
// a chain whose release, or any walk over it, recurses past the stack.
inline constexpr int kMaxValueNesting = 256;
// The nesting depth of `v`: 1 + the deepest value inside for a tuple or a closure, else 0.
int nesting_depth(const Any& v);

// A tuple of values (what make_tuple builds and functions return for tuples).
class ArrayObj : public Object {
 public:
  explicit ArrayObj(std::vector<Any> items);
  const char* type_key() const override { return "vm.Array"; }
  std::vector<Any> items;
  int depth = 1;  // nesting_depth() at construction (items may only be reset to none since)
};
// Wraps `items` as an Any holding an ArrayObj. ValueError when it would nest deeper than
// kMaxValueNesting.
Any make_array(std::vector<Any> items);

// A callable VM value: `impl` takes the VM context (an opaque pointer) first, then the call's
// arguments (SPEC §2.4). `func_name` names the VM function it came from. A closure made from
// another (make_closure, save_function) also shows what `impl` keeps alive beyond code, for
// owners that are charged for that memory (an RPC session): `captured`, the values it appends
// to a call's arguments, and `wrapped`, the closure it then calls (none for a VM function).
class ClosureObj : public Object {
 public:
  ClosureObj(std::string func_name, Function impl, std::vector<Any> captured = {},
             Any wrapped = Any());
  const char* type_key() const override { return "vm.Closure"; }
  std::string func_name;
  Function impl;
  std::vector<Any> captured;
  Any wrapped;
  int depth = 1;  // nesting_depth()
};

// Device memory from a VM allocator, viewed by tensors made with alloc_tensor.
class StorageObj : public Object {
 public:
  const char* type_key() const override { return "vm.Storage"; }
  virtual Device device() const = 0;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  // The backend whose memory this is (copies of tensors in it go through it).
  virtual Ref<DeviceBackend> backend() const = 0;
};

// How each device of a VM allocates: "naive" (every allocation from the device) or "pooled"
// (page-rounded blocks kept per size and reused; the default, as in the reference).
class MemoryConfig {
 public:
  enum class Kind { kNaive = 1, kPooled = 2 };
  MemoryConfig() = default;
  // "naive" or "pooled" for every device; anything else is a ValueError.
  MemoryConfig(const char* kind);         // NOLINT: implicit, as in vm(exec, devs, "naive")
  MemoryConfig(const std::string& kind);  // NOLINT
  // Per device; devices not listed use "pooled". Values as above.
  MemoryConfig(std::vector<std::pair<Device, std::string>> per_device);  // NOLINT
  Kind kind_for(Device device) const;

 private:
  Kind all_ = Kind::kPooled;
  std::vector<std::pair<Device, Kind>> per_device_;
};

// The return kinds of an instrument (SPEC §2.12).
enum class InstrumentReturn : int64_t { kNoOp = 0, kSkipRun = 1 };

class VirtualMachineImpl;

class VirtualMachine {
 public:
  // Makes a VM for the executable module `exec` (kind kExecutableModuleKind: what loading a
  // .kvm file or a VM package gives) on `devices` of the DeviceContext (Runtime) the module was
  // made with; the host CPU is appended unless the last device is a CPU (SPEC §2.8). Tensor
  // constants are copied to devices[0]. `profile` enables profile(). Throws ValueError for an
  // empty device list, an executable function that cannot be resolved ("Cannot find function
  // <name> in the VM's kernel libraries or the global registry"), and NotFoundError for a
  // device no backend serves.
  VirtualMachine(const Module& exec, std::vector<Device> devices, MemoryConfig memory_cfg = {},
                 bool profile = false);
  // The same from an Executable and the modules its PackedFunc entries resolve against, on
  // devices of `context` (which the VM keeps alive).
  VirtualMachine(Executable exec, std::vector<Module> kernel_libraries, std::vector<Device> devices,
                 const DeviceContext& context, MemoryConfig memory_cfg = {}, bool profile = false);
  // API-edge default: the same on devices of Runtime::global().
  VirtualMachine(Executable exec, std::vector<Module> kernel_libraries, std::vector<Device> devices,
                 MemoryConfig memory_cfg = {}, bool profile = false);
  ~VirtualMachine();
  VirtualMachine(const VirtualMachine&) = default;
  VirtualMachine& operator=(const VirtualMachine&) = default;

  // The callable for `name`: a function saved with save_function, else a VM function (its
  // arguments are passed as they are). NotFoundError "Unknown function: <name>" otherwise.
  Function get_function(const std::string& name) const;
  Function operator[](const std::string& name) const { return get_function(name); }
  bool has_function(const std::string& name) const;
  // The names given to save_function so far, sorted.
  std::vector<std::string> saved_function_names() const;

  // Calls a closure (or a plain function) with `args` (SPEC §2.4).
  Any invoke_closure(const Any& closure, const std::vector<Any>& args) const;
  // Binds `args` (converted to devices[0], §2.9) after the arguments of `func` and saves the
  // result as `saved_name`; with include_return false the saved function returns none.
  void save_function(const std::string& func, const std::string& saved_name,
                     const std::vector<Any>& args, bool include_return = true);

  // The stateful API (§2.11). set_input: ValueError "Unknown function: <f>" or TypeError
  // on a count mismatch; invoke_stateful: ValueError when no inputs were set; get_output(s):
  // ValueError before invoke_stateful, IndexError for a bad index.
  void set_input(const std::string& func, const std::vector<Any>& args);
  void invoke_stateful(const std::string& func);
  // The saved output of `func`; tuples come back as ArrayObj values (nested).
  Any get_outputs(const std::string& func) const;
  int64_t get_output_arity(const std::string& func, const std::vector<int64_t>& index) const;
  Any get_output(const std::string& func, const std::vector<int64_t>& index) const;

  // Wraps every Call instruction (§2.12): `f(func, name, before, ret, args...)`; a before-call
  // returning 1 (kSkipRun) skips the call. A null Function removes the instrument.
  void set_instrument(Function f);

  // A time evaluator over the VM function or saved function `name` (§2.13); call it like the
  // function. `options` as for Module time evaluators.
  TimeEvaluator time_evaluator(const std::string& name, Device device,
                               TimeEvaluatorOptions options = {}) const;
  // Profiles one call of `func` after one warm-up (§2.14); `args` as set_input (empty: the
  // inputs given to set_input). Needs a VM made with profile = true.
  profiling::Report profile(const std::string& func, const std::vector<Any>& args);
  // Records every Call instruction with tensor arguments into `profiler` (borrowed, started by
  // the caller) as profile() does, until set_profiler(nullptr): for callers that profile
  // several calls or add their own rows around them (kiln profile). Works without profile = true.
  void set_profiler(profiling::Profiler* profiler);

  // The VM as a module with the function table of §2.6 (set_input, invoke_stateful,
  // get_output, save_function, invoke_closure, set_instrument, profile, ... and every VM
  // function), for callers that speak packed functions (kiln run, RPC).
  Module module() const;
  const std::vector<Device>& devices() const;
  const Executable& executable() const;

 private:
  std::shared_ptr<VirtualMachineImpl> impl_;
};

// The module kind of VM executables.
inline constexpr const char* kExecutableModuleKind = "vm.executable";
// Wraps `exec` as a module of kind kExecutableModuleKind importing `kernel_libraries`. Its
// functions: "stats", "as_text", "has_function", "vm_load_executable" and
// "vm_profiler_load_executable" (each returns a new VM module with no VM yet: its
// "vm_initialization(device_type, device_id, allocator_type, ...)" makes one, 1 = naive and
// 2 = pooled, after which it has module()'s functions; SPEC §2.1, §2.8: how RPC clients make
// a VM on a server), and each VM function, which runs in a VM on
// the device of its first tensor argument (CPU when none), created on first use. Its artifacts
// are the bytecode (role "bytecode", `<name>`) and the libraries' own artifacts, so exporting it
// with "tar" and loading the package gives the same module.
// Its VMs run on devices of `context`, which the module keeps alive.
Module make_executable_module(Executable exec, std::vector<Module> kernel_libraries,
                              const std::string& name, const DeviceContext& context);
// API-edge default: the same with Runtime::global().
Module make_executable_module(Executable exec, std::vector<Module> kernel_libraries,
                              const std::string& name = "program.kvm");
// The executable inside a module made by make_executable_module; null when `m` is not one.
const Executable* executable_of(const Module& m);

}  // namespace kiln::vm

#endif  // KILN_VM_VIRTUAL_MACHINE_H_
