// SPDX-License-Identifier: Apache-2.0
// Heap objects behind the non-trivial Any kinds (string, bytes, shape).
#ifndef KILN_SRC_FFI_OBJECTS_H_
#define KILN_SRC_FFI_OBJECTS_H_

#include <string>
#include <vector>

#include "kiln/c/abi.h"
#include "kiln/object.h"

namespace kiln::ffi {

class StringObj : public Object {
 public:
  explicit StringObj(std::string v) : value(std::move(v)) {}
  std::string value;
};

class BytesObj : public Object {
 public:
  explicit BytesObj(std::string v) : value(std::move(v)) {
    view.data = reinterpret_cast<const uint8_t*>(value.data());
    view.size = value.size();
  }
  std::string value;
  KilnByteArray view;
};

class ShapeObj : public Object {
 public:
  explicit ShapeObj(std::vector<int64_t> v) : dims(std::move(v)) {
    view.dims = dims.data();
    view.ndim = static_cast<int32_t>(dims.size());
  }
  std::vector<int64_t> dims;
  KilnShape view;
};

}  // namespace kiln::ffi

#endif  // KILN_SRC_FFI_OBJECTS_H_
