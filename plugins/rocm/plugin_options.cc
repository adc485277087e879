// SPDX-License-Identifier: Apache-2.0
#include "plugin_options.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::rocm {
namespace {

std::string string_option(const std::string& key, const nlohmann::json& value) {
  if (!value.is_string()) {
    sdk::throw_value_error("option " + key + " = " + value.dump() +
                           " is invalid: expected a string (a library name or path)");
  }
  return value.get<std::string>();
}

}  // namespace

PluginOptions parse_plugin_options(const char* options_json) {
  const std::string_view text =
      options_json != nullptr && *options_json != '\0' ? options_json : "{}";
  const nlohmann::json options = nlohmann::json::parse(text, nullptr, false);
  if (options.is_discarded())
    sdk::throw_value_error("options are not valid JSON: " + std::string(text));
  if (!options.is_object())
    sdk::throw_value_error("options must be a JSON object, got " + options.dump());
  PluginOptions out;
  for (const auto& [key, value] : options.items()) {
    if (key == "hip_library") {
      out.hip_library = string_option(key, value);
    } else if (key == "hiprtc_library") {
      out.hiprtc_library = string_option(key, value);
    } else if (key == "compile_options") {
      if (!value.is_array()) {
        sdk::throw_value_error("option compile_options = " + value.dump() +
                               " is invalid: expected a list of strings");
      }
      for (const auto& item : value) {
        if (!item.is_string()) {
          sdk::throw_value_error("option compile_options = " + value.dump() +
                                 " is invalid: " + item.dump() + " is not a string");
        }
        const std::string o = item.get<std::string>();
        if (o.rfind("--gpu-architecture", 0) == 0 || o.rfind("--offload-arch", 0) == 0) {
          sdk::throw_value_error(
              "option compile_options: '" + o +
              "' is not allowed: the architecture is the device's (its gcnArchName)");
        }
        out.compile_options.push_back(o);
      }
    } else {
      out.unknown.push_back(key);
    }
  }
  return out;
}

}  // namespace kiln::rocm
