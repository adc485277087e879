// SPDX-License-Identifier: Apache-2.0
#include "plugin_state.h"

#include <cstdio>
#include <cstring>

#include "kiln/sdk/plugin.hpp"
#include "rocm_device.h"

namespace kiln::rocm {
namespace {

// hipGetDeviceProperties writes the layout of the headers the runtime was built with; the
// slack keeps a newer runtime that appended fields from writing past the buffer.
struct PropertiesBuffer {
  hipDeviceProp_t props;
  unsigned char slack[4096];
};

// A fixed char array as a string, stopping at the first NUL (or at its end).
template <size_t N>
std::string fixed_string(const char (&text)[N]) {
  const void* nul = std::memchr(text, 0, N);
  return std::string(text, nul != nullptr ? static_cast<const char*>(nul) : text + N);
}

// What a device's gcnArchName must look like to be used ("gfx" and a target ID).
bool plausible_arch(const std::string& arch) { return arch.rfind("gfx", 0) == 0; }

DeviceInfo describe_device(const HipApi& api, const hipDeviceProp_t& p, int id) {
  DeviceInfo d;
  d.name = fixed_string(p.name);
  if (d.name.empty()) d.name = "AMD GPU " + std::to_string(id);
  d.gcn_arch_name = fixed_string(p.gcnArchName);
  if (!plausible_arch(d.gcn_arch_name)) {
    sdk::log(KILN_LOG_WARN,
             "device %d reports gcnArchName '%s', which is not an AMDGPU target ID; code objects "
             "cannot be matched to it",
             id, d.gcn_arch_name.c_str());
    d.gcn_arch_name.clear();
  }
  d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.l2_cache_bytes = p.l2CacheSize;
  d.compute_units = p.multiProcessorCount;
  d.clock_khz = p.clockRate;
  d.memory_clock_khz = p.memoryClockRate;
  d.memory_bus_width_bits = p.memoryBusWidth;
  d.warp_size = p.warpSize;
  d.pci_domain = p.pciDomainID;
  d.pci_bus = p.pciBusID;
  d.pci_device = p.pciDeviceID;
  d.integrated = p.integrated;
  if (p.maxThreadsPerBlock > 0) d.limits.max_threads_per_block = p.maxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    if (p.maxThreadsDim[i] > 0) d.limits.max_block[i] = p.maxThreadsDim[i];
    if (p.maxGridSize[i] > 0) d.limits.max_grid[i] = p.maxGridSize[i];
  }
  if (p.sharedMemPerBlock > 0) {
    d.limits.shared_memory_per_block_bytes = static_cast<int64_t>(p.sharedMemPerBlock);
  }
  char bus_id[64] = {};
  if (api.DeviceGetPCIBusId != nullptr &&
      api.DeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id) - 1), id) == hipSuccess) {
    d.pci_bus_id = fixed_string(bus_id);
  }
  if (d.pci_bus_id.empty()) {
    std::snprintf(bus_id, sizeof(bus_id), "%04x:%02x:%02x.0", p.pciDomainID & 0xffff,
                  p.pciBusID & 0xff, p.pciDeviceID & 0xff);
    d.pci_bus_id = bus_id;
  }
  return d;
}

}  // namespace

PluginState::PluginState()
    : device_(sdk::make_device_backend(&device_backend_, kDLROCM)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "rocm", &device_)} {}

void PluginState::configure(const KilnHostServices* /*host*/, const char* options_json) {
  options_ = parse_plugin_options(options_json);
  for (const std::string& key : options_.unknown) {
    sdk::log(KILN_LOG_WARN,
             "ignoring unknown option '%s' (known: hip_library, hiprtc_library, "
             "compile_options)",
             key.c_str());
  }
}

const Driver& PluginState::driver() {
  std::call_once(driver_once_, [this] { initialise(); });
  return driver_;
}

void PluginState::initialise() {
  std::string why;
  driver_.api = load_hip_api(options_.hip_library, &why);
  if (!driver_.api) {
    driver_.why_none = why;
    sdk::log(KILN_LOG_DEBUG, "%s", why.c_str());
    return;
  }
  const HipApi& api = *driver_.api;
  const std::string where = api.library + ", HIP runtime " + api.version_string();
  int count = 0;
  const hipError_t e = api.GetDeviceCount(&count);
  if (e != hipSuccess) {
    driver_.why_none = "hipGetDeviceCount failed with " + api.describe(e) + " (" + where + ")";
    if (e == hipErrorNoDevice) {
      driver_.why_none +=
          ": no AMD GPU is visible to this process (is /dev/kfd present and accessible, and are "
          "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES unset?)";
    }
    sdk::log(KILN_LOG_DEBUG, "%s", driver_.why_none.c_str());
    return;
  }
  if (count <= 0) {
    driver_.why_none = "hipGetDeviceCount found no devices (" + where + ")";
    return;
  }
  std::vector<DeviceInfo> devices;
  for (int id = 0; id < count; ++id) {
    auto buffer = std::make_unique<PropertiesBuffer>();
    std::memset(buffer.get(), 0, sizeof(PropertiesBuffer));
    const hipError_t pe = api.GetDeviceProperties(&buffer->props, id);
    if (pe != hipSuccess) {
      driver_.why_none = "hipGetDeviceProperties(" + std::to_string(id) + ") failed with " +
                         api.describe(pe) + " (" + where + ")";
      return;
    }
    devices.push_back(describe_device(api, buffer->props, id));
    sdk::log(KILN_LOG_DEBUG, "device %d: %s (%s), %lld compute units", id,
             devices.back().name.c_str(), devices.back().gcn_arch_name.c_str(),
             static_cast<long long>(devices.back().compute_units));
  }
  driver_.devices = std::move(devices);
}

const DeviceInfo& PluginState::use_device(int32_t id) {
  const Driver& d = driver();
  if (d.devices.empty()) throw sdk::Error(KILN_ERROR_UNAVAILABLE, "no device: " + d.why_none);
  const auto count = static_cast<int32_t>(d.devices.size());
  if (id < 0 || id >= count) {
    throw sdk::Error(KILN_ERROR_INDEX,
                     "device id " + std::to_string(id) + " is out of range: the rocm backend has " +
                         std::to_string(count) +
                         (count == 1 ? " device (id 0)"
                                     : " devices (ids 0 to " + std::to_string(count - 1) + ")"));
  }
  check(*d.api, d.api->SetDevice(id), "hipSetDevice(" + std::to_string(id) + ")");
  return d.devices[static_cast<size_t>(id)];
}

const Hiprtc& PluginState::hiprtc() {
  std::call_once(hiprtc_once_,
                 [this] { hiprtc_ = load_hiprtc(options_.hiprtc_library, &hiprtc_why_); });
  if (!hiprtc_) throw sdk::Error(KILN_ERROR_UNAVAILABLE, hiprtc_why_);
  return *hiprtc_;
}

void PluginState::remember_base(void* aligned, void* base) {
  std::lock_guard<std::mutex> lock(bases_mu_);
  bases_[aligned] = base;
}

void* PluginState::take_base(void* p) {
  std::lock_guard<std::mutex> lock(bases_mu_);
  auto it = bases_.find(p);
  if (it == bases_.end()) return p;
  void* base = it->second;
  bases_.erase(it);
  return base;
}

}  // namespace kiln::rocm
