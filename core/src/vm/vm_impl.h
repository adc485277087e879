// SPDX-License-Identifier: Apache-2.0
// The VM's state and interpreter, shared by virtual_machine.cc (the public class and the
// dispatch loop) and builtins.cc (the builtins that take the VM context).
#ifndef KILN_CORE_VM_VM_IMPL_H_
#define KILN_CORE_VM_VM_IMPL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/device_context.h"
#include "kiln/profiling/profiler.h"
#include "kiln/vm/virtual_machine.h"
#include "vm/allocator.h"

namespace kiln::vm {

// The builtins that allocate on a device other than their argument's (vm.builtin.to_device,
// vm.builtin.ensure_zero_offset), bound to `context` and charging their copies to `budget`
// (null: none); nullopt for any other name. A VM resolves these before the global registry,
// whose versions know no runtime.
std::optional<Function> context_builtin(const std::string& name, const DeviceContext& context,
                                        std::shared_ptr<MemoryBudget> budget);

class VirtualMachineImpl : public std::enable_shared_from_this<VirtualMachineImpl> {
 public:
  // `context` serves the devices; the VM keeps it alive.
  VirtualMachineImpl(std::shared_ptr<const Executable> exec, std::vector<Module> libraries,
                     std::vector<Device> devices, const DeviceContext& context,
                     const MemoryConfig& memory_cfg, bool profile);
  ~VirtualMachineImpl();

  // The VM behind a context value (the %vm register): only a VM running a call on this
  // thread (virtual_machine.cc says why); TypeError naming `who` for anything else — another
  // value, or a context kept beyond its call, which is never dereferenced.
  static VirtualMachineImpl* from_context(const Any& ctx, const char* who);
  // The context value passed to closures and builtins.
  KilnAny context() const;

  // Runs VM function `fidx` with `num_args` arguments (SPEC §2.3).
  Any invoke_bytecode(int64_t fidx, const Any* args, int32_t num_args);
  // Calls a closure (context prepended) or a plain function.
  Any invoke_closure(const Any& closure, const Any* args, int32_t num_args);
  // The closure for `name`: saved ones first, then VM functions (§2.5).
  Any get_closure(const std::string& name) const;
  // The closure of VM function `name` only (what invoke_stateful runs). ValueError
  // "Unknown function: <name>" or for a packed-function entry.
  Any vm_function(const std::string& name) const;
  // Argument conversion to devices[0] (§2.9).
  Any convert_to_device(const Any& value);
  // Allocates on device `index` of this VM (-1: the host, the last device).
  Ref<StorageObj> alloc_storage(int64_t index, size_t nbytes, size_t alignment);
  Allocator& allocator(size_t index) { return *allocators_[index]; }
  void clear_allocators();

  std::shared_ptr<const DeviceContext> device_context_owner;  // keeps the runtime alive
  // What every allocation of this VM is charged to: the budget installed on the thread that
  // made it (memory_budget.h); null for none.
  std::shared_ptr<MemoryBudget> budget;
  std::shared_ptr<const Executable> exec;
  const DeviceContext& device_context;  // *device_context_owner: serves `devices`
  std::vector<Module> libraries;
  std::vector<Device> devices;
  bool profiling_enabled;
  std::map<std::string, Any> saved;                // save_function
  std::map<std::string, std::vector<Any>> inputs;  // set_input
  std::map<std::string, Any> outputs;              // invoke_stateful
  Function instrument;
  profiling::Profiler* profiler = nullptr;  // set while profile() runs

 private:
  struct Frame;
  class RunningScope;
  // Executes the Call instruction whose words start at `w` in `frame`.
  void run_call(const Word* w, Frame& frame);
  void run_call_hooked(const Instruction& in, Frame& frame, const KilnAny* args, int32_t n,
                       bool closure);
  // A Call of a host function: its body gets borrowed views of the registers and constants.
  void run_packed_call(const Instruction& in, Frame& frame, const Function::PackedBody& body,
                       bool closure);
  const Any& read_register(const Frame& frame, Word reg) const;
  // Stores `value` in register `reg` (dropped for %void).
  void write_register(Frame& frame, Word reg, Any&& value);
  // Throws the out-of-range register error (kept out of line: the dispatch loop inlines the
  // check only).
  [[noreturn]] [[gnu::noinline, gnu::cold]] void bad_register(const Frame& frame, Word reg,
                                                              const char* access) const;
  std::unique_ptr<Frame> acquire_frame(int64_t fidx);
  void release_frame(std::unique_ptr<Frame> frame);

  std::vector<Ref<Allocator>> allocators_;
  std::vector<Any> constants_;
  std::vector<Any> func_pool_;
  // What a Call needs of each pool entry, resolved once: the callable (of the function, or of
  // the closure's implementation), whether it is a closure (called with the context first), and
  // for a host function made by Function::from_packed its body, which the VM calls with
  // borrowed Anys instead (else null). Points into func_pool_, which keeps them alive.
  struct CallTarget {
    const KilnCallable* callable;
    const Function::PackedBody* body;
    bool closure;
  };
  std::vector<CallTarget> call_targets_;
  std::vector<std::unique_ptr<Frame>> free_frames_;
  int depth_ = 0;
};

}  // namespace kiln::vm

#endif  // KILN_CORE_VM_VM_IMPL_H_
