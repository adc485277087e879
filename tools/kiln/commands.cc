// SPDX-License-Identifier: Apache-2.0
#include "commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/any.h"

namespace kiln::tool {
namespace {

nlohmann::json to_json(const Any& v) {
  switch (v.type_code()) {
    case KILN_TYPE_NONE:
      return nullptr;
    case KILN_TYPE_BOOL:
      return v.cast<bool>();
    case KILN_TYPE_INT:
      return v.cast<int64_t>();
    case KILN_TYPE_FLOAT:
      return v.cast<double>();
    default:
      return v.str();
  }
}

std::string join(const std::vector<std::string>& items) {
  return items.empty() ? "-" : fmt::format("{}", fmt::join(items, " "));
}

}  // namespace

RuntimeOptions runtime_options(const GlobalOptions& options) {
  RuntimeOptions r;
  r.plugin_set = options.plugin_set;
  r.search_paths = options.plugin_paths;
  return r;
}

int run_plugins(const GlobalOptions& options) {
  Runtime runtime(runtime_options(options));
  const auto& statuses = runtime.plugins();
  if (options.json) {
    nlohmann::json out;
    out["plugin_set"] = runtime.plugin_set_path() ? runtime.plugin_set_path()->string() : "";
    out["search_paths"] = nlohmann::json::array();
    for (const auto& p : runtime.search_paths()) out["search_paths"].push_back(p.string());
    out["plugins"] = nlohmann::json::array();
    for (const auto& s : statuses) {
      out["plugins"].push_back({{"name", s.name},
                                {"version", s.version},
                                {"abi", s.abi},
                                {"state", to_string(s.state)},
                                {"reason", s.reason},
                                {"manifest", s.manifest.string()},
                                {"library", s.library.string()},
                                {"provides", s.provides},
                                {"load_ms", s.load_ms}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "plugin set: "
              << (runtime.plugin_set_path() ? runtime.plugin_set_path()->string() : "(none)")
              << "\nsearch paths:";
    for (const auto& p : runtime.search_paths()) std::cout << "\n  " << p.string();
    std::cout << "\n\n";
    size_t name_w = 4, version_w = 7;
    for (const auto& s : statuses) {
      name_w = std::max(name_w, s.name.size());
      version_w = std::max(version_w, s.version.size());
    }
    std::cout << fmt::format("{:<{}}  {:<{}}  {:<4}  {:<8}  {}\n", "NAME", name_w, "VERSION",
                             version_w, "ABI", "STATE", "PROVIDES / REASON");
    for (const auto& s : statuses) {
      std::cout << fmt::format(
          "{:<{}}  {:<{}}  {:<4}  {:<8}  {}\n", s.name, name_w, s.version.empty() ? "-" : s.version,
          version_w, s.abi.empty() ? "-" : s.abi, to_string(s.state),
          s.state == PluginStatus::State::kLoaded ? join(s.provides) : s.reason);
    }
    if (statuses.empty()) std::cout << "(no plugin manifests found in the search paths)\n";
  }
  return kExitOk;
}

int run_devices(const GlobalOptions& options) {
  Runtime runtime(runtime_options(options));
  const auto backends = runtime.backends();
  // Plugins that would provide a device type but are not loaded, so that no device type
  // disappears without a reason: backends() lists those whose type nothing serves; the others
  // (a second copy of a served type, shadowed) are listed here.
  std::vector<const PluginStatus*> missing;
  for (const auto& s : runtime.plugins()) {
    if (s.state == PluginStatus::State::kLoaded) continue;
    if (std::any_of(backends.begin(), backends.end(), [&s](const BackendInfo& b) {
          return b.plugin == s.name && b.devices.empty();
        })) {
      continue;
    }
    if (std::any_of(s.provides.begin(), s.provides.end(),
                    [](const std::string& p) { return p.rfind("device:", 0) == 0; })) {
      missing.push_back(&s);
    }
  }
  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& b : backends) {
      nlohmann::json jb{{"type", b.type_name}, {"plugin", b.plugin}, {"why_none", b.why_none}};
      jb["devices"] = nlohmann::json::array();
      for (const auto& d : b.devices) {
        nlohmann::json attrs = nlohmann::json::object();
        for (const auto& [k, v] : d.attributes) attrs[k] = to_json(v);
        jb["devices"].push_back({{"device", runtime.device_str(d.device)}, {"attributes", attrs}});
      }
      out.push_back(jb);
    }
    for (const auto* s : missing) {
      out.push_back({{"plugin", s->name},
                     {"devices", nlohmann::json::array()},
                     {"why_none", fmt::format("plugin {}: {}", to_string(s->state), s->reason)}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& b : backends) {
    if (b.devices.empty()) {
      std::cout << fmt::format("{} (plugin {}): no devices: {}\n", b.type_name, b.plugin,
                               b.why_none);
      continue;
    }
    std::cout << fmt::format("{} (plugin {}): {} device{}\n", b.type_name, b.plugin,
                             b.devices.size(), b.devices.size() == 1 ? "" : "s");
    for (const auto& d : b.devices) {
      // The name its plugin gives the type ("acmeaccel:0"), as everywhere else, not "dev121:0".
      std::cout << "  " << runtime.device_str(d.device) << "\n";
      size_t w = 0;
      for (const auto& [k, v] : d.attributes) w = std::max(w, k.size());
      for (const auto& [k, v] : d.attributes) {
        std::cout << fmt::format("    {:<{}}  {}\n", k, w, v.str());
      }
    }
  }
  for (const auto* s : missing) {
    std::cout << fmt::format("{}: no devices: plugin {}: {}\n", s->name, to_string(s->state),
                             s->reason);
  }
  if (backends.empty() && missing.empty()) {
    std::cout << "no device backends are loaded; run `kiln plugins` to see why\n";
  }
  return kExitOk;
}

}  // namespace kiln::tool
