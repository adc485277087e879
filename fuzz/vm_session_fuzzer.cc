// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: uploaded VM programs (.kvmt text built from the VM builtins, no native
// code) run in a live RPC session, driven by a hostile client (docs/vm.md "Fuzzing",
// docs/rpc.md "What crosses the wire"). A server of this process (sessions on threads, so the
// sanitizers and the coverage see them) serves one session per input: the client uploads and
// loads the program, makes a VM, then follows a script — calls of VM functions with earlier
// results as arguments, the builtins (vm.builtin.copy, storages, tuples, closures, the memory
// manager) called on results, the stateful API, save_function, frees, and dropping the VM while
// its results live on. Every input must end without a crash, a sanitizer report or a hang, and
// once the client freed everything the session must hold no memory: its limit takes a fresh
// allocation of nearly all of it (the accounting gave back every byte it charged).
//
// Input: the program text, optionally followed by "\n#@" and the script's bytes (after the
// marker, not part of the program). Programs that could run unboundedly are skipped: backward
// jumps, calls or closures that could recurse, packed functions other than vm.builtin.*,
// imports, large register files (see bounded()).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fuzz_check.h"
#include "fuzz_setup.h"
#include "kiln/kiln.h"
#include "kiln/rpc/rpc_error.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/vm/executable.h"

