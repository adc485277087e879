// SPDX-License-Identifier: Apache-2.0
// NumPy .npy files: reading format versions 1.0, 2.0 and 3.0 and writing 1.0 / 2.0, C order
// only. Supported element types: bool, int8..int64, uint8..uint64, float16, float32, float64.
#ifndef KILN_NPY_H_
#define KILN_NPY_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

// A decoded .npy array. `data` holds the elements in C order as little-endian bytes,
// product(shape) * dtype.bytes() of them (a shape of () is a scalar: one element).
struct NpyArray {
  DataType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// Decodes the complete contents of a .npy file. `source` names the bytes in messages (usually
// the path). Big-endian data is byte-swapped to little-endian. Throws kiln::ValueError, with a
// message starting "<source>: ", for anything malformed or unsupported: bad magic, unknown
// version, truncated or malformed header, Fortran order, an unsupported descr, negative or
// overflowing dims, and data shorter or longer than the shape says.
NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& source);

// Reads and decodes the .npy file at `path`. Throws kiln::NotFoundError if it does not exist,
// kiln::RuntimeError (naming the path and the system error) if it cannot be read, and the
// errors of parse_npy otherwise.
NpyArray read_npy(const std::filesystem::path& path);

// Encodes an array as .npy bytes: a version 1.0 header (2.0 when the header needs more than
// 65535 bytes) padded so the data starts at a multiple of 64 bytes, then `nbytes` bytes from
// `data` (borrowed; C-order little-endian elements). Throws kiln::ValueError for a dtype .npy
// cannot represent (bfloat16, lanes != 1, other codes or widths), a negative or overflowing
// dim, or nbytes != product(shape) * dtype.bytes(); `data` may be null only when nbytes is 0.
std::vector<uint8_t> serialize_npy(DataType dtype, std::span<const int64_t> shape, const void* data,
                                   size_t nbytes);

// Writes serialize_npy(dtype, shape, data, nbytes) to `path` atomically: the bytes go to
// "<path>.tmp.<pid>" in the same directory, which is then renamed over `path`, so a failure
// never leaves a partial file or destroys an existing one. Throws kiln::ValueError (message
// starting "<path>: ") for the errors of serialize_npy and kiln::RuntimeError naming the path
// and the system error for I/O failures.
void write_npy(const std::filesystem::path& path, DataType dtype, std::span<const int64_t> shape,
               const void* data, size_t nbytes);

}  // namespace kiln

#endif  // KILN_NPY_H_
