// SPDX-License-Identifier: Apache-2.0
// VM programs as modules: the VM's own function table (§2.6), executable modules whose
// functions run in a VM, and loading executables from .kvm / .kvmt files and packages.
#include "vm/vm_module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "kiln/error.h"
#include "kiln/module_loader.h"
#include "vm/vm_impl.h"

namespace kiln::vm {
namespace {

namespace fs = std::filesystem;

std::vector<Any> rest(const Any* args, int32_t n, int32_t from) {
  return from < n ? std::vector<Any>(args + from, args + n) : std::vector<Any>();
}

void expect_at_least(const char* name, int32_t n, int32_t min) {
  if (n < min) throw TypeError(fmt::format("{} takes at least {} arguments, got {}", name, min, n));
}

std::vector<int64_t> indices(const Any* args, int32_t n, int32_t from) {
  std::vector<int64_t> out;
  for (int32_t i = from; i < n; ++i) out.push_back(args[i].cast<int64_t>());
  return out;
}

// The executable, its kernel libraries and the VMs made for it, one per device.
class ExecutablePayload : public Object {
 public:
  ExecutablePayload(std::shared_ptr<const Executable> exec, std::vector<Module> libraries,
                    const DeviceContext& context)
      : context_owner(context.retain()),
        exec(std::move(exec)),
        libraries(std::move(libraries)),
        context(*context_owner) {}
  const char* type_key() const override { return "vm.ExecutablePayload"; }

  VirtualMachine& vm_for(Device device) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = vms.find({device.type, device.id});
    if (it == vms.end()) {
      it = vms.emplace(std::make_pair(device.type, device.id),
                       VirtualMachine(Executable(*exec), libraries, {device}, context))
               .first;
    }
    return it->second;
  }

  // First, so that it goes last: the runtime stays while the VMs below are destroyed.
  std::shared_ptr<const DeviceContext> context_owner;
  std::shared_ptr<const Executable> exec;
  std::vector<Module> libraries;
  const DeviceContext& context;  // *context_owner
  std::mutex mu;
  std::map<std::pair<int32_t, int32_t>, VirtualMachine> vms;
};

// The device a call's arguments live on: the first tensor's, else the CPU.
Device device_of(const Any* args, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (args[i].type_code() == KILN_TYPE_TENSOR) return args[i].cast<Tensor>().device();
  }
  return Device::cpu();
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NotFoundError(fmt::format("cannot open {}", path.string()));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

Module VirtualMachine::module() const {
  auto obj = make_object<ModuleObj>("vm", "");
  const VirtualMachine self = *this;
  auto add = [&](const std::string& name,
                 std::function<Any(VirtualMachine&, const Any*, int32_t)> body) {
    obj->add_function(name, Function::from_packed(name, [self, body](const Any* args, int32_t n) {
                        VirtualMachine vm = self;
                        return body(vm, args, n);
                      }));
  };
  add("set_input", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("set_input", n, 1);
    vm.set_input(a[0].cast<std::string>(), rest(a, n, 1));
    return Any();
  });
  add("invoke_stateful", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("invoke_stateful", n, 1);
    vm.invoke_stateful(a[0].cast<std::string>());
    return Any();
  });
  add("get_output_arity", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("get_output_arity", n, 1);
    return Any(vm.get_output_arity(a[0].cast<std::string>(), indices(a, n, 1)));
  });
  add("get_output", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("get_output", n, 1);
    return vm.get_output(a[0].cast<std::string>(), indices(a, n, 1));
  });
  add("save_function", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("save_function", n, 3);
    vm.save_function(a[0].cast<std::string>(), a[1].cast<std::string>(), rest(a, n, 3),
                     a[2].cast<bool>());
    return Any();
  });
  add("invoke_closure", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("invoke_closure", n, 1);
    return vm.invoke_closure(a[0], rest(a, n, 1));
  });
  add("set_instrument", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("set_instrument", n, 1);
    if (a[0].type_code() == KILN_TYPE_STRING) {
      const std::string factory = a[0].cast<std::string>();
      auto f = registry::get(factory);
      if (!f) throw NotFoundError(fmt::format("Cannot find factory {}", factory));
      vm.set_instrument(f->call_packed(rest(a, n, 1)).cast<Function>());
    } else {
      vm.set_instrument(a[0].is_none() ? Function() : a[0].cast<Function>());
    }
    return Any();
  });
  add("profile", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("profile", n, 1);
    return Any(vm.profile(a[0].cast<std::string>(), rest(a, n, 1)).json());
  });
  add("get_function_arity", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("get_function_arity", n, 1);
    const std::string f = a[0].cast<std::string>();
    auto it = vm.executable().func_map.find(f);
    if (it == vm.executable().func_map.end())
      throw ValueError(fmt::format("Unknown function: {}", f));
    return Any(static_cast<int64_t>(
        vm.executable().func_table[static_cast<size_t>(it->second)].param_names.size()));
  });
  add("get_function_param_name", [](VirtualMachine& vm, const Any* a, int32_t n) {
    expect_at_least("get_function_param_name", n, 2);
    const std::string f = a[0].cast<std::string>();
    auto it = vm.executable().func_map.find(f);
    if (it == vm.executable().func_map.end())
      throw ValueError(fmt::format("Unknown function: {}", f));
    const auto& names = vm.executable().func_table[static_cast<size_t>(it->second)].param_names;
    const auto i = a[1].cast<int64_t>();
    if (i < 0 || static_cast<size_t>(i) >= names.size()) {
      throw ValueError(fmt::format("Invalid index for {} ({} out of {})", f, i, names.size()));
    }
    return Any(names[static_cast<size_t>(i)]);
  });
  // Every VM function and saved function, looked up on the VM at each use, so that a function
  // saved later (through this module's save_function or the VM) is found: the module is a
  // view of the VM, as the reference's is (§2.6). Fixed names above win.
  obj->set_function_source(
      ModuleObj::FunctionSource{[self](const std::string& name) -> std::optional<Function> {
                                  if (!self.has_function(name)) return std::nullopt;
                                  return self.get_function(name);
                                },
                                [self] {
                                  std::vector<std::string> names;
                                  for (const FuncInfo& info : self.executable().func_table) {
                                    if (info.kind == FuncKind::kVMFunc) names.push_back(info.name);
                                  }
                                  for (const std::string& name : self.saved_function_names())
                                    names.push_back(name);
                                  return names;
                                }});
  return Module(std::move(obj));
}

