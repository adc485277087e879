// SPDX-License-Identifier: Apache-2.0
// A plugin library that passed negotiation, with validated copies of its component tables.
#ifndef KILN_SRC_PLUGIN_LOADED_PLUGIN_H_
#define KILN_SRC_PLUGIN_LOADED_PLUGIN_H_

#include <boost/dll/shared_library.hpp>
#include <memory>
#include <string>
#include <vector>

#include "kiln/c/kiln.h"
#include "kiln/object.h"

namespace kiln::plugin {

// Owns the dlopen handle. Destroyed when the Runtime and every object made through the
// plugin are gone: then it calls the plugin's shutdown and unloads the library.
class LoadedPlugin : public Object {
 public:
  LoadedPlugin(std::string name, boost::dll::shared_library library)
      : name(std::move(name)), library(std::move(library)) {}
  ~LoadedPlugin() override {
    if (info.shutdown != nullptr) info.shutdown(info.plugin_state);
  }

  std::string name;
  boost::dll::shared_library library;  // declared first among owners: unloaded last
  KilnPluginInfo info{};
  // Zero-extended copies of the plugin's tables: slots past a table's struct_size read NULL.
  std::vector<std::unique_ptr<KilnDeviceBackend>> devices;
  std::vector<std::unique_ptr<KilnLoader>> loaders;
  std::vector<std::unique_ptr<KilnExporter>> exporters;
  std::vector<std::unique_ptr<KilnMetricCollector>> collectors;
  std::vector<std::string> device_names, loader_names, exporter_names, collector_names;
};

// The name of the plugin `owner` is (the Ref<Object> a Runtime hands out beside a component
// table), for error messages; "?" when it is not a LoadedPlugin.
inline std::string name_of(const Ref<Object>& owner) {
  const auto* loaded = dynamic_cast<const LoadedPlugin*>(owner.get());
  return loaded != nullptr ? loaded->name : "?";
}

}  // namespace kiln::plugin

#endif  // KILN_SRC_PLUGIN_LOADED_PLUGIN_H_
