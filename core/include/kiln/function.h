// SPDX-License-Identifier: Apache-2.0
// Function: a reference-counted packed callable with the ABI's calling convention, plus the
// registry of named global functions.
//
// A Function wraps either a plugin's KilnCallable or a C++ callable with typed arguments;
// both are called the same way, through one indirect call:
//   Function add = Function::from_typed("add", [](int64_t a, int64_t b) { return a + b; });
//   int64_t five = add(2, 3).cast<int64_t>();
#ifndef KILN_FUNCTION_H_
#define KILN_FUNCTION_H_

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/any.h"
#include "kiln/c/abi.h"
#include "kiln/error.h"
#include "kiln/object.h"
#include "kiln/tensor.h"

namespace kiln {

// The object behind a Function. `callable` is what a call invokes; `keep_alive` holds the
// plugin or module that owns the code for as long as the function lives.
class FunctionObj : public Object {
 public:
  FunctionObj(KilnCallable callable, Ref<Object> keep_alive, std::string name)
      : host_{callable, this}, keep_alive_(std::move(keep_alive)), name_(std::move(name)) {}

  const KilnCallable& callable() const { return host_.callable; }
  const std::string& name() const { return name_; }
  // Recovers the FunctionObj from a callable the host handed out (kAnyFlagHostObject).
  static FunctionObj* from_host_callable(const KilnCallable* c) {
    return reinterpret_cast<const HostCallable*>(c)->owner;
  }

 protected:
  void set_self(void* self) { host_.callable.self = self; }

 private:
  struct HostCallable {
    KilnCallable callable;  // first member: a KilnCallable* to it is a HostCallable*
    FunctionObj* owner;
  };
  HostCallable host_;
  Ref<Object> keep_alive_;
  std::string name_;
};

namespace detail {
// Throws the typed kiln error for `error` (freeing it), prefixed by nothing: plugin and
// host functions already name themselves in their messages.
[[noreturn]] void raise_and_free(KilnError* error);
// Makes a KilnError from the exception in flight (inside a catch block), prefixing `context`.
KilnError* error_from_current_exception(const std::string& context);

inline KilnAny abi_arg(const Any& v) { return v.to_abi(); }
inline KilnAny abi_arg(bool v) {
  KilnAny a{KILN_TYPE_BOOL, 0, {}};
  a.value.v_int64 = v ? 1 : 0;
  return a;
}
template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
inline KilnAny abi_arg(T v) {
  KilnAny a{KILN_TYPE_INT, 0, {}};
  a.value.v_int64 = static_cast<int64_t>(v);
  return a;
}
template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
inline KilnAny abi_arg(T v) {
  KilnAny a{KILN_TYPE_FLOAT, 0, {}};
  a.value.v_float64 = static_cast<double>(v);
  return a;
}
inline KilnAny abi_arg(const char* s) {
  KilnAny a{KILN_TYPE_STRING, 0, {}};
  a.value.v_str = s;
  return a;
}
inline KilnAny abi_arg(const std::string& s) { return abi_arg(s.c_str()); }
// Tensors and functions pass a borrowed pointer into the held object: no reference counting.
inline KilnAny abi_arg(const Tensor& t) {
  KilnAny a{KILN_TYPE_TENSOR, kAnyFlagHostObject, {}};
  a.value.v_tensor = &t.get()->dl;
  return a;
}
inline KilnAny abi_arg(DLTensor* t) {
  KilnAny a{KILN_TYPE_TENSOR, 0, {}};
  a.value.v_tensor = t;
  return a;
}
// Tensor, Function, Module, Device and DataType go through Any.
template <typename T>
requires(std::is_class_v<std::remove_cvref_t<T>> &&
         !std::is_same_v<std::remove_cvref_t<T>, std::string> &&
         !std::is_same_v<std::remove_cvref_t<T>, Any>) inline KilnAny abi_arg(const T& v) {
  return Any(v).to_abi();
}
}  // namespace detail

class Function {
 public:
  Function() = default;
  explicit Function(Ref<FunctionObj> obj) : obj_(std::move(obj)) {}

  // Wraps a plugin's callable. `keep_alive` (may be null) is held as long as the Function.
  static Function from_abi(KilnCallable callable, Ref<Object> keep_alive, std::string name);
  // Wraps a C++ callable taking the packed arguments.
  static Function from_packed(std::string name,
                              std::function<Any(const Any* args, int32_t num_args)> body);
  // Wraps a C++ callable with typed parameters (bool, integers, floating point, std::string,
  // Device, DataType, std::vector<int64_t>, Tensor, Function, Module, Any, DLTensor*). A call
  // with the wrong count or kinds throws TypeError naming the function and the argument.
  template <typename F>
  static Function from_typed(std::string name, F&& f);

  // Calls with C++ values; the result is an Any (none for void functions). Errors raised by
  // the callee are rethrown as their typed kiln errors.
  template <typename... Args>
  Any operator()(Args&&... args) const {
    constexpr int32_t n = sizeof...(Args);
    KilnAny packed[n > 0 ? n : 1] = {detail::abi_arg(args)...};
    return call_abi(packed, n);
  }
  // Calls with ABI values (borrowed for the call).
  Any call_abi(const KilnAny* args, int32_t num_args) const {
    KilnAny ret;
    ret.type_code = KILN_TYPE_NONE;
    ret.flags = kAnyFlagAcceptsHostObjects;
    ret.value.v_int64 = 0;
    const KilnCallable& c = obj_->callable();
    if (KilnError* err = c.call(c.self, args, num_args, &ret)) [[unlikely]] {
      detail::raise_and_free(err);
    }
    switch (ret.type_code) {  // scalars inline: they are the common, hot results
      case KILN_TYPE_NONE:
        return Any();
      case KILN_TYPE_INT:
        return Any(ret.value.v_int64);
      case KILN_TYPE_FLOAT:
        return Any(ret.value.v_float64);
      case KILN_TYPE_BOOL:
        return Any(ret.value.v_int64 != 0);
      default:
        return Any::from_abi_result(ret);
    }
  }
  // Calls with a vector of Anys.
  Any call_packed(const std::vector<Any>& args) const;

