// SPDX-License-Identifier: Apache-2.0
#include "plugin_state.h"

#include "cuda_device.h"
#include "kiln/sdk/plugin.hpp"

namespace kiln::cuda {

PluginState::PluginState()
    : driver_(std::make_unique<CudaDriver>(kDefaultDriverLibrary)),
      device_(sdk::make_device_backend(&device_backend_, kDLCUDA)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "cuda", &device_)} {}

PluginState::~PluginState() = default;

void PluginState::configure(const char* options_json) {
  options_ = parse_options(options_json);
  for (const std::string& key : options_.unknown) {
    sdk::log(KILN_LOG_WARN, "ignoring unknown option '%s'", key.c_str());
  }
  driver_ = std::make_unique<CudaDriver>(options_.driver_library);
  sdk::log(KILN_LOG_DEBUG, "driver library %s (opened on the first device query)",
           options_.driver_library.c_str());
}

const NvrtcApi& PluginState::nvrtc() {
  std::call_once(nvrtc_once_, [this] {
    const std::vector<std::string>& candidates =
        options_.nvrtc_libraries.empty() ? NvrtcApi::default_libraries() : options_.nvrtc_libraries;
    if (nvrtc_.open(candidates, &nvrtc_why_)) {
      sdk::log(KILN_LOG_DEBUG, "NVRTC %d.%d from %s", nvrtc_.major_version(),
               nvrtc_.minor_version(), nvrtc_.library().c_str());
    }
  });
  if (!nvrtc_.is_open()) throw sdk::Error(KILN_ERROR_UNAVAILABLE, nvrtc_why_);
  return nvrtc_;
}

void PluginState::remember_overaligned(uint64_t aligned, uint64_t base) {
  std::lock_guard<std::mutex> lock(overaligned_mu_);
  overaligned_[aligned] = base;
  overaligned_count_.store(overaligned_.size(), std::memory_order_release);
}

uint64_t PluginState::take_overaligned(uint64_t aligned) {
  if (overaligned_count_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> lock(overaligned_mu_);
  auto it = overaligned_.find(aligned);
  if (it == overaligned_.end()) return 0;
  const uint64_t base = it->second;
  overaligned_.erase(it);
  overaligned_count_.store(overaligned_.size(), std::memory_order_release);
  return base;
}

}  // namespace kiln::cuda