namespace {

// What the executable's vm_load_executable() returns (§2.1): a VM module with no VM yet.
// vm_initialization(type, id, allocator, ...) makes the VM; from then on every function of
// VirtualMachine::module() is found here. Remote callers (RPC) build a VM this way, as the
// reference's Python VirtualMachine does.
Module make_uninitialized_vm_module(Ref<ExecutablePayload> payload, bool profile) {
  struct State {
    std::mutex mu;
    Module vm;  // VirtualMachine::module() once initialized
  };
  auto state = std::make_shared<State>();
  auto obj = make_object<ModuleObj>("vm", "");
  obj->add_function(
      "vm_initialization", Function::from_packed("vm_initialization", [payload, profile, state](
                                                                          const Any* a, int32_t n) {
        if (n == 0 || n % 3 != 0) {
          throw ValueError(fmt::format(
              "vm_initialization takes (device_type, device_id, allocator_type) for each "
              "device: a positive multiple of 3 arguments, got {}",
              n));
        }
        std::lock_guard<std::mutex> lock(state->mu);
        if (state->vm.defined()) throw RuntimeError("vm_initialization: the VM is initialized");
        std::vector<Device> devices;
        std::vector<std::pair<Device, std::string>> memory;
        for (int32_t i = 0; i < n; i += 3) {
          const Device d{static_cast<int32_t>(a[i].cast<int64_t>()),
                         static_cast<int32_t>(a[i + 1].cast<int64_t>())};
          const auto kind = a[i + 2].cast<int64_t>();
          if (kind != static_cast<int64_t>(MemoryConfig::Kind::kNaive) &&
              kind != static_cast<int64_t>(MemoryConfig::Kind::kPooled)) {
            throw ValueError(fmt::format(
                "vm_initialization: allocator type {} for device {} is neither 1 (naive) nor 2 "
                "(pooled)",
                kind, payload->context.device_str(d)));
          }
          devices.push_back(d);
          memory.emplace_back(d, kind == 1 ? "naive" : "pooled");
        }
        state->vm =
            VirtualMachine(Executable(*payload->exec), payload->libraries, std::move(devices),
                           payload->context, MemoryConfig(std::move(memory)), profile)
                .module();
        return Any();
      }));
  auto initialized = [state]() -> Module {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->vm;
  };
  obj->set_function_source(ModuleObj::FunctionSource{
      [initialized, payload](const std::string& name) -> std::optional<Function> {
        if (Module vm = initialized(); vm.defined()) return vm.get()->find_function(name);
        if (!payload->exec->func_map.count(name)) return std::nullopt;
        // A function the VM will have: say what is missing rather than "no function".
        return Function::from_packed(name, [name](const Any*, int32_t) -> Any {
          throw RuntimeError(fmt::format(
              "VM function '{}' called before vm_initialization(device_type, device_id, "
              "allocator_type, ...)",
              name));
        });
      },
      [initialized]() {
        Module vm = initialized();
        return vm.defined() ? vm.function_names() : std::vector<std::string>{};
      }});
  return Module(std::move(obj));
}

}  // namespace

