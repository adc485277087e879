// SPDX-License-Identifier: Apache-2.0
// A MetricCollector backed by a KilnMetricCollector component of a plugin a Runtime loaded
// (declared in kiln/profiling/collector.h; it lives with the Runtime, whose components it
// adapts, so that profiling itself does not depend on plugin loading).
#include <fmt/format.h>

#include <mutex>
#include <set>

#include "ffi/error_object.h"
#include "kiln/c/collector.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/profiling/collector.h"
#include "kiln/runtime.h"
#include "kiln/sdk/abi.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/temp_dir.h"
#include "plugin/loaded_plugin.h"

namespace kiln::profiling {
namespace {

class PluginCollector : public MetricCollector {
 public:
  PluginCollector(std::string name, const KilnMetricCollector* table, Ref<Object> plugin)
      : name_(std::move(name)),
        plugin_name_(plugin::name_of(plugin)),
        table_(table),
        plugin_(std::move(plugin)) {}
  ~PluginCollector() override { teardown(); }

  std::string name() const override { return name_; }

  void init(const std::vector<Device>& devices) override {
    teardown();
    std::vector<DLDevice> dl;
    for (const Device& d : devices) dl.push_back(d.to_dlpack());
    check(table_->init(table_->self, dl.data(), static_cast<int32_t>(dl.size()), &state_), "init");
    initialized_ = true;
  }

  std::shared_ptr<void> start(Device device) override {
    if (!initialized_) throw RuntimeError(fmt::format("collector '{}' started before init", name_));
    void* handle = nullptr;
    check(table_->start(table_->self, state_, device.to_dlpack(), &handle), "start");
    if (handle == nullptr) return nullptr;
    // The plugin frees the handle in stop(); a handle never stopped is the plugin's to reclaim
    // at teardown.
    return std::shared_ptr<void>(handle, [](void*) {});
  }

  MetricMap stop(std::shared_ptr<void> state) override {
    SinkContext sink_ctx{this, {}};
    auto sink = [](void* ctx, const KilnMetric* metric) {
      static_cast<SinkContext*>(ctx)->add(metric);
    };
    check(table_->stop(table_->self, state_, state.get(), sink, &sink_ctx), "stop");
    return std::move(sink_ctx.metrics);
  }

 private:
  // What one stop() call's sink fills.
  struct SinkContext {
    PluginCollector* collector;
    MetricMap metrics;

    // Adds `metric` read as this host's KilnMetric (fields past its struct_size read zero).
    // A metric smaller than the 1.0 layout or of a kind this host does not know (a later
    // minor's) is skipped with one warning per collector and problem, never mislabelled.
    void add(const KilnMetric* metric) {
      if (metric == nullptr) return;
      if (std::string why = sdk::check_struct<KilnMetric>(metric, "KilnMetric"); !why.empty()) {
        collector->warn_once("small", why);
        return;
      }
      const KilnMetric m = sdk::zero_extended<KilnMetric>(metric);
      if (m.name == nullptr) return;
      switch (m.kind) {
        case KILN_METRIC_COUNT:
          metrics[m.name] = Count{m.count};
          break;
        case KILN_METRIC_DURATION:
          metrics[m.name] = Duration{m.value};
          break;
        case KILN_METRIC_PERCENT:
          metrics[m.name] = Percent{m.value};
          break;
        case KILN_METRIC_RATIO:
          metrics[m.name] = Ratio{m.value};
          break;
        case KILN_METRIC_STRING:
          metrics[m.name] = std::string(m.str != nullptr ? m.str : "");
          break;
        default:
          collector->warn_once(
              fmt::format("kind {}", m.kind),
              fmt::format("skipping metrics of kind {} (first: '{}'): this Kiln (ABI {}.{}) "
                          "knows kinds 1-5",
                          m.kind, m.name, KILN_ABI_VERSION_MAJOR, KILN_ABI_VERSION_MINOR));
      }
    }
  };

  // Rethrows a slot's error naming the collector, the slot and the plugin.
  void check(KilnError* err, const char* slot) const {
    if (err == nullptr) return;
    ffi::raise_plugin_error(
        err, fmt::format("collector '{}' ({}, plugin '{}')", name_, slot, plugin_name_));
  }

  // Logs `message` the first time this collector hits the problem `key`.
  void warn_once(const std::string& key, const std::string& message) {
    std::lock_guard<std::mutex> lock(warned_mu_);
    if (warned_.insert(key).second) {
      log(LogLevel::kWarn, "profiling", fmt::format("collector '{}': {}", name_, message));
    }
  }

  void teardown() {
    if (initialized_) table_->teardown(table_->self, state_);
    initialized_ = false;
    state_ = nullptr;
  }

  std::string name_;
  std::string plugin_name_;
  const KilnMetricCollector* table_;
  Ref<Object> plugin_;
  void* state_ = nullptr;
  bool initialized_ = false;
  std::mutex warned_mu_;
  std::set<std::string> warned_;
};

}  // namespace

std::shared_ptr<MetricCollector> plugin_collector(const std::string& name, const Runtime& runtime) {
  auto [table, plugin] = runtime.collector(name);
  return std::make_shared<PluginCollector>(name, table, std::move(plugin));
}

std::shared_ptr<MetricCollector> plugin_collector(const std::string& name,
                                                  const std::string& options_json,
                                                  const Runtime& runtime) {
  std::string plugin;
  for (const PluginStatus& s : runtime.plugins()) {
    for (const std::string& p : s.provides) {
      if (p == "collector:" + name) plugin = s.name;
    }
  }
  if (plugin.empty()) {
    throw NotFoundError(fmt::format("no plugin provides the metric collector '{}'", name));
  }
  const TemporaryDirectory dir("kiln_collector_");
  const std::filesystem::path set = dir.path() / "plugins.yaml";
  // JSON is YAML: the options are written as one flow mapping.
  sdk::write_file_atomically(
      set, fmt::format("plugins:\n  - name: {}\n    options: {}\n", plugin, options_json));
  RuntimeOptions options;
  options.plugin_set = set;
  options.search_paths = runtime.search_paths();
  options.read_environment = false;
  options.search_install_prefix = false;
  const Runtime with_options(options);
  for (const PluginStatus& s : with_options.plugins()) {
    if (s.name == plugin && s.state != PluginStatus::State::kLoaded) {
      throw ValueError(fmt::format("collector '{}' with options {}: plugin '{}' {}: {}", name,
                                   options_json, plugin, to_string(s.state), s.reason));
    }
  }
  return plugin_collector(name, with_options);
}

}  // namespace kiln::profiling
