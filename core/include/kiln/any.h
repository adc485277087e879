// SPDX-License-Identifier: Apache-2.0
// Any: the core's 16-byte tagged value (none, bool, int, float, string, bytes, device, dtype,
// shape, tensor, function, module). Objects inside are reference counted, so copying an Any
// is cheap. Converts to and from the ABI's KilnAny at the plugin boundary.
#ifndef KILN_ANY_H_
#define KILN_ANY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/c/abi.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/object.h"

namespace kiln {

class Tensor;
class Function;
class Module;

// Type codes of Any beyond the ABI's (host-private, never seen by plugins).
inline constexpr int32_t kTypeModule = 128;
// Any other host object (a VM tuple, closure or storage, ...): see Any::object().
inline constexpr int32_t kTypeObject = 129;

// Flag bit of KilnAny::flags set only by the host: the pointer belongs to a host object
// (a TensorObj's DLTensor, a FunctionObj's callable), so a host callee may take a reference.
inline constexpr int32_t kAnyFlagHostObject = 1;
// Set by a host caller in `ret->flags` before a call: the caller accepts host objects
// (+1 reference) in the result.
inline constexpr int32_t kAnyFlagAcceptsHostObjects = 2;

// The name of a type code ("int", "tensor", "module", ...).
const char* type_code_name(int32_t code);

class Any {
 public:
  Any() = default;
  Any(std::nullptr_t) {}                                     // NOLINT
  Any(bool v) : code_(KILN_TYPE_BOOL) { v_.i = v ? 1 : 0; }  // NOLINT
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Any(T v) : code_(KILN_TYPE_INT) {  // NOLINT
    v_.i = static_cast<int64_t>(v);
  }
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Any(T v) : code_(KILN_TYPE_FLOAT) {  // NOLINT
    v_.d = static_cast<double>(v);
  }
  Any(const char* s);                                                  // NOLINT
  Any(std::string_view s);                                             // NOLINT
  Any(const std::string& s);                                           // NOLINT
  Any(Device d) : code_(KILN_TYPE_DEVICE) { v_.dev = d.to_dlpack(); }  // NOLINT
  Any(DataType t) : code_(KILN_TYPE_DTYPE) { v_.dt = t; }              // NOLINT
  Any(const Tensor& t);                                                // NOLINT
  Any(const Function& f);                                              // NOLINT
  Any(const Module& m);                                                // NOLINT
  // A bytes value (type BYTES) holding a copy of `data`.
  static Any bytes(std::string_view data);
  // A shape value (type SHAPE).
  static Any shape(std::vector<int64_t> dims);
  // A host object of any other kind (type kTypeObject); null gives none. Such values never
  // reach a plugin: passing one across the ABI is a TypeError in the callee.
  static Any object(Ref<Object> obj);

  Any(const Any& other) : code_(other.code_), v_(other.v_) {
    if (holds_object()) v_.obj->retain();
  }
  // A view of `other` that holds no reference of its own, for argument arrays that live
  // shorter than the values they show and are never destroyed (the VM's calls of host
  // functions). Destroying one would release a reference it does not hold.
  struct Borrow {};
  Any(Borrow, const Any& other) noexcept : code_(other.code_), v_(other.v_) {}
  Any(Any&& other) noexcept : code_(other.code_), v_(other.v_) {
    other.code_ = KILN_TYPE_NONE;
    other.v_.i = 0;
  }
  Any& operator=(Any other) noexcept {
    std::swap(code_, other.code_);
    std::swap(v_, other.v_);
    return *this;
  }
  ~Any() {
    if (holds_object()) v_.obj->release();
  }

  int32_t type_code() const { return code_; }
  const char* type_name() const { return type_code_name(code_); }
  bool is_none() const { return code_ == KILN_TYPE_NONE; }

  // Converts to T. Integers widen to float; nothing else converts. Throws TypeError
  // "expected <T>, got <type>". Supported: bool, integers, float, double, std::string,
  // Device, DataType, std::vector<int64_t> (shape), Tensor, Function, Module, Any.
  template <typename T>
  T cast() const;

  // A borrowed ABI view of this value, valid while this Any lives. Strings, tensors and
  // functions point into the held object.
  KilnAny to_abi() const;
  // Copies an ABI value into an Any: strings and bytes are copied; a tensor becomes a
  // non-owning Tensor view (or a new reference when flagged as a host object).
  static Any from_abi(const KilnAny& value);
  // Takes the result of a packed call: adopts host objects flagged in `value`.
  static Any from_abi_result(const KilnAny& value);

  // Raw access for the core.
  Object* object() const { return holds_object() ? v_.obj : nullptr; }
  // The held kTypeObject as a T, or null when this holds something else.
  template <typename T>
  Ref<T> as_object() const {
    return code_ == kTypeObject ? Ref<T>(dynamic_cast<T*>(v_.obj)) : Ref<T>();
  }
  int64_t raw_int() const { return v_.i; }
  double raw_float() const { return v_.d; }
  bool holds_object() const { return is_object_code(code_); }
  // True for the kinds held by reference (string, bytes, shape, tensor, function, module).
  static constexpr bool is_object_code(int32_t code) {
    return code == KILN_TYPE_STRING || code == KILN_TYPE_BYTES || code == KILN_TYPE_SHAPE ||
           code == KILN_TYPE_TENSOR || code == KILN_TYPE_FUNCTION || code == kTypeModule ||
           code == kTypeObject;
  }
  std::string str() const;  // a short human-readable form, for messages and logs

 private:
  int32_t code_ = KILN_TYPE_NONE;
  int32_t reserved_ = 0;
  union {
    int64_t i;
    double d;
    DLDevice dev;
    DLDataType dt;
    Object* obj;
  } v_{};
  friend class Function;
};

static_assert(sizeof(Any) == 16, "Any is a 16-byte tagged value");

}  // namespace kiln

#endif  // KILN_ANY_H_
