// SPDX-License-Identifier: Apache-2.0
// kiln._kiln._VirtualMachine: the Relax-style VM over an executable module (TVM's Relax VM).
// The Python class kiln.vm.VirtualMachine (kiln/vm.py) normalises devices, memory_cfg and
// arguments as the reference's Python class does and calls these methods; every method that
// runs VM code releases the GIL.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kiln/error.h"
#include "kiln/profiling/report.h"
#include "kiln/rpc/remote_vm.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::python {
namespace {

using vm::VirtualMachine;

// The VM module's fixed function names (TVM's VM module has them too): they shadow VM functions
// of the same name.
constexpr std::array<std::string_view, 10> kFixedNames = {
    "set_input",          "invoke_stateful",        "get_output_arity", "get_output",
    "save_function",      "invoke_closure",         "set_instrument",   "profile",
    "get_function_arity", "get_function_param_name"};

bool is_fixed_name(const std::string& name) {
  for (std::string_view fixed : kFixedNames) {
    if (name == fixed) return true;
  }
  return false;
}

// What vm[name] resolves to: a fixed module function, else a saved or VM function
// (NotFoundError "Unknown function: <name>" otherwise).
Function resolve(const VirtualMachine& vm, const std::string& name) {
  if (is_fixed_name(name)) return vm.module().get_function(name);
  return vm.get_function(name);
}

// Whether resolve(vm, name) finds something.
bool resolvable(const VirtualMachine& vm, const std::string& name) {
  return is_fixed_name(name) || vm.has_function(name);
}

// The allocator kind of a memory_cfg value: "naive"/"pooled", or the reference's integer
// codes 1 (naive) and 2 (pooled).
std::string allocator_kind(nb::handle value) {
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr())) {
    const auto code = nb::cast<int64_t>(value);
    if (code == 1) return "naive";
    if (code == 2) return "pooled";
  }
  throw nb::value_error(("memory_cfg: an allocator is \"naive\" or \"pooled\" (or the codes 1 and "
                         "2), got " +
                         nb::cast<std::string>(nb::repr(value)))
                            .c_str());
}

// None (pooled everywhere), "naive"/"pooled" for every device, or a dict Device -> kind.
vm::MemoryConfig memory_config_from(nb::handle cfg) {
  if (cfg.is_none()) return {};
  if (nb::isinstance<nb::str>(cfg)) return vm::MemoryConfig(nb::cast<std::string>(cfg));
  if (nb::isinstance<nb::dict>(cfg)) {
    std::vector<std::pair<Device, std::string>> per_device;
    for (auto [key, value] : nb::borrow<nb::dict>(cfg)) {
      if (!nb::isinstance<Device>(key)) {
        throw nb::type_error(("memory_cfg: the keys of a dict are kiln.Device, got " +
                              nb::cast<std::string>(nb::repr(key)))
                                 .c_str());
      }
      per_device.emplace_back(nb::cast<Device>(key), allocator_kind(value));
    }
    return vm::MemoryConfig(std::move(per_device));
  }
  throw nb::type_error(
      ("memory_cfg is expected be string or dictionary, but received " +
       nb::cast<std::string>(nb::str(nb::handle(Py_TYPE(cfg.ptr())).attr("__name__"))))
          .c_str());
}

// The instrument as a Function: None removes it, a kiln.Function is used as is, any other
// callable is called back (under the GIL) with (func, func_symbol, before_run, ret_value,
// *args).
Function instrument_from(nb::handle f) {
  if (f.is_none()) return Function();
  if (nb::isinstance<Function>(f)) return nb::cast<Function>(f);
  if (PyCallable_Check(f.ptr()) == 0) {
    throw nb::type_error(
        ("set_instrument: expected a callable or None, got " + nb::cast<std::string>(nb::repr(f)))
            .c_str());
  }
  return function_from_callable(f, "instrument");
}

std::vector<int64_t> indices_from(nb::handle indices) {
  std::vector<int64_t> out;
  for (nb::handle i : indices) out.push_back(nb::cast<int64_t>(i));
  return out;
}

