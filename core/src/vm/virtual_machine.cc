// SPDX-License-Identifier: Apache-2.0
// The VM: initialisation (§2.8, §2.5), the dispatch loop (§2.3, §2.4), the stateful API
// (§2.10, §2.11), instrumentation (§2.12), timing (§2.13) and profiling (§2.14).
#include "kiln/vm/virtual_machine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <new>

#include "kiln/error.h"
#include "vm/vm_impl.h"
#include "vm/vm_module.h"

namespace kiln::vm {

namespace {
// The VM functions whose Call instructions name function-table entry `index`, for messages:
// "@main", "@main, @f", or "no VM function".
std::string callers_of(const Executable& exec, int64_t index) {
  std::vector<std::string> callers;
  for (const FuncInfo& info : exec.func_table) {
    if (info.kind != FuncKind::kVMFunc) continue;
    for (int64_t pc = info.start_instr; pc < info.end_instr; ++pc) {
      const Instruction in = exec.instruction(pc);
      if (in.op == Opcode::kCall && in.func_idx == index) {
        callers.push_back("@" + info.name);
        break;
      }
    }
  }
  return callers.empty() ? std::string("no VM function")
                         : fmt::format("{}", fmt::join(callers, ", "));
}
}  // namespace

int nesting_depth(const Any& v) {
  if (v.type_code() != kTypeObject) return 0;
  if (const auto* array = dynamic_cast<const ArrayObj*>(v.object())) return array->depth;
  if (const auto* closure = dynamic_cast<const ClosureObj*>(v.object())) return closure->depth;
  return 0;
}

namespace {
int deepest(const std::vector<Any>& values) {
  int depth = 0;
  for (const Any& v : values) depth = std::max(depth, nesting_depth(v));
  return depth;
}
}  // namespace

ArrayObj::ArrayObj(std::vector<Any> items_in)
    : items(std::move(items_in)), depth(1 + deepest(items)) {}

ClosureObj::ClosureObj(std::string func_name_in, Function impl_in, std::vector<Any> captured_in,
                       Any wrapped_in)
    : func_name(std::move(func_name_in)),
      impl(std::move(impl_in)),
      captured(std::move(captured_in)),
      wrapped(std::move(wrapped_in)),
      depth(1 + std::max(nesting_depth(wrapped), deepest(captured))) {}

Any make_array(std::vector<Any> items) {
  auto array = make_object<ArrayObj>(std::move(items));
  if (array->depth > kMaxValueNesting) {
    throw ValueError(fmt::format("a tuple nested {} deep passes the VM's limit of {}", array->depth,
                                 kMaxValueNesting));
  }
  return Any::object(std::move(array));
}

// ---- MemoryConfig ----

namespace {
MemoryConfig::Kind parse_kind(const std::string& kind) {
  if (kind == "naive") return MemoryConfig::Kind::kNaive;
  if (kind == "pooled") return MemoryConfig::Kind::kPooled;
  throw ValueError(fmt::format("memory_cfg: '{}' is not an allocator (naive, pooled)", kind));
}
}  // namespace

MemoryConfig::MemoryConfig(const char* kind) : all_(parse_kind(kind)) {}
MemoryConfig::MemoryConfig(const std::string& kind) : all_(parse_kind(kind)) {}
MemoryConfig::MemoryConfig(std::vector<std::pair<Device, std::string>> per_device) {
  for (const auto& [device, kind] : per_device) per_device_.emplace_back(device, parse_kind(kind));
}
MemoryConfig::Kind MemoryConfig::kind_for(Device device) const {
  for (const auto& [d, kind] : per_device_) {
    if (d == device) return kind;
  }
  return all_;
}

// ---- frames ----

struct VirtualMachineImpl::Frame {
  int64_t fidx = 0;
  std::vector<Any> registers;
  std::vector<KilnAny> call_args;  // scratch for decoded Call arguments; slot 0: the context
  // Scratch for the borrowed Any views of a host function's arguments (never destroyed as
  // Anys: raw storage).
  struct alignas(Any) AnySlot {
    unsigned char bytes[sizeof(Any)];
  };
  std::vector<AnySlot> any_args;
};

std::unique_ptr<VirtualMachineImpl::Frame> VirtualMachineImpl::acquire_frame(int64_t fidx) {
  std::unique_ptr<Frame> frame;
  if (!free_frames_.empty()) {
    frame = std::move(free_frames_.back());
    free_frames_.pop_back();
  } else {
    frame = std::make_unique<Frame>();
  }
  frame->fidx = fidx;
  frame->registers.resize(static_cast<size_t>(exec->func_table[fidx].register_file_size));
  return frame;
}

void VirtualMachineImpl::release_frame(std::unique_ptr<Frame> frame) {
  // Dropping the values releases what the frame held, also when the call failed.
  frame->registers.clear();
  if (free_frames_.size() < 64) free_frames_.push_back(std::move(frame));
}

// ---- initialisation ----

VirtualMachineImpl::VirtualMachineImpl(std::shared_ptr<const Executable> exec_in,
                                       std::vector<Module> libraries_in,
                                       std::vector<Device> devices_in,
                                       const DeviceContext& context_in,
                                       const MemoryConfig& memory_cfg, bool profile)
    : device_context_owner(context_in.retain()),
      budget(current_memory_budget()),
      exec(std::move(exec_in)),
      device_context(*device_context_owner),
      libraries(std::move(libraries_in)),
      devices(std::move(devices_in)),
      profiling_enabled(profile) {
  if (devices.empty()) throw ValueError("VirtualMachine: the device list is empty");
  // The host is always the last device (§2.8).
  if (devices.back().type != kDLCPU) devices.push_back(Device::cpu());
  for (const Device& d : devices) {
    Ref<DeviceBackend> backend = device_context.backend(d.type);
    // Refused here rather than at the first allocation on the device, mid-run.
    std::string why_none;
    const int32_t count = backend->device_count(&why_none);
    if (d.id < 0 || d.id >= count) {
      const std::string first = device_context.device_str(Device{d.type, 0});
      throw ValueError(fmt::format(
          "VirtualMachine: device {} does not exist: {}", device_context.device_str(d),
          count <= 0   ? fmt::format("there is no such device ({})", why_none)
          : count == 1 ? fmt::format("there is one ({})", first)
                       : fmt::format("there are {} ({} to {})", count, first,
                                     device_context.device_str(Device{d.type, count - 1}))));
    }
    allocators_.push_back(make_allocator(memory_cfg.kind_for(d), backend, d, budget));
  }
  // Constants: tensors go to devices[0].
  for (const Constant& c : exec->constants) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            if (v.device() == devices[0]) {
              constants_.emplace_back(v);
            } else {
              Tensor t =
                  empty_tensor(*allocators_[0], {v.shape().begin(), v.shape().end()}, v.dtype());
              t.copy_from(v);
              constants_.emplace_back(t);
            }
          } else if constexpr (std::is_same_v<T, ShapeConstant>) {
            constants_.push_back(Any::shape(v.dims));
          } else {
            constants_.emplace_back(v);
          }
        },
        c);
  }
  // The function pool (§2.5): packed functions from the kernel libraries, then the registry.
  for (size_t i = 0; i < exec->func_table.size(); ++i) {
    const FuncInfo& info = exec->func_table[i];
    if (info.kind == FuncKind::kVMFunc) {
      const auto fidx = static_cast<int64_t>(i);
      Function impl = Function::from_packed(info.name, [fidx](const Any* args, int32_t n) -> Any {
        VirtualMachineImpl* vm = from_context(n > 0 ? args[0] : Any(), "VM closure");
        return vm->invoke_bytecode(fidx, args + 1, n - 1);
      });
      func_pool_.push_back(Any::object(make_object<ClosureObj>(info.name, std::move(impl))));
      continue;
    }
    std::optional<Function> f;
    for (const Module& lib : libraries) {
      if (lib.has_function(info.name)) {
        f = lib.get_function(info.name);
        break;
      }
    }
    if (!f) f = context_builtin(info.name, device_context, budget);
    if (!f) f = registry::get(info.name);
    if (!f) {
      std::vector<std::string> names;
      for (const Module& lib : libraries) {
        names.push_back(lib.get()->source().empty() ? lib.kind() : lib.get()->source());
      }
      throw NotFoundError(fmt::format(
          "Cannot find function '{}' (called by {}) in the VM's kernel libraries ({}) or the "
          "global function registry",
          info.name, callers_of(*exec, static_cast<int64_t>(i)),
          names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    func_pool_.emplace_back(*f);
  }
  for (const Any& entry : func_pool_) {
    if (entry.type_code() == kTypeObject) {  // a VM function's closure
      const auto* closure = static_cast<const ClosureObj*>(entry.object());
      call_targets_.push_back({&closure->impl.callable(), closure->impl.packed_body(), true});
    } else {
      const Function f = entry.cast<Function>();
      call_targets_.push_back({&f.callable(), f.packed_body(), false});
    }
  }
}

VirtualMachineImpl::~VirtualMachineImpl() {
  // Values may hold storages of our allocators: drop them before the allocators.
  saved.clear();
  inputs.clear();
  outputs.clear();
  constants_.clear();
  func_pool_.clear();
  free_frames_.clear();
}

// The VM context stays a raw pointer (KILN_TYPE_OPAQUE), validated rather than counted. It is
// the ABI of closures and builtins (compiled code passes it as a void*), every closure call
// passes it without reference counting, and a counted context would let any value that
// escapes a call (vm.builtin.copy of %vm, returned) keep a VM and its memory alive behind its
// owner's back. Instead a context is meaningful only while its VM runs a call on the calling
// thread: from_context accepts a pointer only when it equals one of those VMs, compared as a
// number and never followed otherwise, so a context kept beyond its call — its VM since freed
// (a use after free) or another's — or a forged one is a TypeError, not a dereference. (RPC
// sessions refuse to return raw pointers at all: session_server.cc.)
namespace {
// The VMs running a call on this thread, innermost first: a list through RunningScopes on the
// stack.
struct RunningVm {
  const VirtualMachineImpl* vm;
  const RunningVm* outer;
};
thread_local const RunningVm* t_running = nullptr;
}  // namespace

// Marks `vm` as running a call on this thread while it lives (once: a VM calling into itself
// is listed once).
class VirtualMachineImpl::RunningScope {
 public:
  explicit RunningScope(const VirtualMachineImpl* vm)
      : entry_{vm, t_running}, pushed_(t_running == nullptr || t_running->vm != vm) {
    if (pushed_) t_running = &entry_;
  }
  ~RunningScope() {
    if (pushed_) t_running = entry_.outer;
  }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  RunningVm entry_;
  bool pushed_;
};

VirtualMachineImpl* VirtualMachineImpl::from_context(const Any& ctx, const char* who) {
  if (ctx.type_code() != KILN_TYPE_OPAQUE) {
    throw TypeError(
        fmt::format("{}: argument 0 must be the VM context (%vm), got {}", who, ctx.type_name()));
  }
  const auto address = static_cast<uintptr_t>(ctx.raw_int());
  for (const RunningVm* r = t_running; r != nullptr; r = r->outer) {
    if (reinterpret_cast<uintptr_t>(r->vm) == address) {
      return const_cast<VirtualMachineImpl*>(r->vm);
    }
  }
  throw TypeError(fmt::format(
      "{}: argument 0 is not the context of a VM running this call (a %vm kept beyond its call, "
      "of a VM that may be gone, is never used)",
      who));
}

KilnAny VirtualMachineImpl::context() const {
  KilnAny a{KILN_TYPE_OPAQUE, 0, {}};
  a.value.v_ptr = const_cast<VirtualMachineImpl*>(this);
  return a;
}

Ref<StorageObj> VirtualMachineImpl::alloc_storage(int64_t index, size_t nbytes, size_t alignment) {
  const auto n = static_cast<int64_t>(devices.size());
  if (index == -1) index = n - 1;
  if (index < 0 || index >= n) {
    throw IndexError(fmt::format(
        "alloc_storage: device index {} out of range: the VM has {} devices", index, n));
  }
  return allocators_[static_cast<size_t>(index)]->alloc(nbytes, alignment);
}

void VirtualMachineImpl::clear_allocators() {
  for (auto& a : allocators_) a->clear();
}

// ---- the interpreter ----

void VirtualMachineImpl::bad_register(const Frame& frame, Word reg, const char* access) const {
  throw RuntimeError(fmt::format("VM function '{}' {} register {} out of its {} registers",
                                 exec->func_table[frame.fidx].name, access, reg,
                                 frame.registers.size()));
}

inline void VirtualMachineImpl::write_register(Frame& frame, Word reg, Any&& value) {
  if (reg >= kBeginSpecialReg) return;  // %void: the value is dropped
  if (static_cast<uint64_t>(reg) >= frame.registers.size()) [[unlikely]] {
    bad_register(frame, reg, "writes");
  }
  frame.registers[static_cast<size_t>(reg)] = std::move(value);
}

inline const Any& VirtualMachineImpl::read_register(const Frame& frame, Word reg) const {
  if (static_cast<uint64_t>(reg) >= frame.registers.size()) [[unlikely]] {
    bad_register(frame, reg, "reads");
  }
  return frame.registers[static_cast<size_t>(reg)];
}

Any VirtualMachineImpl::invoke_bytecode(int64_t fidx, const Any* args, int32_t num_args) {
  if (fidx < 0 || static_cast<size_t>(fidx) >= exec->func_table.size()) {
    throw IndexError(fmt::format("VM function index {} out of range", fidx));
  }
  const FuncInfo& info = exec->func_table[fidx];
  if (info.kind != FuncKind::kVMFunc) {
    throw RuntimeError(fmt::format("'{}' is not a VM function", info.name));
  }
  if (num_args != info.num_args) {
    std::string params;
    if (!info.param_names.empty()) params = fmt::format(" ({})", fmt::join(info.param_names, ", "));
    throw RuntimeError(
        fmt::format("Invoking function {} expects {} arguments{}, but {} arguments were provided.",
                    info.name, info.num_args, params, num_args));
  }
  if (depth_ >= 4096)
    throw RuntimeError(fmt::format("VM call depth above 4096 in '{}'", info.name));
  // The frame goes back to the free list however the call ends, so the VM stays usable after
  // an exception (§2.3).
  struct FrameGuard {
    VirtualMachineImpl* vm;
    std::unique_ptr<Frame> frame;
    ~FrameGuard() {
      --vm->depth_;
      vm->release_frame(std::move(frame));
    }
  } guard{this, acquire_frame(fidx)};
  ++depth_;
  const RunningScope running(this);
  Frame& frame = *guard.frame;
  for (int32_t i = 0; i < num_args; ++i) frame.registers[static_cast<size_t>(i)] = args[i];

  // The words are decoded in place (validate() guaranteed their layout at load).
  const Word* const words = exec->instr_data.data();
  const Word* const offsets = exec->instr_offset.data();
  int64_t pc = info.start_instr;
  while (true) {
    if (pc < info.start_instr || pc >= info.end_instr) [[unlikely]] {
      throw RuntimeError(
          fmt::format("VM function '{}' ran into an invalid section (pc {})", info.name, pc));
    }
    const Word* w = words + offsets[pc];
    switch (static_cast<Opcode>(w[0])) {
      case Opcode::kCall:
        run_call(w, frame);
        ++pc;
        break;
      case Opcode::kRet:
        if (w[1] == kVoidRegister) return Any();
        return read_register(frame, w[1]);
      case Opcode::kGoto:
        pc += w[1];
        break;
      case Opcode::kIf: {
        const Any& cond = read_register(frame, w[1]);
        if (cond.type_code() != KILN_TYPE_INT && cond.type_code() != KILN_TYPE_BOOL) {
          throw TypeError(
              fmt::format("VM function '{}': If expects an int condition in %{}, got {}", info.name,
                          w[1], cond.type_name()));
        }
        pc += cond.raw_int() != 0 ? 1 : w[2];
        break;
      }
      default:
        throw RuntimeError(
            fmt::format("VM function '{}': unknown opcode {} at pc {}", info.name, w[0], pc));
    }
  }
}

namespace {

// The ABI view of a register value; scalars inline (the common case), objects through Any.
inline KilnAny abi_of(const Any& v) {
  KilnAny a{v.type_code(), 0, {}};
  switch (v.type_code()) {
    case KILN_TYPE_NONE:
      return a;
    case KILN_TYPE_INT:
    case KILN_TYPE_BOOL:
      a.value.v_int64 = v.raw_int();
      return a;
    case KILN_TYPE_FLOAT:
      a.value.v_float64 = v.raw_float();
      return a;
    case KILN_TYPE_TENSOR:
      a.value.v_tensor = &static_cast<TensorObj*>(v.object())->dl;
      a.flags = kAnyFlagHostObject;
      return a;
    default:
      return v.to_abi();
  }
}

// Calls `callable` the way Function::call_abi does, without taking a reference to its owner
// (the function pool keeps it alive), and returns the raw result: the VM's hot path turns it
// into an Any only when a register receives it or it carries a reference to drop.
inline void call_callable(const KilnCallable& c, const KilnAny* args, int32_t n, KilnAny* ret) {
  // The result is read field by field afterwards, never copied whole: the callee's narrower
  // stores would not forward into a 16-byte load, a stall as long as the call itself.
  ret->type_code = KILN_TYPE_NONE;
  ret->flags = kAnyFlagAcceptsHostObjects;
  ret->value.v_int64 = 0;
  if (KilnError* err = c.call(c.self, args, n, ret)) [[unlikely]] {
    kiln::detail::raise_and_free(err);
  }
}

inline Any result_of(const KilnAny& ret) {
  switch (ret.type_code) {
    case KILN_TYPE_NONE:
      return Any();
    case KILN_TYPE_INT:
      return Any(ret.value.v_int64);
    case KILN_TYPE_FLOAT:
      return Any(ret.value.v_float64);
    default:
      return Any::from_abi_result(ret);
  }
}

}  // namespace

void VirtualMachineImpl::run_packed_call(const Instruction& in, Frame& frame,
                                         const Function::PackedBody& body, bool closure) {
  const size_t n = in.args.size() + (closure ? 1 : 0);
  if (frame.any_args.size() < n) [[unlikely]] {
    frame.any_args.resize(n);
  }
  Frame::AnySlot* slots = frame.any_args.data();
  size_t k = 0;
  // Each slot gets an Any constructed in place and never destroyed: views borrowed from the
  // registers, constants and pool (which outlive the call), or values holding no object.
  auto put = [&](auto&&... init) { new (slots[k++].bytes) Any(init...); };
  if (closure) put(Any::from_abi(context()));
  for (const Word word : in.args) {
    const Word value = arg_value(word);
    switch (arg_kind(word)) {
      case ArgKind::kRegister:
        if (value < kBeginSpecialReg) [[likely]] {
          put(Any::Borrow{}, read_register(frame, value));
        } else if (value == kVMRegister) {
          put(Any::from_abi(context()));
        } else {
          put(nullptr);
        }
        break;
      case ArgKind::kImmediate:
        put(static_cast<int64_t>(value));
        break;
      case ArgKind::kConstIdx:
        put(Any::Borrow{}, constants_[static_cast<size_t>(value)]);
        break;
      case ArgKind::kFuncIdx:
        put(Any::Borrow{}, func_pool_[static_cast<size_t>(value)]);
        break;
    }
  }
  Any result = body(std::launder(reinterpret_cast<const Any*>(slots)), static_cast<int32_t>(n));
  if (in.dst >= kBeginSpecialReg && !result.holds_object()) return;
  write_register(frame, in.dst, std::move(result));
}

void VirtualMachineImpl::run_call(const Word* w, Frame& frame) {
  // [Call, dst, func_idx, num_args, args...]
  const Instruction in{
      Opcode::kCall, w[1], w[2], std::span<const Word>(w + 4, static_cast<size_t>(w[3])), 0, 0};
  const CallTarget& target = call_targets_[static_cast<size_t>(in.func_idx)];
  // Host functions (builtins, VM closures) leave here; kernels, the hottest calls, fall through.
  if (target.body != nullptr && !instrument && profiler == nullptr) [[unlikely]] {
    run_packed_call(in, frame, *target.body, target.closure);
    return;
  }
  const size_t n = in.args.size();
  // Decoded arguments are borrowed views (no reference counting): the registers, constants
  // and pool entries they point into outlive the call.
  if (frame.call_args.size() < n + 1) [[unlikely]] {
    frame.call_args.resize(n + 1);
  }
  KilnAny* decoded = frame.call_args.data() + 1;
  for (size_t i = 0; i < n; ++i) {
    const Word word = in.args[i];
    const Word value = arg_value(word);
    switch (arg_kind(word)) {
      case ArgKind::kRegister:
        if (value < kBeginSpecialReg) [[likely]] {
          decoded[i] = abi_of(read_register(frame, value));
        } else if (value == kVMRegister) {
          decoded[i] = context();
        } else {
          decoded[i] = KilnAny{KILN_TYPE_NONE, 0, {}};
        }
        break;
      case ArgKind::kImmediate:
        decoded[i] = KilnAny{KILN_TYPE_INT, 0, {}};
        decoded[i].value.v_int64 = value;
        break;
      case ArgKind::kConstIdx:
        decoded[i] = constants_[static_cast<size_t>(value)].to_abi();
        break;
      case ArgKind::kFuncIdx:
        decoded[i] = func_pool_[static_cast<size_t>(value)].to_abi();
        break;
    }
  }
  if (instrument || profiler != nullptr) [[unlikely]] {
    run_call_hooked(in, frame, decoded, static_cast<int32_t>(n), target.closure);
    return;
  }
  KilnAny ret;
  if (!target.closure) [[likely]] {
    call_callable(*target.callable, decoded, static_cast<int32_t>(n), &ret);
  } else {
    frame.call_args[0] = context();
    call_callable(*target.callable, frame.call_args.data(), static_cast<int32_t>(n + 1), &ret);
  }
  // A dropped scalar result needs no Any; a dropped object is adopted and released.
  if (in.dst >= kBeginSpecialReg && !Any::is_object_code(ret.type_code)) return;
  write_register(frame, in.dst, result_of(ret));
}

namespace {

// "float32[1, 64], float32[64, 64]" (SPEC §3.1).
std::string shape_string(const std::vector<Tensor>& tensors) {
  std::vector<std::string> parts;
  for (const Tensor& t : tensors) {
    parts.push_back(fmt::format("{}[{}]", t.dtype().str(), fmt::join(t.shape(), ", ")));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

void VirtualMachineImpl::run_call_hooked(const Instruction& in, Frame& frame, const KilnAny* args,
                                         int32_t n, bool closure) {
  const Any& target = func_pool_[static_cast<size_t>(in.func_idx)];
  const std::string& symbol = exec->func_table[static_cast<size_t>(in.func_idx)].name;
  std::vector<Any> values;
  values.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) values.push_back(Any::from_abi(args[i]));
  Any result;
  auto call = [&]() {
    if (!closure) {
      return Function(Ref<FunctionObj>(static_cast<FunctionObj*>(target.object())))
          .call_abi(args, n);
    }
    frame.call_args[0] = context();
    return static_cast<ClosureObj*>(target.object())->impl.call_abi(frame.call_args.data(), n + 1);
  };
  bool skipped = false;
  if (instrument) {
    // Before the call: (func, symbol, true, none, args...) with dtypes as strings (§2.12).
    std::vector<Any> hook = {target, Any(symbol), Any(true), Any()};
    for (const Any& v : values) {
      hook.push_back(v.type_code() == KILN_TYPE_DTYPE ? Any(v.cast<DataType>().str()) : v);
    }
    const Any rv = instrument.call_packed(hook);
    skipped = rv.type_code() == KILN_TYPE_INT &&
              rv.raw_int() == static_cast<int64_t>(InstrumentReturn::kSkipRun);
  }
  if (!skipped) {
    // The profiler records calls with tensor arguments (registers and constants only) on the
    // device of the last one (§2.14).
    std::vector<Tensor> tensors;
    if (profiler != nullptr) {
      for (int32_t i = 0; i < n; ++i) {
        const ArgKind kind = arg_kind(in.args[static_cast<size_t>(i)]);
        if ((kind == ArgKind::kRegister || kind == ArgKind::kConstIdx) &&
            values[static_cast<size_t>(i)].type_code() == KILN_TYPE_TENSOR) {
          tensors.push_back(values[static_cast<size_t>(i)].cast<Tensor>());
        }
      }
    }
    const bool record = !tensors.empty();
    if (record) {
      profiler->start_call(
          symbol, tensors.back().device(),
          {{std::string(profiling::kArgumentShapesMetric), shape_string(tensors)}});
    }
    try {
      result = call();
    } catch (...) {
      if (record) profiler->stop_call();
      throw;
    }
    if (record) profiler->stop_call();
    if (instrument) {
      std::vector<Any> hook = {target, Any(symbol), Any(false), result};
      for (const Any& v : values) {
        hook.push_back(v.type_code() == KILN_TYPE_DTYPE ? Any(v.cast<DataType>().str()) : v);
      }
      instrument.call_packed(hook);
    }
  }
  write_register(frame, in.dst, std::move(result));
}

Any VirtualMachineImpl::invoke_closure(const Any& closure, const Any* args, int32_t num_args) {
  if (auto c = closure.as_object<ClosureObj>()) {
    const RunningScope running(this);  // the closure receives our context
    std::vector<KilnAny> packed;
    packed.reserve(static_cast<size_t>(num_args) + 1);
    packed.push_back(context());
    for (int32_t i = 0; i < num_args; ++i) packed.push_back(args[i].to_abi());
    return c->impl.call_abi(packed.data(), static_cast<int32_t>(packed.size()));
  }
  if (closure.type_code() == KILN_TYPE_FUNCTION) {
    return closure.cast<Function>().call_packed(std::vector<Any>(args, args + num_args));
  }
  throw TypeError(
      fmt::format("invoke_closure: expects a closure or a function, got {}", closure.type_name()));
}

Any VirtualMachineImpl::get_closure(const std::string& name) const {
  if (auto it = saved.find(name); it != saved.end()) return it->second;
  return vm_function(name);
}

Any VirtualMachineImpl::vm_function(const std::string& name) const {
  auto it = exec->func_map.find(name);
  if (it == exec->func_map.end()) throw ValueError(fmt::format("Unknown function: {}", name));
  const FuncInfo& info = exec->func_table[static_cast<size_t>(it->second)];
  if (info.kind != FuncKind::kVMFunc) {
    throw ValueError(fmt::format(
        "Cannot support closure with function kind {}: '{}' is a packed function of the executable",
        static_cast<int32_t>(info.kind), name));
  }
  return func_pool_[static_cast<size_t>(it->second)];
}

Any VirtualMachineImpl::convert_to_device(const Any& value) {
  if (value.type_code() == KILN_TYPE_TENSOR) {
    Tensor t = value.cast<Tensor>();
    // Under a budget only memory charged to it is kept as it is: the VM holds what it keeps
    // (inputs, saved arguments) for as long as it lives, whoever frees the original.
    const Object* root = t.get();
    while (const auto* view = dynamic_cast<const TensorObj*>(root)) root = view->storage.get();
    const auto* storage = dynamic_cast<const StorageObj*>(root);
    const bool charged = !budget || (storage != nullptr && charged_to(*storage, budget.get()));
    if (t.device() == devices[0] && t.get()->storage && charged) return value;
    // Other devices, and views of memory the VM does not own (DLTensor*), are copied.
    Tensor copy = empty_tensor(*allocators_[0], {t.shape().begin(), t.shape().end()}, t.dtype());
    copy.copy_from(t);
    return Any(copy);
  }
  if (auto array = value.as_object<ArrayObj>()) {
    std::vector<Any> items;
    for (const Any& item : array->items) items.push_back(convert_to_device(item));
    return make_array(std::move(items));
  }
  return value;
}

// ---- the public class ----

VirtualMachine::VirtualMachine(const Module& exec, std::vector<Device> devices,
                               MemoryConfig memory_cfg, bool profile) {
  const Executable* e = executable_of(exec);
  if (e == nullptr) {
    throw TypeError(
        fmt::format("VirtualMachine: expects a VM executable module ({}), got a {} module",
                    kExecutableModuleKind, exec.defined() ? exec.kind() : "null"));
  }
  impl_ = std::make_shared<VirtualMachineImpl>(std::make_shared<const Executable>(*e),
                                               exec.imports(), std::move(devices),
                                               *device_context_of(exec), memory_cfg, profile);
}

VirtualMachine::VirtualMachine(Executable exec, std::vector<Module> kernel_libraries,
                               std::vector<Device> devices, const DeviceContext& context,
                               MemoryConfig memory_cfg, bool profile) {
  exec.validate();
  impl_ = std::make_shared<VirtualMachineImpl>(std::make_shared<const Executable>(std::move(exec)),
                                               std::move(kernel_libraries), std::move(devices),
                                               context, memory_cfg, profile);
}

VirtualMachine::~VirtualMachine() = default;

const std::vector<Device>& VirtualMachine::devices() const { return impl_->devices; }
const Executable& VirtualMachine::executable() const { return *impl_->exec; }

bool VirtualMachine::has_function(const std::string& name) const {
  if (impl_->saved.count(name) != 0) return true;
  auto it = impl_->exec->func_map.find(name);
  return it != impl_->exec->func_map.end() &&
         impl_->exec->func_table[static_cast<size_t>(it->second)].kind == FuncKind::kVMFunc;
}

std::vector<std::string> VirtualMachine::saved_function_names() const {
  std::vector<std::string> names;
  for (const auto& [name, closure] : impl_->saved) names.push_back(name);
  return names;
}

Function VirtualMachine::get_function(const std::string& name) const {
  if (!has_function(name)) throw NotFoundError(fmt::format("Unknown function: {}", name));
  std::shared_ptr<VirtualMachineImpl> impl = impl_;
  // Resolved per call, so that a later save_function under this name takes effect.
  return Function::from_packed(name, [impl, name](const Any* args, int32_t n) -> Any {
    return impl->invoke_closure(impl->get_closure(name), args, n);
  });
}

Any VirtualMachine::invoke_closure(const Any& closure, const std::vector<Any>& args) const {
  return impl_->invoke_closure(closure, args.data(), static_cast<int32_t>(args.size()));
}

void VirtualMachine::save_function(const std::string& func, const std::string& saved_name,
                                   const std::vector<Any>& args, bool include_return) {
  Any closure = impl_->get_closure(func);
  std::vector<Any> bound;
  for (const Any& a : args) bound.push_back(impl_->convert_to_device(a));

  // Captured arguments go after the call's own (§2.4 BindLastArgs); the saved closure is a
  // plain function over the VM context like any other closure.
  Function impl = Function::from_packed(
      saved_name, [closure, bound, include_return](const Any* call, int32_t n) -> Any {
        VirtualMachineImpl* vm =
            VirtualMachineImpl::from_context(n > 0 ? call[0] : Any(), "saved function");
        std::vector<Any> all(call + 1, call + n);
        all.insert(all.end(), bound.begin(), bound.end());
        Any result = vm->invoke_closure(closure, all.data(), static_cast<int32_t>(all.size()));
        return include_return ? result : Any();
      });
  auto saved = make_object<ClosureObj>(saved_name, std::move(impl), bound, closure);
  if (saved->depth > kMaxValueNesting) {
    throw ValueError(fmt::format(
        "save_function: '{}' would nest {} deep (saved functions of saved functions, tuples), "
        "past the VM's limit of {}",
        saved_name, saved->depth, kMaxValueNesting));
  }
  impl_->saved[saved_name] = Any::object(std::move(saved));
}

void VirtualMachine::set_input(const std::string& func, const std::vector<Any>& args) {
  auto it = impl_->exec->func_map.find(func);
  if (it == impl_->exec->func_map.end())
    throw ValueError(fmt::format("Unknown function: {}", func));
  const FuncInfo& info = impl_->exec->func_table[static_cast<size_t>(it->second)];
  if (static_cast<int64_t>(args.size()) != info.num_args) {
    throw TypeError(fmt::format(
        "The number of provided parameters doesn't match the number of arguments for {}: "
        "expected {}, got {}",
        func, info.num_args, args.size()));
  }
  std::vector<Any> converted;
  for (const Any& a : args) converted.push_back(impl_->convert_to_device(a));
  impl_->inputs[func] = std::move(converted);
}

void VirtualMachine::invoke_stateful(const std::string& func) {
  if (impl_->exec->func_map.count(func) == 0) {
    throw ValueError(fmt::format("Unknown function: {}", func));
  }
  auto it = impl_->inputs.find(func);
  if (it == impl_->inputs.end()) {
    throw ValueError(
        fmt::format("No inputs set for stateful call of {}; use `set_input` first.", func));
  }
  const std::vector<Any> args = it->second;
  Any closure = impl_->vm_function(func);
  impl_->outputs[func] =
      impl_->invoke_closure(closure, args.data(), static_cast<int32_t>(args.size()));
}

namespace {

// The value of `func`'s saved output at `index` (nested tuples), with the errors of §2.11.
Any indexed_output(const VirtualMachineImpl& impl, const std::string& func,
                   const std::vector<int64_t>& index) {
  auto it = impl.outputs.find(func);
  if (it == impl.outputs.end()) {
    throw ValueError(fmt::format(
        "No output saved for call of \"{}\"; use `invoke_stateful` to call it first.", func));
  }
  Any value = it->second;
  for (int64_t i : index) {
    auto array = value.as_object<ArrayObj>();
    if (!array) throw ValueError("Attempted to index into an object that is not an Array.");
    if (i < 0 || static_cast<size_t>(i) >= array->items.size()) {
      throw IndexError(fmt::format("Invalid index ({} >= {}).", i, array->items.size()));
    }
    value = array->items[static_cast<size_t>(i)];
  }
  return value;
}

}  // namespace

Any VirtualMachine::get_outputs(const std::string& func) const {
  return indexed_output(*impl_, func, {});
}

int64_t VirtualMachine::get_output_arity(const std::string& func,
                                         const std::vector<int64_t>& index) const {
  const Any value = indexed_output(*impl_, func, index);
  auto array = value.as_object<ArrayObj>();
  return array ? static_cast<int64_t>(array->items.size()) : -1;
}

Any VirtualMachine::get_output(const std::string& func, const std::vector<int64_t>& index) const {
  Any value = indexed_output(*impl_, func, index);
  if (value.as_object<ArrayObj>()) {
    throw ValueError(
        "`get_output` cannot return a tuple for RPC compatibility. Please specify another index "
        "argument.");
  }
  return value;
}

void VirtualMachine::set_instrument(Function f) { impl_->instrument = std::move(f); }

void VirtualMachine::set_profiler(profiling::Profiler* profiler) { impl_->profiler = profiler; }

TimeEvaluator VirtualMachine::time_evaluator(const std::string& name, Device device,
                                             TimeEvaluatorOptions options) const {
  return TimeEvaluator(module().get_function(name), device, std::move(options),
                       impl_->device_context);
}

profiling::Report VirtualMachine::profile(const std::string& func, const std::vector<Any>& args) {
  if (!impl_->profiling_enabled) {
    throw RuntimeError("profile() needs a VirtualMachine made with profile = true");
  }
  Any closure = impl_->get_closure(func);
  std::vector<Any> inputs;
  auto set = impl_->inputs.find(func);
  if (set != impl_->inputs.end()) {
    if (!args.empty())
      throw ValueError(fmt::format("Inputs are already provided by set_input for {}.", func));
    inputs = set->second;
  } else {
    for (const Any& a : args) inputs.push_back(impl_->convert_to_device(a));
  }
  auto call = [&]() {
    impl_->invoke_closure(closure, inputs.data(), static_cast<int32_t>(inputs.size()));
  };
  // Warm-up, not recorded (and said so in the configuration), synchronized so that none of its
  // work runs into the profiled call.
  const auto warmup_start = std::chrono::steady_clock::now();
  call();
  for (const Device& d : impl_->devices) impl_->device_context.backend(d.type)->synchronize(d.id);
  const double warmup_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - warmup_start)
          .count();
  profiling::Profiler profiler(
      impl_->devices, {},
      {{"Executor", std::string("VM")},
       {std::string(profiling::kWarmupCallsConfig), profiling::Count{1}},
       {std::string(profiling::kWarmupDurationConfig), profiling::Duration{warmup_us}}},
      impl_->device_context);
  struct Attach {
    VirtualMachineImpl* vm;
    ~Attach() { vm->profiler = nullptr; }
  } attach{impl_.get()};
  profiler.start();
  impl_->profiler = &profiler;
  call();
  impl_->profiler = nullptr;
  profiler.stop();
  return profiler.report();
}

}  // namespace kiln::vm
