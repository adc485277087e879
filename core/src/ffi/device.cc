// SPDX-License-Identifier: Apache-2.0
#include "kiln/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "kiln/error.h"

namespace kiln {

DeviceTypeNames::DeviceTypeNames() {
  const std::pair<const char*, int32_t> canonical[] = {{"cpu", kDLCPU},
                                                       {"cuda", kDLCUDA},
                                                       {"cuda_host", kDLCUDAHost},
                                                       {"opencl", kDLOpenCL},
                                                       {"vulkan", kDLVulkan},
                                                       {"metal", kDLMetal},
                                                       {"vpi", kDLVPI},
                                                       {"rocm", kDLROCM},
                                                       {"rocm_host", kDLROCMHost},
                                                       {"ext_dev", kDLExtDev},
                                                       {"cuda_managed", kDLCUDAManaged}};
  for (const auto& [name, code] : canonical) {
    by_name_.emplace(name, code);
    canonical_.emplace(code, name);
  }
  const std::pair<const char*, int32_t> aliases[] = {
      {"llvm", kDLCPU}, {"c", kDLCPU}, {"nvptx", kDLCUDA}, {"cl", kDLOpenCL}, {"hip", kDLROCM}};
  for (const auto& [alias, code] : aliases) by_name_.emplace(alias, code);
}

const DeviceTypeNames& DeviceTypeNames::builtin() {
  static const DeviceTypeNames names;
  return names;
}

std::optional<int32_t> DeviceTypeNames::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> DeviceTypeNames::name_of(int32_t code) const {
  auto it = canonical_.find(code);
  if (it == canonical_.end()) return std::nullopt;
  return it->second;
}

void DeviceTypeNames::add(const std::string& name, int32_t code) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    if (it->second != code) {
      throw ValueError(fmt::format("device type '{}' is already registered with code {}, not {}",
                                   name, it->second, code));
    }
    return;
  }
  by_name_.emplace(name, code);
  canonical_.emplace(code, name);
}

std::vector<std::string> DeviceTypeNames::names() const {
  std::vector<std::string> out;
  for (const auto& [code, name] : canonical_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void DeviceTypeNames::add_missing_hint(const std::string& name, std::string hint) {
  missing_hints_[name] = std::move(hint);
}

void DeviceTypeNames::set_hint_for_any_missing(std::string hint) {
  any_missing_hint_ = std::move(hint);
}

Device DeviceTypeNames::parse(std::string_view text) const {
  std::string_view name = text;
  int32_t id = 0;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    std::string_view index = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), id);
    if (index.empty() || ec != std::errc() || end != index.data() + index.size() || id < 0) {
      throw ValueError(
          fmt::format("bad device '{}': the index after ':' must be a non-negative integer", text));
    }
  }
  auto code = find(name);
  if (!code) {
    auto hint = missing_hints_.find(name);
    throw ValueError(fmt::format("unknown device type '{}' in '{}' (known: {}){}", name, text,
                                 fmt::join(names(), ", "),
                                 hint != missing_hints_.end() ? hint->second : any_missing_hint_));
  }
  return Device{*code, id};
}

std::string DeviceTypeNames::str(Device device) const {
  if (device.is_remote()) {
    return fmt::format("remote{}:{}", device.session_index(), str(device.server_device()));
  }
  auto name = name_of(device.type);
  return fmt::format("{}:{}", name ? *name : fmt::format("dev{}", device.type), device.id);
}

Device Device::parse(std::string_view text) { return DeviceTypeNames::builtin().parse(text); }

std::string Device::str() const { return DeviceTypeNames::builtin().str(*this); }

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace kiln
