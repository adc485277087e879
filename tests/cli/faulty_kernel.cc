// SPDX-License-Identifier: Apache-2.0
// libfaulty.so: kernels that fail the way candidate kernels do, for the isolation tests
// (docs/isolation.md). Each takes (in, out) float32 tensors like librelu.so's relu:
//   copy      out = in (a good kernel)
//   scale     out = 2 * in (another good one)
//   slow      out = in after a 20 ms sleep (a point that takes a while, for the farm tests)
//   segfault  writes through a null pointer (SIGSEGV)
//   abort     calls abort() (SIGABRT)
//   hang      never returns
//   hog       touches memory 64 MiB at a time, up to 4 GiB (for a cgroup's out-of-memory killer;
//             without a limit it frees it all and returns)
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kiln/sdk/kernel.hpp"

namespace {

void copy(DLTensor* in, DLTensor* out) {
  const int64_t n = kiln::sdk::numel(in);
  if (kiln::sdk::numel(out) != n) throw kiln::sdk::Error(KILN_ERROR_VALUE, "size mismatch");
  std::memcpy(static_cast<char*>(out->data) + out->byte_offset,
              static_cast<const char*>(in->data) + in->byte_offset,
              static_cast<size_t>(n) * sizeof(float));
}

void scale(DLTensor* in, DLTensor* out) {
  const int64_t n = kiln::sdk::numel(in);
  if (kiln::sdk::numel(out) != n) throw kiln::sdk::Error(KILN_ERROR_VALUE, "size mismatch");
  const float* src =
      reinterpret_cast<const float*>(static_cast<const char*>(in->data) + in->byte_offset);
  float* dst = reinterpret_cast<float*>(static_cast<char*>(out->data) + out->byte_offset);
  for (int64_t i = 0; i < n; ++i) dst[i] = 2.0f * src[i];
}

void slow(DLTensor* in, DLTensor* out) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  copy(in, out);
}

void segfault(DLTensor* in, DLTensor* out) {
  // Both volatile: GCC dropped the store through a null pointer to volatile, and through a
  // volatile pointer to plain float, as undefined behaviour.
  volatile float* volatile nowhere = nullptr;
  *nowhere = static_cast<float>(kiln::sdk::numel(in) + kiln::sdk::numel(out));
}

void abort_now(DLTensor*, DLTensor*) { std::abort(); }

void hang(DLTensor*, DLTensor*) {
  while (true) ::pause();
}

void hog(DLTensor* in, DLTensor* out) {
  std::vector<char*> chunks;
  constexpr size_t kChunk = size_t{64} << 20;
  for (int i = 0; i < 64; ++i) {
    char* chunk = static_cast<char*>(std::malloc(kChunk));
    if (chunk == nullptr) break;
    std::memset(chunk, i + 1, kChunk);  // touched: resident, charged to the cgroup
    chunks.push_back(chunk);
  }
  for (char* chunk : chunks) std::free(chunk);
  copy(in, out);
}

}  // namespace

KILN_EXPORT_FUNCTION(copy, copy);
KILN_EXPORT_FUNCTION(scale, scale);
KILN_EXPORT_FUNCTION(slow, slow);
KILN_EXPORT_FUNCTION(segfault, segfault);
KILN_EXPORT_FUNCTION(abort, abort_now);
KILN_EXPORT_FUNCTION(hang, hang);
KILN_EXPORT_FUNCTION(hog, hog);
KILN_KERNEL_LIBRARY("faulty", "copy");