Module make_executable_module(Executable exec, std::vector<Module> kernel_libraries,
                              const std::string& name, const DeviceContext& context) {
  exec.validate();
  auto payload = make_object<ExecutablePayload>(std::make_shared<const Executable>(std::move(exec)),
                                                kernel_libraries, context);
  auto obj = make_object<ModuleObj>(kExecutableModuleKind, "");
  obj->payload = payload;
  for (const Module& lib : kernel_libraries) obj->imports.push_back(Ref<ModuleObj>(lib.get()));
  const auto& ex = payload->exec;
  obj->add_function("stats", Function::from_packed(
                                 "stats", [ex](const Any*, int32_t) { return Any(ex->stats()); }));
  obj->add_function("as_text", Function::from_packed("as_text", [ex](const Any*, int32_t) {
                      return Any(ex->as_text());
                    }));
  obj->add_function("has_function",
                    Function::from_packed("has_function", [ex](const Any* a, int32_t n) {
                      expect_at_least("has_function", n, 1);
                      return Any(ex->func_map.count(a[0].cast<std::string>()) != 0);
                    }));
  for (const bool profile : {false, true}) {
    const char* fname = profile ? "vm_profiler_load_executable" : "vm_load_executable";
    obj->add_function(fname, Function::from_packed(fname, [payload, profile](const Any*, int32_t) {
                        return Any(make_uninitialized_vm_module(payload, profile));
                      }));
  }
  for (const FuncInfo& info : ex->func_table) {
    if (info.kind != FuncKind::kVMFunc || obj->find_function(info.name)) continue;
    Ref<ExecutablePayload> keep = payload;
    const std::string fname = info.name;
    obj->add_function(fname, Function::from_packed(fname, [keep, fname](const Any* a, int32_t n) {
                        return keep->vm_for(device_of(a, n))
                            .get_function(fname)
                            .call_packed(std::vector<Any>(a, a + n));
                      }));
  }
  obj->artifacts.push_back(Artifact{name, "bytecode", ex->save_to_bytes()});
  for (const Module& lib : kernel_libraries) {
    for (const Artifact& a : lib.artifacts()) obj->artifacts.push_back(a);
  }
  return Module(std::move(obj));
}

namespace {
ExecutablePayload* payload_of(const Module& m) {
  if (!m.defined() || m.kind() != kExecutableModuleKind) return nullptr;
  return dynamic_cast<ExecutablePayload*>(m.get()->payload.get());
}
}  // namespace

const Executable* executable_of(const Module& m) {
  ExecutablePayload* payload = payload_of(m);
  return payload != nullptr ? payload->exec.get() : nullptr;
}

const DeviceContext* device_context_of(const Module& m) {
  ExecutablePayload* payload = payload_of(m);
  return payload != nullptr ? &payload->context : nullptr;
}

Module load_executable_file(const fs::path& path, ModuleLoadContext& context) {
  const std::string ext = path.extension().string();
  const std::vector<uint8_t> bytes = read_bytes(path);
  Executable exec =
      ext == ".kvmt"
          ? Executable::from_text(
                std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                path.string())
          : Executable::load_from_bytes(bytes);
  std::vector<Module> libraries;
  for (const std::string& import : exec.imports) {
    fs::path lib(import);
    if (lib.is_relative()) lib = path.parent_path() / lib;
    try {
      libraries.push_back(context.load_nested(lib));
    } catch (const Error& e) {
      throw_error(e.code(), fmt::format("{}: import '{}': {}", path.string(), import, e.what()));
    }
  }
  return make_executable_module(std::move(exec), std::move(libraries),
                                path.stem().string() + ".kvm", context.devices());
}

Module load_executable_package(const Artifact& bytecode, std::map<std::string, Module> libraries,
                               const std::string& package, const DeviceContext& context) {
  Executable exec;
  try {
    exec = Executable::load_from_bytes(bytecode.data);
  } catch (const Error& e) {
    throw_error(e.code(),
                fmt::format("package {}: bytecode '{}': {}", package, bytecode.name, e.what()));
  }
  std::vector<Module> ordered;
  for (const std::string& import : exec.imports) {
    const std::string base = fs::path(import).filename().string();
    auto it = libraries.find(base);
    if (it == libraries.end()) {
      throw ValueError(
          fmt::format("package {}: the executable imports '{}' but the package has no "
                      "host_library of that name",
                      package, base));
    }
    ordered.push_back(it->second);
  }
  return make_executable_module(std::move(exec), std::move(ordered), bytecode.name, context);
}

namespace {

// .kvm (binary) and .kvmt (text) executables, whose imports are loaded relative to the file.
class ExecutableFormatLoader : public FormatLoader {
 public:
  std::string describe() const override { return "VM executables"; }
  std::vector<std::string> formats() const override { return {"kvm", "kvmt"}; }
  bool accepts(const fs::path&, const std::string& format) const override {
    return format == "kvm" || format == "kvmt";
  }
  Module load(const fs::path& path, ModuleLoadContext& context) const override {
    return load_executable_file(path, context);
  }
};

}  // namespace

std::shared_ptr<const FormatLoader> executable_format_loader() {
  return std::make_shared<ExecutableFormatLoader>();
}

}  // namespace kiln::vm
