// SPDX-License-Identifier: Apache-2.0
// The conformance kernel for the example device: out[i] = a[i] + alpha * b[i], one thread per
// element, with the length `n` so that the last block's extra threads do nothing. Its metadata
// is vector_add.exampledev.json, beside the built library, where kiln-conformance reads it.
#include <cstdint>
#include <cstring>

#include "exampledev_kernel.h"

namespace {

// Argument i of the packed parameters as T (tensors arrive as a 64-bit device address).
template <typename T>
T arg(void** params, int i) {
  T value;
  std::memcpy(&value, params[i], sizeof(T));
  return value;
}

float* tensor(void** params, int i) {
  return reinterpret_cast<float*>(static_cast<uintptr_t>(arg<uint64_t>(params, i)));
}

}  // namespace

EXAMPLEDEV_KERNEL void vector_add(void** params, const ExampledevThread* thread) {
  const int64_t i =
      static_cast<int64_t>(thread->block_idx[0]) * thread->block_dim[0] + thread->thread_idx[0];
  const int32_t n = arg<int32_t>(params, 4);
  if (i >= n) return;
  const float* a = tensor(params, 0);
  const float* b = tensor(params, 1);
  float* out = tensor(params, 2);
  out[i] = a[i] + arg<float>(params, 3) * b[i];
}
