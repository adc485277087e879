// SPDX-License-Identifier: Apache-2.0
#include "kiln/any.h"

#include <fmt/format.h>

#include <cstddef>
#include <limits>

#include "ffi/objects.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/module.h"
#include "kiln/sdk/any_cast.hpp"
#include "kiln/tensor.h"

namespace kiln {
namespace {

using ffi::BytesObj;
using ffi::ShapeObj;
using ffi::StringObj;

// Offset of TensorObj::dl inside a TensorObj, measured once (TensorObj is polymorphic, so
// offsetof is not available).
TensorObj* tensor_obj_from_dl(DLTensor* dl) {
  static const std::ptrdiff_t offset = [] {
    TensorObj probe;
    return reinterpret_cast<char*>(&probe.dl) - reinterpret_cast<char*>(&probe);
  }();
  return reinterpret_cast<TensorObj*>(reinterpret_cast<char*>(dl) - offset);
}

[[noreturn]] void cast_error(const char* expected, const Any& v) {
  throw TypeError(fmt::format("expected {}, got {}", expected, v.type_name()));
}

}  // namespace

const char* type_code_name(int32_t code) {
  if (code == kTypeModule) return "module";
  if (code == kTypeObject) return "object";
  return sdk::type_code_name(code);
}

Any::Any(const char* s) : Any(std::string_view(s)) {}
Any::Any(const std::string& s) : Any(std::string_view(s)) {}
Any::Any(std::string_view s) : code_(KILN_TYPE_STRING) {
  v_.obj = new StringObj(std::string(s));
  v_.obj->retain();
}
Any::Any(const Tensor& t) {
  if (!t.defined()) return;
  code_ = KILN_TYPE_TENSOR;
  v_.obj = t.get();
  v_.obj->retain();
}
Any::Any(const Function& f) {
  if (!f) return;
  code_ = KILN_TYPE_FUNCTION;
  v_.obj = f.get();
  v_.obj->retain();
}
Any::Any(const Module& m) {
  if (!m.defined()) return;
  code_ = kTypeModule;
  v_.obj = m.get();
  v_.obj->retain();
}
Any Any::bytes(std::string_view data) {
  Any a;
  a.code_ = KILN_TYPE_BYTES;
  a.v_.obj = new BytesObj(std::string(data));
  a.v_.obj->retain();
  return a;
}
Any Any::object(Ref<Object> obj) {
  Any a;
  if (!obj) return a;
  a.code_ = kTypeObject;
  a.v_.obj = obj.detach();  // the reference moves into the Any
  return a;
}
Any Any::shape(std::vector<int64_t> dims) {
  Any a;
  a.code_ = KILN_TYPE_SHAPE;
  a.v_.obj = new ShapeObj(std::move(dims));
  a.v_.obj->retain();
  return a;
}

KilnAny Any::to_abi() const {
  KilnAny a{code_, 0, {}};
  switch (code_) {
    case KILN_TYPE_NONE:
      a.value.v_int64 = 0;
      break;
    case KILN_TYPE_BOOL:
    case KILN_TYPE_INT:
    case KILN_TYPE_OPAQUE:
      a.value.v_int64 = v_.i;
      break;
    case KILN_TYPE_FLOAT:
      a.value.v_float64 = v_.d;
      break;
    case KILN_TYPE_DEVICE:
      a.value.v_device = v_.dev;
      break;
    case KILN_TYPE_DTYPE:
      a.value.v_dtype = v_.dt;
      break;
    case KILN_TYPE_STRING:
      a.value.v_str = static_cast<StringObj*>(v_.obj)->value.c_str();
      break;
    case KILN_TYPE_BYTES:
      a.value.v_bytes = &static_cast<BytesObj*>(v_.obj)->view;
      break;
    case KILN_TYPE_SHAPE:
      a.value.v_shape = &static_cast<ShapeObj*>(v_.obj)->view;
      break;
    case KILN_TYPE_TENSOR:
      a.value.v_tensor = &static_cast<TensorObj*>(v_.obj)->dl;
      a.flags = kAnyFlagHostObject;
      break;
    case KILN_TYPE_FUNCTION:
      a.value.v_callable = &static_cast<FunctionObj*>(v_.obj)->callable();
      a.flags = kAnyFlagHostObject;
      break;
    case kTypeModule:
    case kTypeObject:
      a.value.v_ptr = v_.obj;
      a.flags = kAnyFlagHostObject;
      break;
    default:
      break;
  }
  return a;
}

Any Any::from_abi(const KilnAny& v) {
  Any a;
  switch (v.type_code) {
    case KILN_TYPE_NONE:
      return a;
    case KILN_TYPE_BOOL:
      return Any(v.value.v_int64 != 0);
    case KILN_TYPE_INT:
      return Any(v.value.v_int64);
    case KILN_TYPE_FLOAT:
      return Any(v.value.v_float64);
    case KILN_TYPE_DEVICE:
      return Any(Device::from_dlpack(v.value.v_device));
    case KILN_TYPE_DTYPE:
      return Any(DataType(v.value.v_dtype));
    case KILN_TYPE_STRING:
      return v.value.v_str != nullptr ? Any(std::string_view(v.value.v_str)) : Any();
    case KILN_TYPE_BYTES:
      if (v.value.v_bytes == nullptr) return bytes("");
      return bytes(std::string_view(reinterpret_cast<const char*>(v.value.v_bytes->data),
                                    v.value.v_bytes->size));
    case KILN_TYPE_SHAPE:
      if (v.value.v_shape == nullptr) return shape({});
      return shape(std::vector<int64_t>(v.value.v_shape->dims,
                                        v.value.v_shape->dims + v.value.v_shape->ndim));
    case KILN_TYPE_TENSOR:
      if (v.value.v_tensor == nullptr) return a;
      if (v.flags & kAnyFlagHostObject) {
        return Any(Tensor(Ref<TensorObj>(tensor_obj_from_dl(v.value.v_tensor))));
      }
      return Any(Tensor::view(v.value.v_tensor));
    case KILN_TYPE_FUNCTION:
      if (v.value.v_callable == nullptr) return a;
      if (v.flags & kAnyFlagHostObject) {
        return Any(Function(Ref<FunctionObj>(FunctionObj::from_host_callable(v.value.v_callable))));
      }
      return Any(Function::from_abi(*v.value.v_callable, {}, "<callback>"));
    case kTypeModule:
      return Any(Module(Ref<ModuleObj>(static_cast<ModuleObj*>(v.value.v_ptr))));
    case kTypeObject:
      // Host-private: only the host produces it, always flagged as a host object.
      if (!(v.flags & kAnyFlagHostObject) || v.value.v_ptr == nullptr) {
        throw TypeError("a host object value arrived without its host flag");
      }
      return Any::object(Ref<Object>(static_cast<Object*>(v.value.v_ptr)));
    case KILN_TYPE_OPAQUE:
      a.code_ = KILN_TYPE_OPAQUE;
      a.v_.i = v.value.v_int64;
      return a;
    default:
      throw TypeError(fmt::format("unknown type code {} in a packed value", v.type_code));
  }
}

Any Any::from_abi_result(const KilnAny& v) {
  if ((v.flags & kAnyFlagHostObject) && Any::is_object_code(v.type_code)) {
    // The callee passed a +1 reference to a host object: adopt it.
    Any a;
    a.code_ = v.type_code;
    switch (v.type_code) {
      case KILN_TYPE_TENSOR:
        a.v_.obj = tensor_obj_from_dl(v.value.v_tensor);
        break;
      case KILN_TYPE_FUNCTION:
        a.v_.obj = FunctionObj::from_host_callable(v.value.v_callable);
        break;
      default:
        a.v_.obj = static_cast<Object*>(v.value.v_ptr);
        break;
    }
    return a;
  }
  return from_abi(v);
}

namespace detail {

void store_result(Any value, KilnAny* ret) {
  const bool host_caller = (ret->flags & kAnyFlagAcceptsHostObjects) != 0;
  if (value.holds_object() && host_caller) {
    *ret = value.to_abi();
    ret->flags = kAnyFlagHostObject;
    if (value.type_code() == KILN_TYPE_STRING || value.type_code() == KILN_TYPE_BYTES ||
        value.type_code() == KILN_TYPE_SHAPE) {
      ret->value.v_ptr = value.object();  // adopted by from_abi_result
    }
    value.object()->retain();  // the reference travels with `ret`
    return;
  }
  switch (value.type_code()) {
    case KILN_TYPE_STRING: {
      thread_local std::string buffer;
      buffer = value.cast<std::string>();
      ret->type_code = KILN_TYPE_STRING;
      ret->flags = 0;
      ret->value.v_str = buffer.c_str();
      return;
    }
    default:
      if (value.holds_object()) {
        throw TypeError(
            fmt::format("cannot return a {} to a caller outside the Kiln host", value.type_name()));
      }
      *ret = value.to_abi();
  }
}

}  // namespace detail

std::string Any::str() const {
  switch (code_) {
    case KILN_TYPE_NONE:
      return "none";
    case KILN_TYPE_BOOL:
      return v_.i ? "true" : "false";
    case KILN_TYPE_INT:
      return std::to_string(v_.i);
    case KILN_TYPE_FLOAT:
      return fmt::format("{}", v_.d);
    case KILN_TYPE_STRING:
      return static_cast<StringObj*>(v_.obj)->value;
    case KILN_TYPE_BYTES:
      return fmt::format("<{} bytes>", static_cast<BytesObj*>(v_.obj)->value.size());
    case KILN_TYPE_DEVICE:
      return Device::from_dlpack(v_.dev).str();
    case KILN_TYPE_DTYPE:
      return DataType(v_.dt).str();
    case KILN_TYPE_SHAPE:
      return fmt::format("[{}]", fmt::join(static_cast<ShapeObj*>(v_.obj)->dims, ", "));
    case KILN_TYPE_TENSOR:
      return Tensor(Ref<TensorObj>(static_cast<TensorObj*>(v_.obj))).str();
    case KILN_TYPE_FUNCTION:
      return fmt::format("Function({})", static_cast<FunctionObj*>(v_.obj)->name());
    case kTypeModule:
      return fmt::format("Module({})", static_cast<ModuleObj*>(v_.obj)->kind());
    case kTypeObject:
      return v_.obj->type_key();
    default:
      return type_name();
  }
}

template <typename T>
T Any::cast() const {
  if constexpr (std::is_same_v<T, Any>) {
    return *this;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (code_ == KILN_TYPE_BOOL || code_ == KILN_TYPE_INT) return v_.i != 0;
    cast_error("bool", *this);
  } else if constexpr (std::is_integral_v<T>) {
    if (code_ != KILN_TYPE_INT && code_ != KILN_TYPE_BOOL) cast_error("int", *this);
    if (v_.i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (v_.i > 0 &&
         static_cast<uint64_t>(v_.i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      throw TypeError(fmt::format("integer {} does not fit the expected type", v_.i));
    }
    return static_cast<T>(v_.i);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (code_ == KILN_TYPE_FLOAT) return static_cast<T>(v_.d);
    if (code_ == KILN_TYPE_INT) return static_cast<T>(v_.i);
    cast_error("float", *this);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (code_ == KILN_TYPE_STRING) return static_cast<StringObj*>(v_.obj)->value;
    if (code_ == KILN_TYPE_BYTES) return static_cast<BytesObj*>(v_.obj)->value;
    cast_error("string", *this);
  } else if constexpr (std::is_same_v<T, Device>) {
    if (code_ == KILN_TYPE_DEVICE) return Device::from_dlpack(v_.dev);
    cast_error("device", *this);
  } else if constexpr (std::is_same_v<T, DataType>) {
    if (code_ == KILN_TYPE_DTYPE) return DataType(v_.dt);
    if (code_ == KILN_TYPE_STRING) return DataType::parse(static_cast<StringObj*>(v_.obj)->value);
    cast_error("dtype", *this);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (code_ == KILN_TYPE_SHAPE) return static_cast<ShapeObj*>(v_.obj)->dims;
    cast_error("shape", *this);
  } else if constexpr (std::is_same_v<T, Tensor>) {
    if (code_ == KILN_TYPE_TENSOR) return Tensor(Ref<TensorObj>(static_cast<TensorObj*>(v_.obj)));
    cast_error("tensor", *this);
  } else if constexpr (std::is_same_v<T, Function>) {
    if (code_ == KILN_TYPE_FUNCTION) {
      return Function(Ref<FunctionObj>(static_cast<FunctionObj*>(v_.obj)));
    }
    cast_error("function", *this);
  } else if constexpr (std::is_same_v<T, Module>) {
    if (code_ == kTypeModule) return Module(Ref<ModuleObj>(static_cast<ModuleObj*>(v_.obj)));
    cast_error("module", *this);
  } else {
    static_assert(sizeof(T) == 0, "unsupported Any::cast target");
  }
}

template bool Any::cast<bool>() const;
template int8_t Any::cast<int8_t>() const;
template int16_t Any::cast<int16_t>() const;
template int32_t Any::cast<int32_t>() const;
template int64_t Any::cast<int64_t>() const;
template uint8_t Any::cast<uint8_t>() const;
template uint16_t Any::cast<uint16_t>() const;
template uint32_t Any::cast<uint32_t>() const;
template uint64_t Any::cast<uint64_t>() const;
template long long Any::cast<long long>() const;
template unsigned long long Any::cast<unsigned long long>() const;
template float Any::cast<float>() const;
template double Any::cast<double>() const;
template std::string Any::cast<std::string>() const;
template Device Any::cast<Device>() const;
template DataType Any::cast<DataType>() const;
template std::vector<int64_t> Any::cast<std::vector<int64_t>>() const;
template Tensor Any::cast<Tensor>() const;
template Function Any::cast<Function>() const;
template Module Any::cast<Module>() const;
template Any Any::cast<Any>() const;

}  // namespace kiln
