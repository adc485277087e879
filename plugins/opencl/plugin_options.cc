// SPDX-License-Identifier: Apache-2.0
#include "plugin_options.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::opencl {
namespace {

std::string string_option(const std::string& key, const nlohmann::json& value) {
  if (!value.is_string()) {
    sdk::throw_value_error("option " + key + " = " + value.dump() +
                           " is invalid: expected a string");
  }
  return value.get<std::string>();
}

DeviceTypeFilter device_type_option(const nlohmann::json& value) {
  const std::string text = string_option("device_type", value);
  for (DeviceTypeFilter f : {DeviceTypeFilter::kAll, DeviceTypeFilter::kGpu, DeviceTypeFilter::kCpu,
                             DeviceTypeFilter::kAccelerator}) {
    if (text == to_string(f)) return f;
  }
  sdk::throw_value_error("option device_type = " + value.dump() +
                         " is invalid: expected one of all, gpu, cpu, accelerator");
}

int64_t cache_entries_option(const nlohmann::json& value) {
  const std::string text = value.dump();
  const std::string range = "an integer from 0 to " + std::to_string(kMaxMemoryCacheEntries);
  if (!value.is_number_integer()) {
    sdk::throw_value_error("option memory_cache_entries = " + text + " is invalid: expected " +
                           range);
  }
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(kMaxMemoryCacheEntries)) {
      sdk::throw_value_error("option memory_cache_entries = " + text +
                             " is out of range: expected " + range);
    }
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  const int64_t n = value.get<int64_t>();
  if (n < 0 || n > kMaxMemoryCacheEntries) {
    sdk::throw_value_error("option memory_cache_entries = " + text + " is out of range: expected " +
                           range);
  }
  return n;
}

}  // namespace

const char* to_string(DeviceTypeFilter filter) {
  switch (filter) {
    case DeviceTypeFilter::kAll:
      return "all";
    case DeviceTypeFilter::kGpu:
      return "gpu";
    case DeviceTypeFilter::kCpu:
      return "cpu";
    case DeviceTypeFilter::kAccelerator:
      return "accelerator";
  }
  return "all";
}

PluginOptions resolve_options(const char* options_json, const char* env_cache_dir) {
  const std::string_view json_text =
      options_json != nullptr && *options_json != '\0' ? options_json : "{}";
  const nlohmann::json options = nlohmann::json::parse(json_text, nullptr, false);
  if (options.is_discarded())
    sdk::throw_value_error("options are not valid JSON: " + std::string(json_text));
  if (!options.is_object())
    sdk::throw_value_error("options must be a JSON object, got " + options.dump());
  PluginOptions result;
  bool cache_dir_given = false;
  for (const auto& [key, value] : options.items()) {
    if (key == "platform") {
      result.platform = string_option(key, value);
    } else if (key == "device") {
      result.device = string_option(key, value);
    } else if (key == "device_type") {
      result.device_type = device_type_option(value);
    } else if (key == "cache_dir") {
      result.cache_dir = string_option(key, value);
      cache_dir_given = true;
    } else if (key == "build_options") {
      result.build_options = string_option(key, value);
    } else if (key == "memory_cache_entries") {
      result.memory_cache_entries = cache_entries_option(value);
    } else {
      result.unknown.push_back(key);
    }
  }
  if (cache_dir_given) {
    result.cache_dir_source = "option cache_dir";
  } else if (env_cache_dir != nullptr && *env_cache_dir != '\0') {
    result.cache_dir = env_cache_dir;
    result.cache_dir_source = "KILN_OPENCL_CACHE_DIR";
  }
  return result;
}

}  // namespace kiln::opencl
