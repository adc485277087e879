// SPDX-License-Identifier: Apache-2.0
// The `papi` collector: counts PAPI events for calls on the CPU. Event names (from the plugin
// options, {"events": [...]}) are used verbatim as metric names, as in the reference
// (SPEC.md §3.7). Counters start at init and run continuously; start/stop only read them, so
// nested calls work. An event PAPI cannot count is reported once, with PAPI's reason, and left
// out of the metrics rather than reported as zero.
#include <papi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kiln/sdk/plugin.hpp"

namespace {

// The reference's defaults for CPUs.
const std::vector<std::string> kDefaultEvents = {"perf::CYCLES", "perf::STALLED-CYCLES-FRONTEND",
                                                 "perf::STALLED-CYCLES-BACKEND",
                                                 "perf::INSTRUCTIONS", "perf::CACHE-MISSES"};

// Negotiations alive in this process; PAPI is shut down with the last one so that libpapi's
// own allocations are returned before the plugin (and libpapi) is unloaded.
std::atomic<int> g_live_states{0};

KilnError* init(void* self, const DLDevice* devices, int32_t num_devices, void** state);
KilnError* start(void* self, void* state, DLDevice device, void** reading);
KilnError* stop(void* self, void* state, void* reading, KilnMetricSink sink, void* sink_ctx);
void teardown(void* self, void* state);

// One negotiation's state: its options and its own component table, whose `self` is this
// state, so that several runtimes can load the plugin with different options.
struct PluginState {
  PluginState() : requested(kDefaultEvents) {
    collector = kiln::sdk::make_table<KilnMetricCollector>();
    collector.self = this;
    collector.init = init;
    collector.start = start;
    collector.stop = stop;
    collector.teardown = teardown;
    component = kiln::sdk::component(KILN_COMPONENT_COLLECTOR, "papi", &collector);
    g_live_states.fetch_add(1);
  }
  ~PluginState() {
    if (g_live_states.fetch_sub(1) == 1 && PAPI_is_initialized()) PAPI_shutdown();
  }
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;

  std::span<const KilnComponent> components() const { return {&component, 1}; }
  // Reads {"events": [...]} from `options_json` (borrowed JSON text, may be NULL). Throws
  // kiln::sdk::Error (KILN_ERROR_VALUE) for a list that is empty or holds a non-string.
  void configure(const char* options_json);

  std::vector<std::string> requested;
  KilnMetricCollector collector{};
  KilnComponent component{};
};

// One profiler's counters: an event set over the events PAPI accepted.
struct Collection {
  int event_set = PAPI_NULL;
  bool running = false;
  std::vector<std::string> events;  // the accepted ones, in event-set order
};

struct Reading {
  std::vector<long long> values;
};

std::string papi_error(int code) { return PAPI_strerror(code); }

void warn_once(const std::string& message) {
  static std::mutex mu;
  static std::vector<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& s : seen) {
    if (s == message) return;
  }
  seen.push_back(message);
  kiln::sdk::log(KILN_LOG_WARN, "%s", message.c_str());
}

