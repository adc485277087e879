// SPDX-License-Identifier: Apache-2.0
// Header-only conversions between KilnAny and C++ values, shared by the kernel and plugin
// helpers. Part of the SDK: depends on the C ABI headers and the C++ standard library only.
#ifndef KILN_SDK_ANY_CAST_HPP_
#define KILN_SDK_ANY_CAST_HPP_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {

// The device type code of `device`. Vendor codes (>= 64) lie outside DLDeviceType's
// enumerators, so the code is copied bit for bit instead of being read as the enum.
inline int32_t device_type_code(const DLDevice& device) {
  int32_t code;
  static_assert(sizeof(code) == sizeof(device.device_type), "DLDeviceType is 32 bits");
  std::memcpy(&code, &device.device_type, sizeof(code));
  return code;
}

// Name of a KilnTypeCode, for messages.
inline const char* type_code_name(int32_t code) {
  switch (code) {
    case KILN_TYPE_NONE:
      return "none";
    case KILN_TYPE_BOOL:
      return "bool";
    case KILN_TYPE_INT:
      return "int";
    case KILN_TYPE_FLOAT:
      return "float";
    case KILN_TYPE_STRING:
      return "string";
    case KILN_TYPE_BYTES:
      return "bytes";
    case KILN_TYPE_DEVICE:
      return "device";
    case KILN_TYPE_DTYPE:
      return "dtype";
    case KILN_TYPE_SHAPE:
      return "shape";
    case KILN_TYPE_TENSOR:
      return "tensor";
    case KILN_TYPE_FUNCTION:
      return "function";
    case KILN_TYPE_OPAQUE:
      return "opaque";
    default:
      return "unknown";
  }
}

// A DLPack dtype as text, e.g. "float32" or "int8x4".
inline std::string dtype_name(DLDataType t) {
  std::string base;
  switch (t.code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    case KILN_DL_BOOL:
      base = "bool";
      break;
    default:
      base = "code" + std::to_string(t.code) + "_";
      break;
  }
  std::string s = t.code == KILN_DL_BOOL ? base : base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// The C++ types a packed function may take or return, with their names in signatures.
template <typename T>
struct TypeName {
  static constexpr const char* kName = "?";
};
#define KILN_SDK_TYPE_NAME(T, name)            \
  template <>                                  \
  struct TypeName<T> {                         \
    static constexpr const char* kName = name; \
  }
KILN_SDK_TYPE_NAME(void, "none");
KILN_SDK_TYPE_NAME(bool, "bool");
KILN_SDK_TYPE_NAME(int32_t, "int32");
KILN_SDK_TYPE_NAME(int64_t, "int64");
KILN_SDK_TYPE_NAME(uint32_t, "uint32");
KILN_SDK_TYPE_NAME(uint64_t, "uint64");
KILN_SDK_TYPE_NAME(float, "float32");
KILN_SDK_TYPE_NAME(double, "float64");
KILN_SDK_TYPE_NAME(DLTensor*, "tensor");
KILN_SDK_TYPE_NAME(const DLTensor*, "tensor");
KILN_SDK_TYPE_NAME(const char*, "string");
KILN_SDK_TYPE_NAME(std::string_view, "string");
KILN_SDK_TYPE_NAME(std::string, "string");
KILN_SDK_TYPE_NAME(DLDevice, "device");
KILN_SDK_TYPE_NAME(DLDataType, "dtype");
#undef KILN_SDK_TYPE_NAME

// Out of line and cold so that the hot conversion paths keep a small stack frame.
[[noreturn, gnu::noinline, gnu::cold]] inline void throw_arg_type(int32_t index,
                                                                  const char* expected,
                                                                  int32_t got) {
  throw Error(KILN_ERROR_TYPE, "argument " + std::to_string(index) + " expects " + expected +
                                   ", got " + type_code_name(got));
}

// Converts argument `index` to T, or throws a KILN_ERROR_TYPE Error naming both kinds.
template <typename T>
T any_cast(const KilnAny& v, size_t index) {
  using U = std::remove_cvref_t<T>;
  const auto i = static_cast<int32_t>(index);
  if constexpr (std::is_same_v<U, bool>) {
    if (v.type_code == KILN_TYPE_BOOL || v.type_code == KILN_TYPE_INT) return v.value.v_int64 != 0;
    throw_arg_type(i, "bool", v.type_code);
  } else if constexpr (std::is_integral_v<U>) {
    if (v.type_code == KILN_TYPE_INT || v.type_code == KILN_TYPE_BOOL) {
      return static_cast<U>(v.value.v_int64);
    }
    throw_arg_type(i, TypeName<U>::kName, v.type_code);
  } else if constexpr (std::is_floating_point_v<U>) {
    if (v.type_code == KILN_TYPE_FLOAT) return static_cast<U>(v.value.v_float64);
    if (v.type_code == KILN_TYPE_INT) return static_cast<U>(v.value.v_int64);
    throw_arg_type(i, TypeName<U>::kName, v.type_code);
  } else if constexpr (std::is_same_v<U, DLTensor*> || std::is_same_v<U, const DLTensor*>) {
    if (v.type_code == KILN_TYPE_TENSOR) return v.value.v_tensor;
    throw_arg_type(i, "tensor", v.type_code);
  } else if constexpr (std::is_same_v<U, const char*> || std::is_same_v<U, std::string_view> ||
                       std::is_same_v<U, std::string>) {
    if (v.type_code == KILN_TYPE_STRING) return U(v.value.v_str);
    throw_arg_type(i, "string", v.type_code);
  } else if constexpr (std::is_same_v<U, DLDevice>) {
    if (v.type_code == KILN_TYPE_DEVICE) return v.value.v_device;
    throw_arg_type(i, "device", v.type_code);
  } else if constexpr (std::is_same_v<U, DLDataType>) {
    if (v.type_code == KILN_TYPE_DTYPE) return v.value.v_dtype;
    throw_arg_type(i, "dtype", v.type_code);
  } else {
    static_assert(sizeof(U) == 0, "unsupported argument type for a packed function");
  }
}

// Stores a return value. Strings must outlive the call (see KilnAny in abi.h).
template <typename T>
void any_store(KilnAny* ret, T value) {
  using U = std::remove_cvref_t<T>;
  ret->flags = 0;
  if constexpr (std::is_same_v<U, bool>) {
    ret->type_code = KILN_TYPE_BOOL;
    ret->value.v_int64 = value ? 1 : 0;
  } else if constexpr (std::is_integral_v<U>) {
    ret->type_code = KILN_TYPE_INT;
    ret->value.v_int64 = static_cast<int64_t>(value);
  } else if constexpr (std::is_floating_point_v<U>) {
    ret->type_code = KILN_TYPE_FLOAT;
    ret->value.v_float64 = static_cast<double>(value);
  } else if constexpr (std::is_same_v<U, const char*>) {
    ret->type_code = KILN_TYPE_STRING;
    ret->value.v_str = value;
  } else if constexpr (std::is_same_v<U, DLDevice>) {
    ret->type_code = KILN_TYPE_DEVICE;
    ret->value.v_device = value;
  } else if constexpr (std::is_same_v<U, DLDataType>) {
    ret->type_code = KILN_TYPE_DTYPE;
    ret->value.v_dtype = value;
  } else {
    static_assert(sizeof(U) == 0, "unsupported return type for a packed function");
  }
}

}  // namespace kiln::sdk

#endif  // KILN_SDK_ANY_CAST_HPP_
