#include "kiln/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>

#include "kiln/c/abi.h"
#include "kiln/error.h"

namespace kiln {
namespace device_types {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, int32_t, std::less<>> by_name;  // canonical names and aliases
  std::map<int32_t, std::string> canonical;
  Registry() {
    const std::pair<const char*, int32_t> builtin[] = {{"cpu", kDLCPU},
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
    for (const auto& [name, code] : builtin) {
      by_name.emplace(name, code);
      canonical.emplace(code, name);
    }
    for (const auto& [alias, code] : {std::pair<const char*, int32_t>{"llvm", kDLCPU},
                                      {"c", kDLCPU},
                                      {"nvptx", kDLCUDA},
                                      {"cl", kDLOpenCL},
                                      {"hip", kDLROCM}}) {
      by_name.emplace(alias, code);
    }
  }
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

std::optional<int32_t> find(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find(name);
  if (it == r.by_name.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> name_of(int32_t code) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.canonical.find(code);
  if (it == r.canonical.end()) return std::nullopt;
  return it->second;
}

void add(const std::string& name, int32_t code) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find(name);
  if (it != r.by_name.end()) {
    if (it->second != code) {
      throw ValueError(fmt::format("device type '{}' is already registered with code {}, not {}",
                                   name, it->second, code));
    }
    return;
  }
  r.by_name.emplace(name, code);
  r.canonical.emplace(code, name);
}

std::vector<std::string> names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [code, name] : r.canonical) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace device_types

Device Device::parse(std::string_view text) {
  std::string_view name = text;
  int32_t id = 0;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    std::string_view index = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), id);
    if (index.empty() || ec != std::errc() || end != index.data() + index.size() || id < 0) {
      throw ValueError(
          fmt::format("bad device '{}': the index after ':' must be a "
                      "non-negative integer",
                      text));
    }
  }
  auto code = device_types::find(name);
  if (!code) {
    throw ValueError(fmt::format("unknown device type '{}' in '{}' (known: {})", name, text,
                                 fmt::join(device_types::names(), ", ")));
  }
  return Device{*code, id};
}

std::string Device::str() const {
  if (is_remote()) return fmt::format("remote{}:{}", session_index(), server_device().str());
  auto name = device_types::name_of(type);
  return fmt::format("{}:{}", name ? *name : fmt::format("dev{}", type), id);
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace kiln
