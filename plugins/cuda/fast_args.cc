#include "fast_args.h"

#include <cstring>
#include <limits>

#include "kiln/sdk/any_cast.hpp"

namespace kiln::cuda {
namespace {

using sdk::ArgKind;

template <typename T>
void store(std::array<uint8_t, 8>& slot, T value) {
  slot = {};
  std::memcpy(slot.data(), &value, sizeof(T));
}

// Stores `v` as T when it fits (the range pack_kernel_args checks).
template <typename T>
bool store_int(std::array<uint8_t, 8>& slot, int64_t v) {
  if constexpr (std::numeric_limits<T>::is_signed) {
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      return false;
    }
  } else {
    if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<T>::max()) return false;
  }
  store(slot, static_cast<T>(v));
  return true;
}

}  // namespace

bool pack_args_fast(const sdk::KernelInfo& kernel, const KilnAny* args, int32_t num_args,
                    int32_t device_id, FastArgs& out) {
  const size_t count = kernel.args.size();
  if (num_args < 0 || static_cast<size_t>(num_args) != count || num_args > kMaxFastArgs) {
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    const KilnAny& a = args[i];
    std::array<uint8_t, 8>& slot = out.values[i];
    const bool is_int = a.type_code == KILN_TYPE_INT || a.type_code == KILN_TYPE_BOOL;
    switch (kernel.args[i]) {
      case ArgKind::kTensor: {
        if (a.type_code != KILN_TYPE_TENSOR || a.value.v_tensor == nullptr) return false;
        const DLTensor& t = *a.value.v_tensor;
        if (sdk::device_type_code(t.device) != kDLCUDA || t.device.device_id != device_id) {
          return false;
        }
        const auto base = reinterpret_cast<uint64_t>(t.data);
        if (t.byte_offset > std::numeric_limits<uint64_t>::max() - base) return false;
        store(slot, base + t.byte_offset);
        break;
      }
      case ArgKind::kFloat32:
      case ArgKind::kFloat64: {
        double v;
        if (a.type_code == KILN_TYPE_FLOAT) {
          v = a.value.v_float64;
        } else if (is_int) {
          v = static_cast<double>(a.value.v_int64);
        } else {
          return false;
        }
        if (kernel.args[i] == ArgKind::kFloat32) {
          store(slot, static_cast<float>(v));
        } else {
          store(slot, v);
        }
        break;
      }
      default: {
        if (!is_int) return false;
        const int64_t v = a.value.v_int64;
        bool ok = true;
        switch (kernel.args[i]) {
          case ArgKind::kInt8:
            ok = store_int<int8_t>(slot, v);
            break;
          case ArgKind::kInt16:
            ok = store_int<int16_t>(slot, v);
            break;
          case ArgKind::kInt32:
            ok = store_int<int32_t>(slot, v);
            break;
          case ArgKind::kUInt8:
            ok = store_int<uint8_t>(slot, v);
            break;
          case ArgKind::kUInt16:
            ok = store_int<uint16_t>(slot, v);
            break;
          case ArgKind::kUInt32:
            ok = store_int<uint32_t>(slot, v);
            break;
          case ArgKind::kUInt64:
            ok = store_int<uint64_t>(slot, v);
            break;
          default:
            store(slot, v);  // int64
            break;
        }
        if (!ok) return false;
      }
    }
    out.pointers[i] = slot.data();
  }
  return true;
}

}  // namespace kiln::cuda
