// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/kernel_args.hpp"

#include <cstring>
#include <limits>
#include <string>

#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

template <typename T>
PackedArgValue bytes_of(T value) {
  PackedArgValue out{};
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// "kernel 'k' argument i": built only when an error needs it.
std::string where(const KernelInfo& kernel, size_t index) {
  return "kernel '" + kernel.name + "' argument " + std::to_string(index);
}

template <typename T>
PackedArgValue checked_int(int64_t v, const KernelInfo& kernel, size_t index, ArgKind kind) {
  const bool fits = std::numeric_limits<T>::is_signed
                        ? v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              v <= static_cast<int64_t>(std::numeric_limits<T>::max())
                        : v >= 0 && static_cast<uint64_t>(v) <= std::numeric_limits<T>::max();
  if (!fits) {
    throw sdk::Error(KILN_ERROR_VALUE, where(kernel, index) + ": " + std::to_string(v) +
                                           " does not fit in " + to_string(kind));
  }
  return bytes_of(static_cast<T>(v));
}

}  // namespace

void pack_kernel_args(const KernelInfo& kernel, const KilnAny* args, int32_t num_args,
                      TensorToHandle to_handle, PackedArgs& out) {
  const size_t expected = kernel.args.size();
  if (num_args < 0 || static_cast<size_t>(num_args) != expected) {
    throw sdk::Error(KILN_ERROR_VALUE, "kernel '" + kernel.name + "' takes " +
                                           std::to_string(expected) + " arguments, got " +
                                           std::to_string(num_args));
  }
  if (expected > kMaxKernelArgs) {  // parse_module_metadata refuses these; a hand-made KernelInfo
    throw sdk::Error(KILN_ERROR_VALUE, "kernel '" + kernel.name + "' takes " +
                                           std::to_string(expected) + " arguments; at most " +
                                           std::to_string(kMaxKernelArgs) + " can be packed");
  }
  if (expected > 0 && args == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, "kernel '" + kernel.name + "': NULL argument array");
  }
  out.count = 0;
  for (size_t i = 0; i < expected; ++i) {
    const ArgKind kind = kernel.args[i];
    const KilnAny& a = args[i];
    auto wrong = [&]() {
      return sdk::Error(KILN_ERROR_TYPE, where(kernel, i) + " expects " + to_string(kind) +
                                             ", got " + sdk::type_code_name(a.type_code));
    };
    const bool is_int = a.type_code == KILN_TYPE_INT || a.type_code == KILN_TYPE_BOOL;
    switch (kind) {
      case ArgKind::kTensor:
        if (a.type_code != KILN_TYPE_TENSOR || a.value.v_tensor == nullptr) throw wrong();
        out.values[i] = bytes_of(to_handle(*a.value.v_tensor, i));
        break;
      case ArgKind::kFloat32:
      case ArgKind::kFloat64: {
        double v;
        if (a.type_code == KILN_TYPE_FLOAT) {
          v = a.value.v_float64;
        } else if (is_int) {
          v = static_cast<double>(a.value.v_int64);
        } else {
          throw wrong();
        }
        out.values[i] = kind == ArgKind::kFloat32 ? bytes_of(static_cast<float>(v)) : bytes_of(v);
        break;
      }
      default: {
        if (!is_int) throw wrong();
        const int64_t v = a.value.v_int64;
        switch (kind) {
          case ArgKind::kInt8:
            out.values[i] = checked_int<int8_t>(v, kernel, i, kind);
            break;
          case ArgKind::kInt16:
            out.values[i] = checked_int<int16_t>(v, kernel, i, kind);
            break;
          case ArgKind::kInt32:
            out.values[i] = checked_int<int32_t>(v, kernel, i, kind);
            break;
          case ArgKind::kUInt8:
            out.values[i] = checked_int<uint8_t>(v, kernel, i, kind);
            break;
          case ArgKind::kUInt16:
            out.values[i] = checked_int<uint16_t>(v, kernel, i, kind);
            break;
          case ArgKind::kUInt32:
            out.values[i] = checked_int<uint32_t>(v, kernel, i, kind);
            break;
          case ArgKind::kUInt64:
            out.values[i] = checked_int<uint64_t>(v, kernel, i, kind);
            break;
          default:
            out.values[i] = bytes_of(v);
            break;  // int64
        }
      }
    }
    out.sizes[i] = static_cast<uint32_t>(arg_size(kind));
    out.pointers[i] = out.values[i].data();
  }
  out.count = expected;
}

}  // namespace kiln::sdk
