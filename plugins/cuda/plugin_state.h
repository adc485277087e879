// SPDX-License-Identifier: Apache-2.0
// Everything the cuda plugin owns between negotiation and shutdown.
#ifndef KILN_PLUGINS_CUDA_PLUGIN_STATE_H_
#define KILN_PLUGINS_CUDA_PLUGIN_STATE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "cuda_device.h"
#include "cuda_driver.h"
#include "kiln/c/kiln.h"
#include "nvrtc_compiler.h"
#include "plugin_options.h"

namespace kiln::cuda {

// The plugin's state: options, the lazily initialised driver and NVRTC, and the component
// table whose `self` points here. Created by kiln_plugin_negotiate, destroyed by shutdown.
// Not copyable: the table holds its address.
class PluginState {
 public:
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  ~PluginState();

  // Reads the options (`options_json`, borrowed). Loads nothing: the driver is opened on the
  // first device query. Throws kiln::sdk::Error (KILN_ERROR_VALUE) for bad options.
  void configure(const char* options_json);

  const PluginOptions& options() const { return options_; }
  CudaDriver& driver() { return *driver_; }

  // NVRTC, opened on first use. Throws kiln::sdk::Error (KILN_ERROR_UNAVAILABLE) naming the
  // libraries tried when none loads.
  const NvrtcApi& nvrtc();

  // Allocations made larger than asked for to honour an alignment above the driver's 256
  // bytes: the aligned address handed out -> the address to free.
  void remember_overaligned(uint64_t aligned, uint64_t base);
  // The base of `aligned` (removed from the table), or 0 when it is an ordinary allocation.
  uint64_t take_overaligned(uint64_t aligned);

  std::span<const KilnComponent> components() const { return components_; }

 private:
  PluginOptions options_;
  std::unique_ptr<CudaDriver> driver_;
  std::once_flag nvrtc_once_;
  NvrtcApi nvrtc_;
  std::string nvrtc_why_;
  std::mutex overaligned_mu_;
  std::atomic<size_t> overaligned_count_{0};
  std::unordered_map<uint64_t, uint64_t> overaligned_;
  CudaDevice device_backend_{*this};
  KilnDeviceBackend device_;
  std::array<KilnComponent, 1> components_;
};

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_PLUGIN_STATE_H_
