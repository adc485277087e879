// SPDX-License-Identifier: Apache-2.0
// The two kernels the conformance suite runs on a device (docs/conformance.md): the vendor's
// conformance kernel `out[i] = a[i] + alpha * b[i]` (--module) and the kernel of known duration
// `spin(out, ns)` (--timing-kernel): loading them, launching them, and judging their results.
#ifndef KILN_TOOLS_CONFORMANCE_KERNELS_H_
#define KILN_TOOLS_CONFORMANCE_KERNELS_H_

#include <cstdint>
#include <span>
#include <string>

#include "kiln/kiln.h"
#include "suite.h"

namespace kiln::conformance {

// A kernel of a module loaded on one device; the module is unloaded on destruction.
class LoadedKernel {
 public:
  // Loads `spec`'s file in its format on device `device_id` of `backend` (borrowed; must outlive
  // this), with the metadata of `<path>.json` when that exists (else "{}"), and finds its kernel.
  // Throws ValueError naming the file for an unreadable module or malformed metadata, and the
  // plugin's error when module_load or module_get_kernel fails.
  LoadedKernel(const DeviceBackend& backend, int32_t device_id, const ModuleSpec& spec);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  void* module() const { return module_; }
  void* kernel() const { return kernel_; }
  const ModuleSpec& spec() const { return spec_; }
  // The number of arguments the metadata describes the kernel with; -1 when it does not.
  int32_t described_args() const { return described_args_; }
  // Leaves the module loaded at destruction: for threads that may still run its kernel (a test
  // that gave up waiting for them).
  void keep_loaded() { module_ = nullptr; }

 private:
  const DeviceBackend& backend_;
  ModuleSpec spec_;
  void* module_ = nullptr;
  void* kernel_ = nullptr;
  int32_t described_args_ = -1;
};

// Launches the conformance kernel on `out.numel()` elements: out = a + alpha * b, with block 256
// and grid ceil(n / 256), four arguments (a, b, out, alpha) or five with n when the metadata
// describes five. `a`, `b`, `out`: float32 vectors of one length on the kernel's device. Throws
// ValueError when the metadata describes another count, and the plugin's error.
void launch_vector_add(const DeviceBackend& backend, const LoadedKernel& kernel, const Tensor& a,
                       const Tensor& b, const Tensor& out, double alpha, void* stream = nullptr);

// Launches the kernel of known duration: spin(out, ns) busy-waits `ns` nanoseconds and writes
// `ns` to out[0] (`out`: an int64 tensor of one element), with grid and block 1. Throws
// ValueError when the metadata describes other than two arguments, and the plugin's error.
void launch_spin(const DeviceBackend& backend, const LoadedKernel& kernel, const Tensor& out,
                 int64_t ns, void* stream = nullptr);

// "" when every out[i] is a[i] + alpha * b[i] (within float rounding), else a message naming
// `kernel`, the length, alpha, the first wrong index, the expected and the computed value, and
// how many are wrong: "vector_add computed wrong results over n = 257 with alpha = -1.5: first
// wrong index 256: expected 3.5, got 9.5 (1 of 257 elements wrong)".
std::string vector_add_mismatch(const std::string& kernel, std::span<const float> a,
                                std::span<const float> b, std::span<const float> out, double alpha);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_KERNELS_H_
