// SPDX-License-Identifier: Apache-2.0
#include "plugin_options.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "nvrtc_compiler.h"

namespace kiln::cuda {
namespace {

std::string library_name(const std::string& key, const nlohmann::json& value) {
  if (!value.is_string() || value.get<std::string>().empty()) {
    sdk::throw_value_error(
        "option " + key + " = " + value.dump() +
        " is invalid: expected a non-empty string (a library file name or path)");
  }
  return value.get<std::string>();
}

}  // namespace

PluginOptions parse_options(const char* options_json) {
  const std::string_view text =
      options_json != nullptr && *options_json != '\0' ? options_json : "{}";
  const nlohmann::json options = nlohmann::json::parse(text, nullptr, false);
  if (options.is_discarded())
    sdk::throw_value_error("options are not valid JSON: " + std::string(text));
  if (!options.is_object())
    sdk::throw_value_error("options must be a JSON object, got " + options.dump());
  PluginOptions result;
  for (const auto& [key, value] : options.items()) {
    if (key == "driver_library") {
      result.driver_library = library_name(key, value);
    } else if (key == "nvrtc_library") {
      if (value.is_array()) {
        if (value.empty())
          sdk::throw_value_error("option nvrtc_library = [] is invalid: name at least one library");
        for (const auto& item : value) result.nvrtc_libraries.push_back(library_name(key, item));
      } else {
        result.nvrtc_libraries.push_back(library_name(key, value));
      }
    } else if (key == "build_options") {
      if (!value.is_string()) {
        sdk::throw_value_error("option build_options = " + value.dump() +
                               " is invalid: expected a string of NVRTC options");
      }
      result.build_options = value.get<std::string>();
      (void)split_options(result.build_options, "option build_options");  // checked now
    } else {
      result.unknown.push_back(key);
    }
  }
  return result;
}

}  // namespace kiln::cuda
