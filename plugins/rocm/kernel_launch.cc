// SPDX-License-Identifier: Apache-2.0
#include "kernel_launch.h"

#include <string>

#include "kiln/c/abi.h"
#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/error.hpp"

namespace kiln::rocm {
namespace {

std::string device_name(const DLDevice& d) {
  std::string type;
  // Read as an integer: a vendor code (64..127) is no DLDeviceType enumerator.
  switch (sdk::device_type_code(d)) {
    case kDLCPU:
      type = "cpu";
      break;
    case kDLCUDA:
      type = "cuda";
      break;
    case kDLOpenCL:
      type = "opencl";
      break;
    case kDLROCM:
      type = "rocm";
      break;
    default:
      type = "device type " + std::to_string(sdk::device_type_code(d));
  }
  return type + ":" + std::to_string(d.device_id);
}

const char* const kAxes[3] = {"x", "y", "z"};

}  // namespace

uint64_t tensor_handle(const DLTensor& tensor, size_t index, int32_t device_id) {
  const std::string where = "argument " + std::to_string(index);
  if (sdk::device_type_code(tensor.device) != kDLROCM || tensor.device.device_id != device_id) {
    throw sdk::Error(KILN_ERROR_VALUE, where + " is a tensor on " + device_name(tensor.device) +
                                           ", but the kernel runs on rocm:" +
                                           std::to_string(device_id) + "; copy it there first");
  }
  if (tensor.data == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, where + " is a tensor without data (NULL pointer)");
  }
  const auto base = reinterpret_cast<uint64_t>(tensor.data);
  if (tensor.byte_offset > UINT64_MAX - base) {
    throw sdk::Error(KILN_ERROR_VALUE, where + " has a byte_offset (" +
                                           std::to_string(tensor.byte_offset) +
                                           ") that overflows its address");
  }
  return base + tensor.byte_offset;
}

void check_launch_extents(const char* kernel, const uint32_t* grid, const uint32_t* block,
                          uint32_t dynamic_shared_bytes, const LaunchLimits& limits) {
  const std::string where = std::string("kernel '") + (kernel != nullptr ? kernel : "?") + "'";
  if (grid == nullptr || block == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, where + ": launch without grid or block extents");
  }
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) {
      throw sdk::Error(KILN_ERROR_VALUE, where + ": grid." + kAxes[i] + " = " +
                                             std::to_string(grid[i]) + ", block." + kAxes[i] +
                                             " = " + std::to_string(block[i]) +
                                             "; every extent must be at least 1");
    }
    if (block[i] > limits.max_block[i]) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       where + ": block." + kAxes[i] + " = " + std::to_string(block[i]) +
                           " exceeds the device's limit of " + std::to_string(limits.max_block[i]));
    }
    if (grid[i] > limits.max_grid[i]) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       where + ": grid." + kAxes[i] + " = " + std::to_string(grid[i]) +
                           " exceeds the device's limit of " + std::to_string(limits.max_grid[i]));
    }
    threads *= block[i];
  }
  if (threads > limits.max_threads_per_block) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where + ": a block of " + std::to_string(block[0]) + " x " +
                         std::to_string(block[1]) + " x " + std::to_string(block[2]) + " = " +
                         std::to_string(threads) + " threads exceeds the device's limit of " +
                         std::to_string(limits.max_threads_per_block));
  }
  if (dynamic_shared_bytes > limits.shared_memory_per_block_bytes) {
    throw sdk::Error(KILN_ERROR_VALUE, where + ": " + std::to_string(dynamic_shared_bytes) +
                                           " bytes of dynamic shared memory exceed the device's " +
                                           std::to_string(limits.shared_memory_per_block_bytes) +
                                           " bytes per block");
  }
}

}  // namespace kiln::rocm
