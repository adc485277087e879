// SPDX-License-Identifier: Apache-2.0
#include "kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"

namespace kiln::conformance {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

LoadedKernel::LoadedKernel(const DeviceBackend& backend, int32_t device_id, const ModuleSpec& spec)
    : backend_(backend), spec_(spec) {
  const std::vector<uint8_t> bytes = read_bytes(spec.path);
  if (bytes.empty()) throw ValueError(fmt::format("cannot read {} (or it is empty)", spec.path));
  std::string metadata = "{}";
  if (std::filesystem::exists(spec.path + ".json")) {
    const std::vector<uint8_t> sidecar = read_bytes(spec.path + ".json");
    metadata.assign(sidecar.begin(), sidecar.end());
  }
  try {
    const sdk::ModuleMetadata parsed = sdk::parse_module_metadata(metadata);
    if (auto it = parsed.kernels.find(spec.kernel); it != parsed.kernels.end()) {
      described_args_ = static_cast<int32_t>(it->second.args.size());
    }
  } catch (const sdk::Error& e) {
    throw ValueError(fmt::format("{}.json: {}", spec.path, e.what()));
  }
  module_ = backend.module_load(device_id, bytes.data(), bytes.size(), spec.format, metadata);
  try {
    kernel_ = backend.module_get_kernel(module_, spec.kernel);
  } catch (...) {
    backend.module_unload(module_);
    throw;
  }
}

LoadedKernel::~LoadedKernel() {
  if (module_ != nullptr) backend_.module_unload(module_);
}

void launch_vector_add(const DeviceBackend& backend, const LoadedKernel& kernel, const Tensor& a,
                       const Tensor& b, const Tensor& out, double alpha, void* stream) {
  const int32_t described = kernel.described_args();
  const int32_t num_args = described < 0 ? 4 : described;
  if (num_args != 4 && num_args != 5) {
    throw ValueError(fmt::format(
        "{}.json describes {} with {} arguments; the conformance kernel takes (a, b, out, alpha) "
        "or (a, b, out, alpha, n)",
        kernel.spec().path, kernel.spec().kernel, num_args));
  }
  const int64_t n = out.numel();
  const Any length(n);
  KilnAny args[5] = {Any(a).to_abi(), Any(b).to_abi(), Any(out).to_abi(), Any(alpha).to_abi(),
                     length.to_abi()};
  const uint32_t block[3] = {256, 1, 1};
  const uint32_t grid[3] = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
  backend.launch(kernel.kernel(), args, num_args, grid, block, 0, stream);
}

void launch_spin(const DeviceBackend& backend, const LoadedKernel& kernel, const Tensor& out,
                 int64_t ns, void* stream) {
  const int32_t described = kernel.described_args();
  if (described >= 0 && described != 2) {
    throw ValueError(fmt::format(
        "{}.json describes {} with {} arguments; the kernel of known duration takes (out, ns)",
        kernel.spec().path, kernel.spec().kernel, described));
  }
  const Any duration(ns);
  KilnAny args[2] = {Any(out).to_abi(), duration.to_abi()};
  const uint32_t one[3] = {1, 1, 1};
  backend.launch(kernel.kernel(), args, 2, one, one, 0, stream);
}

std::string vector_add_mismatch(const std::string& kernel, std::span<const float> a,
                                std::span<const float> b, std::span<const float> out,
                                double alpha) {
  const auto scale = static_cast<float>(alpha);
  size_t wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const float expected = a[i] + scale * b[i];
    // Float rounding (a device may fuse the multiply-add) is far below this bound; a missed
    // element, NaN or a wrong formula is far above it.
    const bool ok = std::fabs(out[i] - expected) <= 1e-5f * std::max(1.0f, std::fabs(expected));
    if (!ok && wrong++ == 0) first = i;
  }
  if (wrong == 0) return "";
  return fmt::format(
      "{} computed wrong results over n = {} with alpha = {}: first wrong index {}: expected {}, "
      "got {} ({} of {} elements wrong)",
      kernel, out.size(), alpha, first, a[first] + scale * b[first], out[first], wrong, out.size());
}

}  // namespace kiln::conformance
