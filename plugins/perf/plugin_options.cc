// SPDX-License-Identifier: Apache-2.0
#include "plugin_options.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::perf {
namespace {

// Returns the events named by the `events` option's `value`, or throws naming the problem.
std::vector<const PerfEvent*> parse_events(const nlohmann::json& value) {
  if (!value.is_array()) {
    sdk::throw_value_error(
        "option events = " + value.dump() +
        " is invalid: expected a list of event names (known events: " + known_event_names() + ")");
  }
  // An empty list would load a collector that never reports anything; a plugin-set entry
  // with `enabled: false` says that intent explicitly.
  if (value.empty()) {
    sdk::throw_value_error("option events is empty: name at least one event (known events: " +
                           known_event_names() + "), or disable the plugin with enabled: false");
  }
  std::vector<const PerfEvent*> events;
  for (const nlohmann::json& item : value) {
    if (!item.is_string()) {
      sdk::throw_value_error("option events: entry " + item.dump() +
                             " is not a string (known events: " + known_event_names() + ")");
    }
    const std::string& name = item.get_ref<const std::string&>();
    const PerfEvent* event = find_event(name);
    if (event == nullptr) {
      sdk::throw_value_error("option events: unknown event '" + name +
                             "'; known events: " + known_event_names());
    }
    // A repeated event would be reported twice under one metric name, the second value
    // silently replacing the first in the profiler's row.
    if (std::find(events.begin(), events.end(), event) != events.end()) {
      sdk::throw_value_error("option events: event '" + name + "' is listed twice");
    }
    events.push_back(event);
  }
  return events;
}

}  // namespace

PluginOptions resolve_options(const char* options_json) {
  const std::string_view json_text =
      options_json != nullptr && *options_json != '\0' ? options_json : "{}";
  const nlohmann::json options = nlohmann::json::parse(json_text, nullptr, false);
  if (options.is_discarded()) {
    sdk::throw_value_error("options are not valid JSON: " + std::string(json_text));
  }
  if (!options.is_object()) {
    sdk::throw_value_error("options must be a JSON object, got " + options.dump());
  }
  PluginOptions result;
  bool events_given = false;
  for (const auto& [key, value] : options.items()) {
    if (key == "events") {
      result.events = parse_events(value);
      events_given = true;
    } else {
      result.unknown.push_back(key);
    }
  }
  if (!events_given) {
    for (const PerfEvent& event : known_events()) result.events.push_back(&event);
  }
  return result;
}

}  // namespace kiln::perf