KilnError* init(void* self, const DLDevice* devices, int32_t num_devices, void** state) {
  *state = nullptr;
  return kiln::sdk::guard("papi init", [&] {
    bool has_cpu = false;
    for (int32_t i = 0; i < num_devices; ++i) {
      has_cpu |= kiln::sdk::device_type_code(devices[i]) == kDLCPU;
    }
    auto c = std::make_unique<Collection>();
    if (!has_cpu) {
      *state = c.release();  // PAPI's CPU component only: nothing to count
      return;
    }
    if (!PAPI_is_initialized()) {
      const int version = PAPI_library_init(PAPI_VER_CURRENT);
      if (version != PAPI_VER_CURRENT) {
        throw kiln::sdk::Error(KILN_ERROR_UNAVAILABLE,
                               "PAPI_library_init failed: " + papi_error(version));
      }
    }
    if (int rc = PAPI_create_eventset(&c->event_set); rc != PAPI_OK) {
      throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "PAPI_create_eventset: " + papi_error(rc));
    }
    for (const std::string& event : static_cast<PluginState*>(self)->requested) {
      const int rc = PAPI_add_named_event(c->event_set, event.c_str());
      if (rc != PAPI_OK) {
        warn_once("papi: event '" + event + "' unavailable: " + papi_error(rc) +
                  " (on a VM without a PMU no hardware event can be counted)");
        continue;
      }
      c->events.push_back(event);
    }
    if (!c->events.empty()) {
      if (int rc = PAPI_start(c->event_set); rc != PAPI_OK) {
        warn_once("papi: cannot start counting: " + papi_error(rc));
        c->events.clear();
      } else {
        c->running = true;
      }
    } else {
      warn_once("papi: none of the requested events can be counted here");
    }
    *state = c.release();
  });
}

KilnError* start(void*, void* state, DLDevice device, void** handle) {
  *handle = nullptr;
  auto* c = static_cast<Collection*>(state);
  if (c == nullptr || !c->running || kiln::sdk::device_type_code(device) != kDLCPU) {
    return nullptr;
  }
  return kiln::sdk::guard("papi start", [&] {
    auto r = std::make_unique<Reading>();
    r->values.resize(c->events.size());
    if (int rc = PAPI_read(c->event_set, r->values.data()); rc != PAPI_OK) {
      throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "PAPI_read: " + papi_error(rc));
    }
    *handle = r.release();
  });
}

KilnError* stop(void*, void* state, void* handle, KilnMetricSink sink, void* sink_ctx) {
  std::unique_ptr<Reading> begin(static_cast<Reading*>(handle));
  auto* c = static_cast<Collection*>(state);
  return kiln::sdk::guard("papi stop", [&] {
    std::vector<long long> end(c->events.size());
    if (int rc = PAPI_read(c->event_set, end.data()); rc != PAPI_OK) {
      throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "PAPI_read: " + papi_error(rc));
    }
    for (size_t i = 0; i < c->events.size(); ++i) {
      long long delta = end[i] - begin->values[i];
      if (delta < 0) {
        warn_once("Detected overflow when reading performance counter, setting value to -1.");
        delta = -1;
      }
      KilnMetric m{};
      m.struct_size = sizeof(m);
      m.name = c->events[i].c_str();
      m.kind = KILN_METRIC_COUNT;
      m.count = delta;
      sink(sink_ctx, &m);
    }
  });
}

void teardown(void*, void* state) {
  std::unique_ptr<Collection> c(static_cast<Collection*>(state));
  if (c == nullptr || c->event_set == PAPI_NULL) return;
  long long ignored[64];
  if (c->running) PAPI_stop(c->event_set, c->events.size() <= 64 ? ignored : nullptr);
  PAPI_cleanup_eventset(c->event_set);
  PAPI_destroy_eventset(&c->event_set);
}

void PluginState::configure(const char* options_json) {
  const auto options = nlohmann::json::parse(options_json != nullptr ? options_json : "{}");
  if (!options.contains("events")) return;
  if (!options["events"].is_array() || options["events"].empty()) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE,
                           "option 'events' must be a non-empty list of PAPI event names");
  }
  requested.clear();
  for (const auto& e : options["events"]) {
    if (!e.is_string())
      throw kiln::sdk::Error(KILN_ERROR_VALUE, "option 'events' holds a non-string");
    requested.push_back(e.get<std::string>());
  }
}

}  // namespace

// Negotiates the ABI and reads the options ({"events": [...]}; default: the reference's CPU
// events). Errors: KILN_ERROR_ABI for an incompatible host, KILN_ERROR_VALUE for bad options;
// nothing is left to release then. The host frees the state through the shutdown slot.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "papi", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.options_json);
      });
}
