// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the example kernels: device, dtype, layout and data access.
#ifndef KILN_EXAMPLES_KERNELS_TENSOR_CHECKS_H_
#define KILN_EXAMPLES_KERNELS_TENSOR_CHECKS_H_

#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"

namespace kiln::examples {

// The tensor's shape as "[2, 3]", for messages.
inline std::string shape_string(const DLTensor* t) {
  std::string s = "[";
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(t->shape[i]);
  }
  return s + "]";
}

// Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming `what` unless `t` (borrowed) is a
// non-NULL float32 tensor in host memory (kDLCPU) with a compact row-major layout (strides
// NULL, or equal to the compact strides; a dimension of extent 1 may have any stride since
// it is never stepped) and data for its elements. The example kernels do not support views.
inline void expect_cpu_float32(const DLTensor* t, const char* what) {
  using sdk::Error;
  if (t == nullptr) throw Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
  if (t->device.device_type != kDLCPU) {
    throw Error(KILN_ERROR_VALUE, std::string(what) + " is on device type " +
                                      std::to_string(t->device.device_type) +
                                      ", expected host memory (kDLCPU)");
  }
  sdk::expect_dtype(t, DLDataType{kDLFloat, 32, 1}, what);
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) {
    throw Error(KILN_ERROR_VALUE, std::string(what) + " has a malformed shape");
  }
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) {
      throw Error(KILN_ERROR_VALUE,
                  std::string(what) + " has a negative extent: " + shape_string(t));
    }
  }
  if (t->strides != nullptr) {
    int64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expected) {
        throw Error(KILN_ERROR_VALUE, std::string(what) + " is not contiguous (shape " +
                                          shape_string(t) +
                                          "): non-contiguous tensors are "
                                          "not supported");
      }
      expected *= t->shape[i];
    }
  }
  if (t->data == nullptr && sdk::numel(t) > 0) {
    throw Error(KILN_ERROR_VALUE, std::string(what) + " has no data");
  }
}

// Throws kiln::sdk::Error(KILN_ERROR_VALUE) unless `t` has exactly `ndim` dimensions.
inline void expect_ndim(const DLTensor* t, int32_t ndim, const char* what) {
  if (t->ndim != ndim) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " must be " + std::to_string(ndim) +
                                           "-D, got shape " + shape_string(t));
  }
}

// The first element of `t`, honouring byte_offset. Borrowed from the tensor.
template <typename T>
T* data_of(const DLTensor* t) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
}

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_KERNELS_TENSOR_CHECKS_H_
