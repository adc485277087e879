// SPDX-License-Identifier: Apache-2.0
// Everything the rocm plugin owns between negotiation and shutdown: its options, the HIP
// runtime (loaded lazily, once, on the first device query), the devices it found or the
// reason it found none, hiprtc (loaded on the first hip_source module) and the component table.
#ifndef KILN_PLUGINS_ROCM_PLUGIN_STATE_H_
#define KILN_PLUGINS_ROCM_PLUGIN_STATE_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "hip_api.h"
#include "hiprtc_compiler.h"
#include "kernel_launch.h"
#include "kiln/c/kiln.h"
#include "plugin_options.h"
#include "rocm_device.h"

namespace kiln::rocm {

// One HIP device as enumerated at initialisation.
struct DeviceInfo {
  std::string name;           // "AMD Instinct MI210"
  std::string gcn_arch_name;  // target ID, e.g. "gfx90a:sramecc+:xnack-"; "" if unreadable
  std::string pci_bus_id;     // "0000:03:00.0"
  int64_t memory_bytes = 0;
  int64_t l2_cache_bytes = 0;
  int64_t compute_units = 0;
  int64_t clock_khz = 0;
  int64_t memory_clock_khz = 0;
  int64_t memory_bus_width_bits = 0;
  int64_t warp_size = 0;
  int64_t pci_domain = 0;
  int64_t pci_bus = 0;
  int64_t pci_device = 0;
  int64_t integrated = 0;
  LaunchLimits limits;
};

// The outcome of the lazy initialisation.
struct Driver {
  std::unique_ptr<HipApi> api;  // NULL when the runtime could not be loaded
  std::vector<DeviceInfo> devices;
  std::string why_none;  // why `devices` is empty; lives until shutdown
};

class PluginState {
 public:
  // Builds the component table; configure() must run before it is used.
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;

  // Reads the options (`options_json`, borrowed). Does not touch the HIP runtime. Throws
  // kiln::sdk::Error(KILN_ERROR_VALUE) for bad options.
  void configure(const KilnHostServices* host, const char* options_json);
  const PluginOptions& options() const { return options_; }

  // Loads the HIP runtime and enumerates the devices on the first call, once, thread-safe.
  // Failures end up in why_none; never throws except std::bad_alloc.
  const Driver& driver();

  // Device `id` made current on the calling thread (hipSetDevice). Throws kiln::sdk::Error:
  // KILN_ERROR_UNAVAILABLE with why_none when there is no device, KILN_ERROR_INDEX for an id
  // out of range, or the hipSetDevice error.
  const DeviceInfo& use_device(int32_t id);
  // The runtime; only valid after use_device() succeeded once.
  const HipApi& api() const { return *driver_.api; }

  // hiprtc, loaded on first use, once. Throws kiln::sdk::Error(KILN_ERROR_UNAVAILABLE) with
  // the reason it cannot be loaded.
  const Hiprtc& hiprtc();

  // Allocations whose requested alignment hipMalloc did not meet are over-allocated; these
  // record and look up the pointer hipMalloc returned for the aligned one handed out.
  void remember_base(void* aligned, void* base);
  // The base of `p` (removing the record), or `p` when it was not over-allocated.
  void* take_base(void* p);

  std::span<const KilnComponent> components() const { return components_; }

 private:
  void initialise();

  PluginOptions options_;
  std::once_flag driver_once_;
  Driver driver_;
  std::once_flag hiprtc_once_;
  std::unique_ptr<Hiprtc> hiprtc_;
  std::string hiprtc_why_;
  std::mutex bases_mu_;
  std::map<void*, void*> bases_;
  RocmDevice device_backend_{*this};
  KilnDeviceBackend device_;
  std::array<KilnComponent, 1> components_;
};

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_PLUGIN_STATE_H_