// The parameter names the executable records for VM function `func` (may be empty).
// ValueError "Unknown function: <func>" for a name that is not in the function table.
std::vector<std::string> param_names(const VirtualMachine& vm, const std::string& func) {
  const vm::Executable& exec = vm.executable();
  auto it = exec.func_map.find(func);
  if (it == exec.func_map.end()) throw ValueError("Unknown function: " + func);
  return exec.func_table[static_cast<size_t>(it->second)].param_names;
}

}  // namespace

void bind_vm(nb::module_& m) {
  auto vm_class = nb::class_<VirtualMachine>(
      m, "_VirtualMachine",
      "Internal: the core of kiln.vm.VirtualMachine (use that class). One VM runs one call at a "
      "time: do not call it from two threads at once.");
  def_time_evaluator(
      vm_class, "name",
      [](const VirtualMachine& vm, const std::string& name, Device dev,
         TimeEvaluatorOptions options) {
        return make_time_evaluator(resolve(vm, name), dev, std::move(options));
      },
      "A kiln.TimeEvaluator over get_function(name).");
  vm_class
      .def(
          "__init__",
          [](VirtualMachine* self, const Module& exec, std::vector<Device> devices,
             nb::handle memory_cfg, bool profile) {
            vm::MemoryConfig cfg = memory_config_from(memory_cfg);
            new (self) VirtualMachine(without_gil(
                [&] { return VirtualMachine(exec, std::move(devices), std::move(cfg), profile); }));
          },
          nb::arg("exec"), nb::arg("devices"), nb::arg("memory_cfg").none() = nb::none(),
          nb::arg("profile") = false,
          "A VM for the executable module `exec` on `devices` (the host CPU is appended unless "
          "the last device is a CPU). memory_cfg: None, 'naive'/'pooled', or a dict Device -> "
          "'naive'/'pooled' (or 1/2). profile=True enables profile().")
      .def("get_function", &resolve, nb::arg("name"),
           "The callable `name`: a fixed VM module function (set_input, invoke_stateful, ...), a "
           "function saved with save_function, or a VM function (arguments passed as they are). "
           "kiln.NotFoundError 'Unknown function: <name>' otherwise.")
      .def("__getitem__", &resolve, nb::arg("name"), "The same as get_function(name).")
      .def("has_function", &resolvable, nb::arg("name"),
           "Whether get_function(name) finds something.")
      .def("__contains__", &resolvable, nb::arg("name"))
      .def(
          "invoke_closure",
          [](const VirtualMachine& vm, nb::handle closure, nb::handle args) {
            Any target = to_any(closure, "closure");
            std::vector<Any> values = to_anys(args);
            Any result = without_gil([&] { return vm.invoke_closure(target, values); });
            return from_any(result);
          },
          nb::arg("closure"), nb::arg("args"),
          "Calls a VM closure (or any function) with the values of `args`.")
      .def(
          "save_function",
          [](VirtualMachine& vm, const std::string& func, const std::string& saved_name,
             nb::handle args, bool include_return) {
            std::vector<Any> values = to_anys(args);
            without_gil([&] { vm.save_function(func, saved_name, values, include_return); });
          },
          nb::arg("func"), nb::arg("saved_name"), nb::arg("args"), nb::arg("include_return") = true,
          "Saves `func` with `args` bound after its own arguments (converted to devices[0]) as "
          "`saved_name`; without include_return it returns None.")
      .def(
          "set_input",
          [](VirtualMachine& vm, const std::string& func, nb::handle args) {
            std::vector<Any> values = to_anys(args);
            without_gil([&] { vm.set_input(func, values); });
          },
          nb::arg("func"), nb::arg("args"),
          "Stores the inputs of `func` for invoke_stateful, converted to devices[0]. "
          "ValueError for an unknown function, TypeError for a wrong count.")
      .def(
          "invoke_stateful",
          [](VirtualMachine& vm, const std::string& func) {
            without_gil([&] { vm.invoke_stateful(func); });
          },
          nb::arg("func"),
          "Runs `func` on the inputs set_input stored and keeps its output. ValueError "
          "when no inputs were set.")
      .def(
          "get_outputs",
          [](const VirtualMachine& vm, const std::string& func) {
            Any out = without_gil([&] { return vm.get_outputs(func); });
            return from_any(out);
          },
          nb::arg("func"),
          "The output of the last invoke_stateful(func); tuples as nested Python tuples. "
          "ValueError before invoke_stateful.")
      .def(
          "get_output_arity",
          [](const VirtualMachine& vm, const std::string& func, nb::handle indices) {
            std::vector<int64_t> path = indices_from(indices);
            return without_gil([&] { return vm.get_output_arity(func, path); });
          },
          nb::arg("func"), nb::arg("indices"),
          "The size of the tuple at `indices` in the saved output, or -1 for a non-tuple.")
      .def(
          "get_output",
          [](const VirtualMachine& vm, const std::string& func, nb::handle indices) {
            std::vector<int64_t> path = indices_from(indices);
            Any out = without_gil([&] { return vm.get_output(func, path); });
            return from_any(out);
          },
          nb::arg("func"), nb::arg("indices"),
          "The non-tuple value at `indices` in the saved output (ValueError for a tuple, "
          "IndexError for an index out of range).")
      .def(
          "set_instrument",
          [](VirtualMachine& vm, nb::handle f) {
            Function instrument = instrument_from(f);
            without_gil([&] { vm.set_instrument(std::move(instrument)); });
          },
          nb::arg("f").none(),
          "Calls `f(func, func_symbol, before_run, ret_value, *args)` around every Call "
          "instruction; a before-call returning 1 (SKIP_RUN) skips the call. None "
          "removes the instrument.")
      .def(
          "profile",
          [](VirtualMachine& vm, const std::string& func, nb::handle args) {
            std::vector<Any> values = to_anys(args);
            return without_gil([&] { return vm.profile(func, values); });
          },
          nb::arg("func"), nb::arg("args"),
          "Profiles one call of `func` after a warm-up into a kiln.profiling.Report; "
          "`args` as set_input, or empty to use the inputs set_input stored.")
      .def("param_names", &param_names, nb::arg("func"),
           "The parameter names the executable records for VM function `func` (may be empty); "
           "ValueError for an unknown function.")
      .def_prop_ro("module", &VirtualMachine::module,
                   "The VM as a kiln.Module with the VM module's function table (set_input, "
                   "invoke_stateful, get_output, ..., and every VM function).")
      .def_prop_ro("devices", &VirtualMachine::devices, "The VM's devices, the host CPU last.")
      .def_prop_ro(
          "function_names",
          [](const VirtualMachine& vm) {
            std::vector<std::string> names;
            for (const vm::FuncInfo& info : vm.executable().func_table) {
              if (info.kind == vm::FuncKind::kVMFunc) names.push_back(info.name);
            }
            return names;
          },
          "The VM functions of the executable, in table order.")
      .def(
          "as_text", [](const VirtualMachine& vm) { return vm.executable().as_text(); },
          "The executable's text form (TVM's as_text).")
      .def(
          "stats", [](const VirtualMachine& vm) { return vm.executable().stats(); },
          "The executable's statistics (TVM's stats).");

  // The core of kiln.vm.VirtualMachine on a remote executable: the VM is made on the server
  // (vm_load_executable + vm_initialization); kiln/vm.py drives it through its module.
  nb::class_<rpc::RemoteVirtualMachine>(m, "_RemoteVirtualMachine",
                                        "Internal: kiln.vm.VirtualMachine on a RemoteModule.")
      .def(
          "__init__",
          [](rpc::RemoteVirtualMachine* self, const rpc::RemoteModule& exec,
             std::vector<Device> devices, nb::handle memory_cfg, bool profile) {
            vm::MemoryConfig cfg = memory_config_from(memory_cfg);
            new (self) rpc::RemoteVirtualMachine(without_gil([&] {
              return rpc::RemoteVirtualMachine(exec, std::move(devices), std::move(cfg), profile);
            }));
          },
          nb::arg("exec"), nb::arg("devices"), nb::arg("memory_cfg").none() = nb::none(),
          nb::arg("profile") = false)
      .def_prop_ro("module", &rpc::RemoteVirtualMachine::module,
                   "The VM module on the server (the VM module's function table).")
      .def_prop_ro("devices", &rpc::RemoteVirtualMachine::devices,
                   "The VM's devices (of the session), the server's CPU last.");
}

}  // namespace kiln::python