namespace {

using kiln::Any;
using kiln::Function;
using kiln::vm::Executable;
using kiln::vm::FuncKind;

constexpr uint64_t kSessionMemory = 64ull << 20;
constexpr int64_t kMaxRegisters = 4096;
constexpr uint64_t kMaxCalls = 4096;  // VM function calls one call of the client may make
constexpr int kMaxSteps = 48;         // script steps per input

kiln::Runtime& fuzz_runtime() {
  static kiln::Runtime* runtime = [] {
    setenv("KILN_LOG", "off", 0);
    kiln::RuntimeOptions options;
    options.read_environment = false;
    // No plugin set: every plugin beside libkiln loads — in build-fuzz/, the CPU backend only
    // (a VM needs the host's backend).
    options.plugin_set = std::filesystem::path();
    return new kiln::Runtime(options);
  }();
  return *runtime;
}

// The server every input's session goes to (never destroyed: sessions may still end while
// the process exits).
kiln::rpc::Server& fuzz_server() {
  static kiln::rpc::Server* server = [] {
    kiln::rpc::ServerOptions o;
    o.port = 0;
    o.key = "fuzz";
    o.isolation = kiln::rpc::SessionIsolation::kThread;
    o.max_session_memory = kSessionMemory;
    o.max_handles = 4096;
    o.max_upload_bytes = 1 << 20;
    try {
      return new kiln::rpc::Server(o, fuzz_runtime());
    } catch (const kiln::Error& e) {
      kiln::fuzz::setup_failed("cannot start the RPC server", e.what());
    }
  }();
  return *server;
}

// Whether every call of `exec` ends after a bounded number of steps, so that the input cannot
// hang the target: forward jumps only; a VM function calls only functions after it in the
// table; closures (f[...]) only of functions that can never reach vm.builtin.invoke_closure
// (the one way to call a closure); the calls one VM call can make stay under kMaxCalls.
bool bounded(const Executable& exec) {
  if (!exec.imports.empty()) return false;
  const size_t n = exec.func_table.size();
  std::vector<std::vector<size_t>> callees(n);
  std::vector<uint64_t> invokes(n, 0);
  std::vector<bool> closure_target(n, false);
  for (size_t f = 0; f < n; ++f) {
    const auto& info = exec.func_table[f];
    if (info.kind == FuncKind::kPackedFunc) {
      if (!info.name.starts_with("vm.builtin.")) return false;
      continue;
    }
    if (info.register_file_size > kMaxRegisters) return false;
    for (int64_t pc = info.start_instr; pc < info.end_instr; ++pc) {
      const kiln::vm::Instruction in = exec.instruction(pc);
      if (in.op == kiln::vm::Opcode::kGoto || in.op == kiln::vm::Opcode::kIf) {
        if (in.offset <= 0) return false;
        continue;
      }
      if (in.op != kiln::vm::Opcode::kCall) continue;
      const auto callee = static_cast<size_t>(in.func_idx);
      if (exec.func_table[callee].kind == FuncKind::kVMFunc) {
        if (callee <= f) return false;
        callees[f].push_back(callee);
      } else if (exec.func_table[callee].name == "vm.builtin.invoke_closure") {
        ++invokes[f];
      }
      for (const kiln::vm::Word word : in.args) {
        if (kiln::vm::arg_kind(word) != kiln::vm::ArgKind::kFuncIdx) continue;
        const auto target = static_cast<size_t>(kiln::vm::arg_value(word));
        if (exec.func_table[target].kind == FuncKind::kVMFunc) closure_target[target] = true;
      }
    }
  }
  // From the end of the table (callees come later): whether a function can reach
  // invoke_closure, and the VM calls one call of it makes at most without its invocations.
  std::vector<bool> reaches_invoke(n, false);
  std::vector<uint64_t> calls(n, 1);
  for (size_t f = n; f-- > 0;) {
    reaches_invoke[f] = invokes[f] > 0;
    for (size_t g : callees[f]) {
      reaches_invoke[f] = reaches_invoke[f] || reaches_invoke[g];
      calls[f] = std::min(kMaxCalls + 1, calls[f] + calls[g]);
    }
  }
  uint64_t closure_calls = 0;  // the most one invoked closure makes (it invokes none)
  for (size_t f = 0; f < n; ++f) {
    if (!closure_target[f]) continue;
    if (reaches_invoke[f]) return false;
    closure_calls = std::max(closure_calls, calls[f]);
  }
  // With the invocations: each runs at most closure_calls calls.
  std::vector<uint64_t> total(n, 1);
  for (size_t f = n; f-- > 0;) {
    total[f] = std::min(kMaxCalls + 1, 1 + invokes[f] * closure_calls);
    for (size_t g : callees[f]) total[f] = std::min(kMaxCalls + 1, total[f] + total[g]);
    if (total[f] > kMaxCalls) return false;
  }
  return true;
}

// The script's bytes, read one at a time (zeros once they run out).
class Script {
 public:
  explicit Script(std::string_view bytes) : bytes_(bytes) {}
  uint8_t next() { return at_ < bytes_.size() ? static_cast<uint8_t>(bytes_[at_++]) : 0; }
  bool done() const { return at_ >= bytes_.size(); }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

// With $KILN_FUZZ_TRACE set, what each input does goes to stderr (reading a reproducer).
bool tracing() {
  static const bool on = std::getenv("KILN_FUZZ_TRACE") != nullptr;
  return on;
}

// Runs `f`, ignoring the errors a hostile client is answered with.
template <typename F>
void attempt(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    if (tracing()) std::fprintf(stderr, "kiln fuzz: refused: %s\n", e.what());
  }
}

// The builtins the client calls directly on results, with how many arguments.
struct Builtin {
  const char* name;
  int args;
};
constexpr Builtin kBuiltins[] = {
    {"vm.builtin.memory_manager.clear", 1},
    {"vm.builtin.copy", 1},
    {"vm.builtin.tuple_getitem", 2},
    {"vm.builtin.tuple_reset_item", 2},
    {"vm.builtin.alloc_tensor", 4},
    {"vm.builtin.alloc_storage", 4},
    {"vm.builtin.shape_of", 1},
    {"vm.builtin.reshape", 2},
    {"vm.builtin.make_tuple", 2},
    {"vm.builtin.make_closure", 2},
    {"vm.builtin.invoke_closure", 3},
    {"vm.builtin.check_tuple_info", 3},
    {"vm.builtin.ensure_zero_offset", 1},
    {"vm.builtin.to_device", 3},
};

// One session: the program uploaded and loaded, a VM made, the script followed; then every
// handle freed and the accounting checked.
void run_session(const std::string& program, const Executable& exec, Script& script) {
  kiln::rpc::ConnectOptions options;
  options.key = "fuzz";
  options.connect_timeout = std::chrono::seconds(10);
  std::optional<kiln::rpc::RPCSession> session;
  for (int attempt_no = 0; !session; ++attempt_no) {
    try {
      session = kiln::rpc::connect("127.0.0.1", fuzz_server().port(), options, fuzz_runtime());
    } catch (const kiln::Error& e) {
      // The previous session may still be ending (one slot); a server that is gone is a
      // crash the sanitizers report first.
      if (attempt_no == 50) kiln::fuzz::setup_failed("cannot connect to the server", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  kiln::rpc::RPCSession& s = *session;
  std::vector<std::string> vm_functions;
  for (const auto& info : exec.func_table) {
    if (info.kind == FuncKind::kVMFunc) vm_functions.push_back(info.name);
  }
  {
    kiln::rpc::RemoteModule module;
    try {
      s.upload_bytes(program, "p.kvmt");
      module = s.load_module("p.kvmt");
    } catch (const kiln::Error& e) {
      if (tracing()) std::fprintf(stderr, "kiln fuzz: not loaded: %s\n", e.what());
      return;  // refused at load (a builtin the server lacks): fine
    }
    std::optional<kiln::rpc::RemoteModule> vm;
    const auto make_vm = [&](int64_t allocator) {
      vm.reset();
      attempt([&] {
        kiln::rpc::RemoteModule made =
            kiln::rpc::RemoteModule::from_value(module.get_function("vm_load_executable")());
        made.get_function("vm_initialization")(int64_t{kDLCPU}, int64_t{0}, allocator);
        vm = made;
      });
    };
    make_vm(1 + script.next() % 2);
    std::vector<Any> pool = {Any(int64_t{0}), Any(int64_t{1}), Any::shape({16}),
                             Any(kiln::DataType::UInt(8)), Any(std::string("global"))};
    attempt([&] {
      pool.emplace_back(
          kiln::Tensor::empty({64}, kiln::DataType::UInt(8), s.cpu(), fuzz_runtime()));
    });
    const auto pick = [&]() -> Any { return pool[script.next() % pool.size()]; };
    const auto args_for = [&](const std::string& name, std::vector<Any> args) {
      const auto it = exec.func_map.find(name);
      const int64_t count =
          it == exec.func_map.end() ? 0 : exec.func_table[static_cast<size_t>(it->second)].num_args;
      for (int64_t i = 0; i < count; ++i) args.push_back(pick());
      return args;
    };
    const auto keep = [&](Any v) {
      if (pool.size() < 64) pool.push_back(std::move(v));
    };
    for (int step = 0; step < kMaxSteps && !script.done(); ++step) {
      const uint8_t op = script.next() % 9;
      if (tracing()) std::fprintf(stderr, "kiln fuzz: step %d: op %d\n", step, op);
      const std::string f = vm_functions.empty()
                                ? std::string("main")
                                : vm_functions[script.next() % vm_functions.size()];
      switch (op) {
        case 0:  // a VM function, with earlier results as arguments
          if (vm) attempt([&] { keep(vm->get_function(f).call_packed(args_for(f, {}))); });
          break;
        case 1:  // a result freed
          if (pool.size() > 1) pool.erase(pool.begin() + script.next() % pool.size());
          break;
        case 2: {  // a builtin on results
          const Builtin& b = kBuiltins[script.next() % std::size(kBuiltins)];
          std::vector<Any> args;
          for (int i = 0; i < b.args; ++i) args.push_back(pick());
          attempt([&] { keep(s.get_function(b.name).call_packed(args)); });
          break;
        }
        case 3:  // the stateful API
          if (vm) {
            attempt([&] {
              vm->get_function("set_input").call_packed(args_for(f, {Any(f)}));
              vm->get_function("invoke_stateful")(f);
            });
          }
          break;
        case 4:  // a kept output
          if (vm) {
            attempt([&] {
              std::vector<Any> index = {Any(f)};
              for (uint8_t i = script.next() % 3; i > 0; --i) index.emplace_back(int64_t{i - 1});
              keep(vm->get_function("get_output").call_packed(index));
            });
          }
          break;
        case 5:  // save_function, and the saved function called
          if (vm) {
            attempt([&] {
              const std::string saved = "saved" + std::to_string(script.next() % 4);
              vm->get_function("save_function")
                  .call_packed(args_for(f, {Any(f), Any(saved), Any(script.next() % 2 == 0)}));
              keep(vm->get_function(saved)());
            });
          }
          break;
        case 6:  // a result invoked as a closure by the VM
          if (vm) {
            attempt([&] { keep(vm->get_function("invoke_closure")(pick(), pick())); });
          }
          break;
        case 7:  // the VM dropped (its results live on), another made
          make_vm(1 + script.next() % 2);
          break;
        case 8:  // memory of the client's
          attempt([&] {
            keep(Any(kiln::Tensor::empty({int64_t{64} * (1 + script.next())},
                                         kiln::DataType::UInt(8), s.cpu(), fuzz_runtime())));
          });
          break;
      }
    }
    pool.clear();
    vm.reset();
  }
  // Everything is freed (frees go out before the next request): the session holds nothing,
  // so nearly all of its limit can be allocated.
  bool fits = true;
  try {
    kiln::Tensor::empty({static_cast<int64_t>(kSessionMemory - (1 << 20))}, kiln::DataType::UInt(8),
                        s.cpu(), fuzz_runtime());
  } catch (const kiln::rpc::RPCError& e) {
    fits = std::string_view(e.remote_message()).find("memory limit") == std::string_view::npos;
    if (!fits) std::fprintf(stderr, "kiln fuzz: %s\n", e.what());
  }
  kiln::fuzz::check(fits, "a session that freed every handle holds no memory");
  attempt([&] { s.close(); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("KILN_LOG", "off", 0);
  (void)fuzz_server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t marker = input.rfind("\n#@");
  const std::string program(input.substr(0, marker == std::string_view::npos ? size : marker));
  Script script(marker == std::string_view::npos ? std::string_view() : input.substr(marker + 3));
  Executable exec;
  try {
    exec = Executable::from_text(program, "fuzz.kvmt");
  } catch (const kiln::Error&) {
    return 0;  // the assembler's own target covers malformed text
  }
  if (!bounded(exec)) {
    if (tracing()) std::fprintf(stderr, "kiln fuzz: skipped: not bounded\n");
    return 0;
  }
  run_session(program, exec, script);
  return 0;
}