  // The body of a function made by from_packed, which takes its arguments as Anys, or null for
  // any other kind. A caller that holds Anys already (the VM) calls it directly and skips the
  // ABI round trip (no string, shape or tensor-view copies); the body's exceptions arrive as
  // they were thrown. Valid while this Function's object lives.
  using PackedBody = std::function<Any(const Any* args, int32_t num_args)>;
  const PackedBody* packed_body() const;

  explicit operator bool() const { return static_cast<bool>(obj_); }
  const std::string& name() const { return obj_->name(); }
  const KilnCallable& callable() const { return obj_->callable(); }
  FunctionObj* get() const { return obj_.get(); }

 private:
  Ref<FunctionObj> obj_;
};

namespace detail {

template <typename T>
struct CallableTraits : CallableTraits<decltype(&T::operator())> {};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...) const> {
  using Return = R;
  using Args = std::tuple<std::remove_cvref_t<A>...>;
};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...)> : CallableTraits<R (C::*)(A...) const> {};
template <typename R, typename... A>
struct CallableTraits<R (*)(A...)> {
  using Return = R;
  using Args = std::tuple<std::remove_cvref_t<A>...>;
};

// Converts argument `index` of function `name`; throws TypeError naming both.
template <typename T>
T arg_from_abi(const KilnAny& v, int32_t index, const std::string& name);
template <>
inline DLTensor* arg_from_abi<DLTensor*>(const KilnAny& v, int32_t index, const std::string& name) {
  if (v.type_code == KILN_TYPE_TENSOR) return v.value.v_tensor;
  throw TypeError("function '" + name + "': argument " + std::to_string(index) +
                  " expects tensor, got " + type_code_name(v.type_code));
}
template <typename T>
T arg_from_abi(const KilnAny& v, int32_t index, const std::string& name) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.type_code == KILN_TYPE_INT) [[likely]]
      return static_cast<T>(v.value.v_int64);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (v.type_code == KILN_TYPE_FLOAT) [[likely]]
      return static_cast<T>(v.value.v_float64);
  }
  try {
    return Any::from_abi(v).cast<T>();
  } catch (const TypeError& e) {
    throw TypeError("function '" + name + "': argument " + std::to_string(index) + ": " + e.what());
  }
}

// Writes `value` into `ret` for a caller that may or may not accept host objects.
void store_result(Any value, KilnAny* ret);

template <typename F>
class TypedFunctionObj : public FunctionObj {
 public:
  TypedFunctionObj(std::string name, F f)
      : FunctionObj(KilnCallable{&TypedFunctionObj::invoke, nullptr}, {}, std::move(name)),
        f_(std::move(f)) {
    set_self(this);
  }

 private:
  using Traits = CallableTraits<F>;
  static constexpr int32_t kArity = std::tuple_size_v<typename Traits::Args>;

  static KilnError* invoke(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret) {
    auto* obj = static_cast<TypedFunctionObj*>(self);
    try {
      if (num_args != kArity) {
        throw TypeError("function '" + obj->name() + "' expects " + std::to_string(kArity) +
                        " arguments, got " + std::to_string(num_args));
      }
      obj->call(args, ret, std::make_index_sequence<kArity>{});
      return nullptr;
    } catch (...) {
      return error_from_current_exception("");
    }
  }

  template <size_t... I>
  void call(const KilnAny* args, KilnAny* ret, std::index_sequence<I...>) {
    using Args = typename Traits::Args;
    if constexpr (std::is_void_v<typename Traits::Return>) {
      f_(arg_from_abi<std::tuple_element_t<I, Args>>(args[I], I, name())...);
      ret->type_code = KILN_TYPE_NONE;
    } else {
      store_result(Any(f_(arg_from_abi<std::tuple_element_t<I, Args>>(args[I], I, name())...)),
                   ret);
    }
  }

  F f_;
};

}  // namespace detail

template <typename F>
Function Function::from_typed(std::string name, F&& f) {
  using Obj = detail::TypedFunctionObj<std::decay_t<F>>;
  return Function(Ref<FunctionObj>(new Obj(std::move(name), std::forward<F>(f))));
}

// The process-wide registry of named global functions.
namespace registry {
// Registers `f` as `name`. Throws ValueError if the name is taken and !allow_override.
void set(const std::string& name, Function f, bool allow_override = false);
// The function registered as `name`, or nullopt.
std::optional<Function> get(const std::string& name);
// The function registered as `name`; throws NotFoundError naming it.
Function require(const std::string& name);
// Removes `name`; returns whether it was there.
bool remove(const std::string& name);
// Every registered name, sorted.
std::vector<std::string> names();
}  // namespace registry

// Registers a typed C++ callable as a global function at static-initialisation time:
//   KILN_REGISTER_GLOBAL(my_add, "testing.add", [](int64_t a, int64_t b) { return a + b; });
#define KILN_REGISTER_GLOBAL(id, name, ...)                                             \
  static const bool kiln_global_registered_##id = [] {                                  \
    ::kiln::registry::set(name, ::kiln::Function::from_typed(name, __VA_ARGS__), true); \
    return true;                                                                        \
  }()

}  // namespace kiln

#endif  // KILN_FUNCTION_H_
