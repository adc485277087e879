// SPDX-License-Identifier: Apache-2.0
// Tensors the LLM runtime makes beside the ones it is given: the KV cache is created from a
// tensor on the model's device (TVM's convention) and owns no runtime, so it allocates through
// that tensor's backend, and hands kernels views of the leading part of its fixed-size arrays.
#ifndef KILN_LLM_DEVICE_TENSORS_H_
#define KILN_LLM_DEVICE_TENSORS_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::llm {

// An uninitialised tensor of `shape` and `dtype` on `like`'s device, allocated through `like`'s
// backend (host memory from the core's allocator for a cpu tensor without one). The tensor keeps
// the backend alive. ValueError for a device tensor without a backend (a view of memory Kiln
// did not allocate); the backend's error when allocation fails.
Tensor empty_beside(const Tensor& like, std::vector<int64_t> shape, DataType dtype);

// A tensor of `shape` over the first elements of contiguous `base` (same dtype, device and
// memory; it keeps `base` alive). ValueError when `shape` holds more elements than `base`.
Tensor leading_view(const Tensor& base, std::vector<int64_t> shape);

// Copies `values` into the first values.size() elements of the int32 tensor `base` and sets
// `view` to a view of exactly those elements (what the attention kernels read). A `view` that
// already is one of `base` of that length is kept: a decode step makes no new tensor objects.
// A device copy is ordered on the device's stream but not waited for: keep `values` alive and
// call synchronize_beside(base) after the last upload.
void upload_int32(const Tensor& base, std::span<const int32_t> values, Tensor& view);
// Waits for the uploads to `like`'s device (nothing for host memory).
void synchronize_beside(const Tensor& like);
// Sets `view` to leading_view(base, shape) unless it already is one of that shape (then
// nothing is allocated: a pass calls this for every table it uploads).
void reuse_leading_view(const Tensor& base, std::initializer_list<int64_t> shape, Tensor& view);

}  // namespace kiln::llm

#endif  // KILN_LLM_DEVICE_TENSORS_H_
