// SPDX-License-Identifier: Apache-2.0
// The VM builtins (SPEC.md §2.7), registered as global functions named "vm.builtin.*" (the
// reference's names, so front ends that emit them run unchanged). docs/vm.md lists them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <numeric>
#include <span>

#include "kiln/error.h"
#include "kiln/function.h"
#include "vm/vm_impl.h"

namespace kiln::vm {
namespace {

// The error context a builtin was given (TVM's compiler passes a string naming the function,
// parameter and annotation), read only when an error is reported: the checks run on every call
// and must not copy it.
struct ErrCtx {
  const Any& value;
};

}  // namespace
}  // namespace kiln::vm

template <>
struct fmt::formatter<kiln::vm::ErrCtx> : fmt::formatter<std::string> {
  auto format(const kiln::vm::ErrCtx& c, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(
        c.value.type_code() == KILN_TYPE_STRING ? c.value.cast<std::string>() : std::string(), ctx);
  }
};

namespace kiln::vm {
namespace {

void expect_args(const char* name, int32_t n, int32_t min, int32_t max) {
  if (n < min || n > max) {
    throw TypeError(min == max
                        ? fmt::format("{} takes {} arguments, got {}", name, min, n)
                        : fmt::format("{} takes {} to {} arguments, got {}", name, min, max, n));
  }
}

std::vector<int64_t> shape_arg(const Any& v, const char* who) {
  if (v.type_code() == KILN_TYPE_SHAPE) return v.cast<std::vector<int64_t>>();
  throw TypeError(fmt::format("{}: expects a shape, got {}", who, v.type_name()));
}

// A human name of a value's kind, as the reference prints it in check_* errors.
std::string kind_of(const Any& v) {
  if (v.type_code() == kTypeObject) return v.object()->type_key();
  return v.type_name();
}

int64_t* heap_data(const Any& heap, const char* who) {
  if (heap.is_none()) return nullptr;
  Tensor t = heap.cast<Tensor>();
  if (t.dtype() != DataType::Int(64) || t.device().type != kDLCPU) {
    throw TypeError(fmt::format("{}: the shape heap must be an int64 host tensor", who));
  }
  return static_cast<int64_t*>(t.data());
}

int64_t heap_at(int64_t* heap, int64_t numel, int64_t index, const char* who) {
  if (heap == nullptr || index < 0 || index >= numel) {
    throw IndexError(fmt::format("{}: shape heap index {} out of range", who, index));
  }
  return heap[index];
}

int64_t heap_size(const Any& heap) { return heap.is_none() ? 0 : heap.cast<Tensor>().numel(); }

enum MatchShapeCode : int64_t {
  kAssertEqualToImm = 0,
  kStoreToHeap = 1,
  kNoOp = 2,
  kAssertEqualToLoad = 3
};
enum MakeShapeCode : int64_t { kUseImm = 0, kLoadShape = 1 };

// Applies one match code to `value`: dimension `dim` of a shape, or a PrimValue (dim < 0).
void match_value(int64_t value, int64_t* heap, int64_t heap_numel, int64_t code, int64_t v,
                 ErrCtx err_ctx, int64_t dim) {
  const auto what = [dim] {
    return dim < 0 ? std::string("PrimValue") : fmt::format("shape[{}]", dim);
  };
  switch (code) {
    case kAssertEqualToImm:
      if (value != v) {
        throw RuntimeError(fmt::format("{} match_cast error, {} mismatch to specified constant.",
                                       err_ctx, what()));
      }
      return;
    case kStoreToHeap:
      if (heap == nullptr || v < 0 || v >= heap_numel) {
        throw IndexError(fmt::format("{}: shape heap index {} out of range", err_ctx, v));
      }
      heap[v] = value;
      return;
    case kNoOp:
      return;
    case kAssertEqualToLoad:
      if (value != heap_at(heap, heap_numel, v, "match_shape")) {
        throw RuntimeError(fmt::format(
            "{} match_cast error, {} mismatch to a previous populated value.", err_ctx, what()));
      }
      return;
    default:
      throw ValueError(fmt::format("{}: unknown match code {}", err_ctx, code));
  }
}

Any alloc_storage(const Any* a, int32_t n) {
  expect_args("vm.builtin.alloc_storage", n, 4, 5);
  VirtualMachineImpl* vm = VirtualMachineImpl::from_context(a[0], "vm.builtin.alloc_storage");
  const std::vector<int64_t> shape = shape_arg(a[1], "vm.builtin.alloc_storage");
  const auto index = a[2].cast<int64_t>();
  const DataType dtype = a[3].cast<DataType>();
  if (n == 5 && !a[4].is_none()) {
    const std::string scope = a[4].cast<std::string>();
    if (!scope.empty() && scope != "global") {
      throw ValueError(
          fmt::format("vm.builtin.alloc_storage: memory scope '{}' is not supported "
                      "(only global)",
                      scope));
    }
  }
  auto storage = vm->alloc_storage(index, checked_nbytes(shape, dtype, "vm.builtin.alloc_storage"),
                                   alignment_of(dtype));
  return Any::object(storage);
}

Any alloc_tensor(const Any* a, int32_t n) {
  expect_args("vm.builtin.alloc_tensor", n, 4, 5);
  auto storage = a[0].as_object<StorageObj>();
  if (!storage) {
    throw TypeError(fmt::format("vm.builtin.alloc_tensor: argument 0 expects a vm.Storage, got {}",
                                kind_of(a[0])));
  }
  return Any(tensor_in_storage(storage, a[1].cast<int64_t>(),
                               shape_arg(a[2], "vm.builtin.alloc_tensor"), a[3].cast<DataType>()));
}

Any alloc_shape_heap(const Any* a, int32_t n) {
  expect_args("vm.builtin.alloc_shape_heap", n, 2, 2);
  VirtualMachineImpl* vm = VirtualMachineImpl::from_context(a[0], "vm.builtin.alloc_shape_heap");
  const auto size = a[1].cast<int64_t>();
  if (size < 0)
    throw ValueError(fmt::format("vm.builtin.alloc_shape_heap: negative size {}", size));
  return Any(empty_tensor(vm->allocator(vm->devices.size() - 1), {size}, DataType::Int(64)));
}

Any match_shape(const Any* a, int32_t n) {
  if (n < 4)
    throw TypeError(fmt::format("vm.builtin.match_shape takes at least 4 arguments, got {}", n));
  const ErrCtx err_ctx{a[n - 1]};
  Tensor tensor;
  std::vector<int64_t> dims;
  std::span<const int64_t> shape;
  if (a[0].type_code() == KILN_TYPE_TENSOR) {
    tensor = a[0].cast<Tensor>();
    shape = tensor.shape();
  } else if (a[0].type_code() == KILN_TYPE_SHAPE) {
    dims = a[0].cast<std::vector<int64_t>>();
    shape = dims;
  } else {
    throw TypeError(
        fmt::format("{} match_cast expects a tensor or a shape, got {}", err_ctx, kind_of(a[0])));
  }
  int64_t* heap = heap_data(a[1], "vm.builtin.match_shape");
  const int64_t heap_numel = heap_size(a[1]);
  const auto size = a[2].cast<int64_t>();
  if (n != 4 + 2 * size) {
    throw TypeError(fmt::format("vm.builtin.match_shape: {} dimensions need {} arguments, got {}",
                                size, 4 + 2 * size, n));
  }
  if (static_cast<int64_t>(shape.size()) != size) {
    throw RuntimeError(fmt::format("{} match_cast shape size mismatch.", err_ctx));
  }
  for (int64_t i = 0; i < size; ++i) {
    match_value(shape[static_cast<size_t>(i)], heap, heap_numel, a[3 + 2 * i].cast<int64_t>(),
                a[4 + 2 * i].cast<int64_t>(), err_ctx, i);
  }
  return Any();
}

Any match_prim_value(const Any* a, int32_t n) {
  expect_args("vm.builtin.match_prim_value", n, 5, 5);
  match_value(a[0].cast<int64_t>(), heap_data(a[1], "vm.builtin.match_prim_value"), heap_size(a[1]),
              a[2].cast<int64_t>(), a[3].cast<int64_t>(), ErrCtx{a[4]}, -1);
  return Any();
}

Any make_shape(const Any* a, int32_t n) {
  if (n < 2)
    throw TypeError(fmt::format("vm.builtin.make_shape takes at least 2 arguments, got {}", n));
  int64_t* heap = heap_data(a[0], "vm.builtin.make_shape");
  const int64_t heap_numel = heap_size(a[0]);
  const auto size = a[1].cast<int64_t>();
  if (size < 0 || n != 2 + 2 * size) {
    throw TypeError(fmt::format("vm.builtin.make_shape: {} dimensions need {} arguments, got {}",
                                size, 2 + 2 * size, n));
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < size; ++i) {
    const auto code = a[2 + 2 * i].cast<int64_t>();
    const auto v = a[3 + 2 * i].cast<int64_t>();
    if (code == kUseImm) {
      dims.push_back(v);
    } else if (code == kLoadShape) {
      dims.push_back(heap_at(heap, heap_numel, v, "vm.builtin.make_shape"));
    } else {
      throw ValueError(fmt::format("vm.builtin.make_shape: unknown code {}", code));
    }
  }
  return Any::shape(std::move(dims));
}

Any make_prim_value(const Any* a, int32_t n) {
  expect_args("vm.builtin.make_prim_value", n, 3, 3);
  const auto code = a[1].cast<int64_t>();
  const auto v = a[2].cast<int64_t>();
  if (code == kUseImm) return Any(v);
  if (code == kLoadShape) {
    return Any(heap_at(heap_data(a[0], "vm.builtin.make_prim_value"), heap_size(a[0]), v,
                       "vm.builtin.make_prim_value"));
  }
  throw ValueError(fmt::format("vm.builtin.make_prim_value: unknown code {}", code));
}

Any check_tensor_info(const Any* a, int32_t n) {
  expect_args("vm.builtin.check_tensor_info", n, 3, 4);
  const ErrCtx err_ctx{a[n - 1]};
  if (a[0].type_code() != KILN_TYPE_TENSOR) {
    throw TypeError(fmt::format("{} expect a Tensor but get {}", err_ctx, kind_of(a[0])));
  }
  const Tensor t = a[0].cast<Tensor>();
  const auto ndim = a[1].cast<int64_t>();
  if (ndim != -1 && t.ndim() != ndim) {
    throw ValueError(
        fmt::format("{} expect Tensor with ndim {} but get {}", err_ctx, ndim, t.ndim()));
  }
  // None, "" and the void dtype all mean "any dtype" (the reference passes "" when the
  // annotation has no dtype).
  const bool no_dtype = n < 4 || a[2].is_none() ||
                        (a[2].type_code() == KILN_TYPE_STRING && a[2].cast<std::string>().empty());
  if (!no_dtype) {
    const DataType dtype = a[2].cast<DataType>();
    const bool is_void = dtype.code == kDLOpaqueHandle && dtype.bits == 0;
    if (!is_void && dtype != t.dtype()) {
      throw ValueError(fmt::format("{} expect Tensor with dtype {} but get {}", err_ctx,
                                   dtype.str(), t.dtype().str()));
    }
  }
  return Any();
}

Any check_shape_info(const Any* a, int32_t n) {
  expect_args("vm.builtin.check_shape_info", n, 3, 3);
  const ErrCtx err_ctx{a[2]};
  if (a[0].type_code() != KILN_TYPE_SHAPE) {
    throw TypeError(fmt::format("{} expect Shape but get {}", err_ctx, kind_of(a[0])));
  }
  const auto ndim = a[1].cast<int64_t>();
  const auto dims = a[0].cast<std::vector<int64_t>>();
  if (ndim != -1 && static_cast<int64_t>(dims.size()) != ndim) {
    throw ValueError(
        fmt::format("{} expect Shape with ndim {} but get {}", err_ctx, ndim, dims.size()));
  }
  return Any();
}

Any check_prim_value_info(const Any* a, int32_t n) {
  expect_args("vm.builtin.check_prim_value_info", n, 3, 3);
  const ErrCtx err_ctx{a[2]};
  if (a[0].holds_object()) {
    throw TypeError(fmt::format("{}, expect prim value, but get {}", err_ctx, kind_of(a[0])));
  }
  const DataType dtype = a[1].cast<DataType>();
  switch (dtype.code) {
    case KILN_DL_BOOL:
      (void)a[0].cast<bool>();
      break;
    case kDLInt:
    case kDLUInt:
      (void)a[0].cast<int64_t>();
      break;
    case kDLFloat:
      (void)a[0].cast<double>();
      break;
    case kDLOpaqueHandle:
      break;
    default:
      throw TypeError(fmt::format("{}, unsupported dtype {}", err_ctx, dtype.str()));
  }
  return Any();
}

Any check_tuple_info(const Any* a, int32_t n) {
  expect_args("vm.builtin.check_tuple_info", n, 3, 3);
  const ErrCtx err_ctx{a[2]};
  auto array = a[0].as_object<ArrayObj>();
  if (!array) throw TypeError(fmt::format("{} expect a Tuple but get {}", err_ctx, kind_of(a[0])));
  const auto size = a[1].cast<int64_t>();
  if (static_cast<int64_t>(array->items.size()) != size) {
    throw ValueError(
        fmt::format("{} expect a Tuple with {} elements,  but get a Tuple with {} elements.",
                    err_ctx, size, array->items.size()));
  }
  return Any();
}

Any check_func_info(const Any* a, int32_t n) {
  expect_args("vm.builtin.check_func_info", n, 2, 2);
  if (a[0].type_code() != KILN_TYPE_FUNCTION && !a[0].as_object<ClosureObj>()) {
    throw TypeError(fmt::format("{} expect a Function but get {}", ErrCtx{a[1]}, kind_of(a[0])));
  }
  return Any();
}

Any shape_of(const Any* a, int32_t n) {
  expect_args("vm.builtin.shape_of", n, 1, 1);
  if (a[0].type_code() != KILN_TYPE_TENSOR) {
    throw TypeError(fmt::format("vm.builtin.shape_of expects a tensor, got {}", kind_of(a[0])));
  }
  const Tensor t = a[0].cast<Tensor>();
  return Any::shape({t.shape().begin(), t.shape().end()});
}

Any reshape(const Any* a, int32_t n) {
  expect_args("vm.builtin.reshape", n, 2, 2);
  const Tensor t = a[0].cast<Tensor>();
  std::vector<int64_t> shape = shape_arg(a[1], "vm.builtin.reshape");
  const int64_t numel =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  if (numel != t.numel() || !t.is_contiguous()) {
    throw ValueError(
        fmt::format("vm.builtin.reshape: cannot view {} as [{}]", t.str(), fmt::join(shape, ", ")));
  }
  auto obj = make_object<TensorObj>();
  obj->shape = std::move(shape);
  obj->storage = t.get()->storage ? t.get()->storage : Ref<Object>(t.get());
  obj->backend = t.get()->backend;
  obj->dl = *t.dl();
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.shape = obj->shape.data();
  obj->dl.strides = nullptr;
  return Any(Tensor(std::move(obj)));
}

// What a VM's copying builtins allocate through: its devices' context, and the budget its
// allocations are charged to (null: none).
struct CopyTarget {
  std::shared_ptr<const DeviceContext> context;
  std::shared_ptr<MemoryBudget> budget;
};

// A copy of `t` on `d`. Under a budget it comes from an allocator charging it, so that a VM's
// copies count against its owner's limit as its other allocations do.
Tensor copy_on(const Tensor& t, Device d, const CopyTarget& target) {
  if (!target.budget) return t.to(d, *target.context);
  auto allocator =
      make_allocator(MemoryConfig::Kind::kNaive, target.context->backend(d.type), d, target.budget);
  Tensor copy = empty_tensor(*allocator, {t.shape().begin(), t.shape().end()}, t.dtype());
  copy.copy_from(t);
  return copy;
}

// vm.builtin.to_device(t, type, id[, scope]) through `target`, or without one (the global
// registry's version) through the tensor's own backend or host memory only.
Any to_device(const Any* a, int32_t n, const CopyTarget* target) {
  expect_args("vm.builtin.to_device", n, 3, 4);
  const Tensor t = a[0].cast<Tensor>();
  Device d{a[1].cast<int32_t>(), a[2].cast<int32_t>()};
  if (target != nullptr) return Any(copy_on(t, d, *target));
  if (d.type == kDLCPU) return Any(t.to_host());
  throw ValueError(
      fmt::format("vm.builtin.to_device: moving {} to {} needs a runtime; call it from a VM",
                  t.str(), d.str()));
}

// vm.builtin.ensure_zero_offset(t): `t`, or a copy at offset 0 on its device.
Any ensure_zero_offset(const Any* a, int32_t n, const CopyTarget* target) {
  expect_args("vm.builtin.ensure_zero_offset", n, 1, 1);
  const Tensor t = a[0].cast<Tensor>();
  if (t.dl()->byte_offset == 0) return a[0];
  if (target != nullptr) return Any(copy_on(t, t.device(), *target));
  if (t.device().type == kDLCPU) return Any(t.to_host());
  throw ValueError(fmt::format(
      "vm.builtin.ensure_zero_offset: copying {} needs a runtime; call it from a VM", t.str()));
}

Any read_if_cond(const Any* a, int32_t n) {
  expect_args("vm.builtin.read_if_cond", n, 1, 1);
  if (a[0].type_code() == KILN_TYPE_INT || a[0].type_code() == KILN_TYPE_BOOL) {
    return Any(a[0].raw_int() != 0 ? int64_t{1} : int64_t{0});
  }
  if (a[0].type_code() == KILN_TYPE_TENSOR) {
    const Tensor t = a[0].cast<Tensor>().to_host();
    const DataType dt = t.dtype();
    if ((dt.code == kDLInt || dt.code == kDLUInt || dt.code == KILN_DL_BOOL) && dt.lanes == 1 &&
        t.numel() >= 1) {
      uint64_t raw = 0;
      std::memcpy(&raw, t.data(), dt.bytes());
      return Any(raw != 0 ? int64_t{1} : int64_t{0});
    }
    throw TypeError(fmt::format("vm.builtin.read_if_cond: cannot read {} as a condition", t.str()));
  }
  throw TypeError(
      fmt::format("vm.builtin.read_if_cond: cannot read {} as a condition", kind_of(a[0])));
}

Any tensor_to_shape(const Any* a, int32_t n) {
  expect_args("vm.builtin.tensor_to_shape", n, 1, 1);
  const Tensor t = a[0].cast<Tensor>().to_host();
  const DataType dt = t.dtype();
  if (t.ndim() != 1 || dt.code != kDLInt || (dt.bits != 16 && dt.bits != 32 && dt.bits != 64)) {
    throw TypeError(fmt::format(
        "vm.builtin.tensor_to_shape expects a 1-D int16/32/64 tensor, got {}", t.str()));
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const char* p = static_cast<const char*>(t.data()) + i * static_cast<int64_t>(dt.bytes());
    if (dt.bits == 16) dims.push_back(*reinterpret_cast<const int16_t*>(p));
    if (dt.bits == 32) dims.push_back(*reinterpret_cast<const int32_t*>(p));
    if (dt.bits == 64) dims.push_back(*reinterpret_cast<const int64_t*>(p));
  }
  return Any::shape(std::move(dims));
}

Any tuple_getitem(const Any* a, int32_t n) {
  expect_args("vm.builtin.tuple_getitem", n, 2, 2);
  auto array = a[0].as_object<ArrayObj>();
  if (!array)
    throw TypeError(fmt::format("vm.builtin.tuple_getitem expects a tuple, got {}", kind_of(a[0])));
  const auto i = a[1].cast<int64_t>();
  if (i < 0 || static_cast<size_t>(i) >= array->items.size()) {
    throw IndexError(
        fmt::format("vm.builtin.tuple_getitem: index {} out of {}", i, array->items.size()));
  }
  return array->items[static_cast<size_t>(i)];
}

Any tuple_reset_item(const Any* a, int32_t n) {
  expect_args("vm.builtin.tuple_reset_item", n, 2, 2);
  auto array = a[0].as_object<ArrayObj>();
  if (!array)
    throw TypeError(
        fmt::format("vm.builtin.tuple_reset_item expects a tuple, got {}", kind_of(a[0])));
  const auto i = a[1].cast<int64_t>();
  if (i < 0 || static_cast<size_t>(i) >= array->items.size()) {
    throw IndexError(
        fmt::format("vm.builtin.tuple_reset_item: index {} out of {}", i, array->items.size()));
  }
  array->items[static_cast<size_t>(i)] = Any();
  return Any();
}

Any call_tir_dyn(const Any* a, int32_t n) {
  if (n < 2) throw TypeError("vm.builtin.call_tir_dyn takes a function, tensors and a shape");
  std::vector<Any> args(a + 1, a + n - 1);
  for (int64_t d : shape_arg(a[n - 1], "vm.builtin.call_tir_dyn")) args.emplace_back(d);
  return a[0].cast<Function>().call_packed(args);
}

Any make_closure(const Any* a, int32_t n) {
  expect_args("vm.builtin.make_closure", n, 1, 1 << 20);
  auto closure = a[0].as_object<ClosureObj>();
  if (!closure)
    throw TypeError(
        fmt::format("vm.builtin.make_closure expects a closure, got {}", kind_of(a[0])));
  if (n == 1) return a[0];  // nothing to capture: the same closure
  auto captured = std::make_shared<const std::vector<Any>>(a + 1, a + n);
  auto made = make_object<ClosureObj>(closure->func_name, Function(), *captured, a[0]);
  if (made->depth > kMaxValueNesting) {
    throw ValueError(
        fmt::format("vm.builtin.make_closure: a closure of '{}' nested {} deep passes "
                    "the VM's limit of {}",
                    closure->func_name, made->depth, kMaxValueNesting));
  }
  Function inner = closure->impl;
  // The new closure appends the captured values after the call's arguments (§2.4).
  Function impl =
      Function::from_packed(closure->func_name, [inner, captured](const Any* call, int32_t m) {
        std::vector<Any> all(call, call + m);
        all.insert(all.end(), captured->begin(), captured->end());
        return inner.call_packed(all);
      });
  made->impl = std::move(impl);
  return Any::object(std::move(made));
}

Any invoke_closure(const Any* a, int32_t n) {
  expect_args("vm.builtin.invoke_closure", n, 2, 1 << 20);
  VirtualMachineImpl* vm = VirtualMachineImpl::from_context(a[0], "vm.builtin.invoke_closure");
  return vm->invoke_closure(a[1], a + 2, n - 2);
}

Any memory_manager_clear(const Any* a, int32_t n) {
  expect_args("vm.builtin.memory_manager.clear", n, 0, 1);
  if (n == 1)
    VirtualMachineImpl::from_context(a[0], "vm.builtin.memory_manager.clear")->clear_allocators();
  return Any();
}

const bool builtins_registered = [] {
  using Body = Any (*)(const Any*, int32_t);
  const std::pair<const char*, Body> builtins[] = {
      {"vm.builtin.alloc_storage", &alloc_storage},
      {"vm.builtin.alloc_tensor", &alloc_tensor},
      {"vm.builtin.alloc_shape_heap", &alloc_shape_heap},
      {"vm.builtin.match_shape", &match_shape},
      {"vm.builtin.match_prim_value", &match_prim_value},
      {"vm.builtin.make_shape", &make_shape},
      {"vm.builtin.make_prim_value", &make_prim_value},
      {"vm.builtin.check_tensor_info", &check_tensor_info},
      {"vm.builtin.check_shape_info", &check_shape_info},
      {"vm.builtin.check_prim_value_info", &check_prim_value_info},
      {"vm.builtin.check_tuple_info", &check_tuple_info},
      {"vm.builtin.check_func_info", &check_func_info},
      {"vm.builtin.null_value",
       [](const Any*, int32_t n) {
         expect_args("vm.builtin.null_value", n, 0, 0);
         return Any();
       }},
      {"vm.builtin.copy",
       [](const Any* a, int32_t n) {
         expect_args("vm.builtin.copy", n, 1, 1);
         return a[0];
       }},
      {"vm.builtin.shape_of", &shape_of},
      {"vm.builtin.reshape", &reshape},
      {"vm.builtin.to_device", [](const Any* a, int32_t n) { return to_device(a, n, nullptr); }},
      {"vm.builtin.ensure_zero_offset",
       [](const Any* a, int32_t n) { return ensure_zero_offset(a, n, nullptr); }},
      {"vm.builtin.read_if_cond", &read_if_cond},
      {"vm.builtin.tensor_to_shape", &tensor_to_shape},
      {"vm.builtin.make_tuple",
       [](const Any* a, int32_t n) { return make_array(std::vector<Any>(a, a + n)); }},
      {"vm.builtin.tuple_getitem", &tuple_getitem},
      {"vm.builtin.tuple_reset_item", &tuple_reset_item},
      {"vm.builtin.call_tir_dyn", &call_tir_dyn},
      {"vm.builtin.make_closure", &make_closure},
      {"vm.builtin.invoke_closure", &invoke_closure},
      {"vm.builtin.memory_manager.clear", &memory_manager_clear},
  };
  for (const auto& [name, body] : builtins) {
    registry::set(name, Function::from_packed(name, body), true);
  }
  return true;
}();

}  // namespace

std::optional<Function> context_builtin(const std::string& name, const DeviceContext& context,
                                        std::shared_ptr<MemoryBudget> budget) {
  // The function may outlive the VM that looked it up (a closure escapes): it keeps the runtime.
  auto target = std::make_shared<const CopyTarget>(CopyTarget{context.retain(), std::move(budget)});
  if (name == "vm.builtin.to_device") {
    return Function::from_packed(
        name, [target](const Any* a, int32_t n) { return to_device(a, n, target.get()); });
  }
  if (name == "vm.builtin.ensure_zero_offset") {
    return Function::from_packed(
        name, [target](const Any* a, int32_t n) { return ensure_zero_offset(a, n, target.get()); });
  }
  return std::nullopt;
}

}  // namespace kiln::vm
