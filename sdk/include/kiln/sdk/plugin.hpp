// SPDX-License-Identifier: Apache-2.0
// Header-only C++ helpers for plugin authors: negotiation, host services, logging.
//
//   static KilnDeviceBackend backend = make_table<KilnDeviceBackend>();  // struct_size set
//   backend.device_count = ...;
//   static const KilnComponent components[] = {component(KILN_COMPONENT_DEVICE, "cpu", &backend)};
//   extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
//                                                           KilnPluginInfo* out) {
//     return kiln::sdk::negotiate(in, out, {"cpu", "1.0.0", components});
//   }
//
// A plugin whose components live in a per-negotiation state object uses negotiate_with_state:
//
//   return kiln::sdk::negotiate_with_state<MyState>(in, out, "cpu", "1.0.0",
//       [](MyState& state, const KilnNegotiateIn& offer) { state.configure(offer.options_json); });
#ifndef KILN_SDK_PLUGIN_HPP_
#define KILN_SDK_PLUGIN_HPP_

#include <algorithm>
#include <concepts>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "kiln/c/kiln.h"
#include "kiln/sdk/abi.hpp"
#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {

// The host's services, kept by negotiate(). NULL before negotiation.
inline const KilnHostServices*& host_services() {
  static const KilnHostServices* services = nullptr;
  return services;
}

// This plugin's name as negotiated, for log lines.
inline std::string& plugin_name() {
  static std::string name;
  return name;
}

// Logs one line through the host at `level` (a KilnLogLevel), printf-style.
[[gnu::format(printf, 2, 3)]] inline void log(int32_t level, const char* format, ...) {
  const KilnHostServices* host = host_services();
  if (host == nullptr || host->log == nullptr) return;
  if (host->log_enabled != nullptr && !host->log_enabled(host->host_ctx, level)) return;
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  host->log(host->host_ctx, level, plugin_name().c_str(), buffer);
}

// A zeroed table or struct with struct_size set.
template <typename Table>
Table make_table() {
  Table table{};
  table.struct_size = sizeof(Table);
  return table;
}

// One component entry.
inline KilnComponent component(KilnComponentKind kind, const char* name, const void* table) {
  KilnComponent c{};
  c.struct_size = sizeof(KilnComponent);
  c.kind = kind;
  c.name = name;
  c.table = table;
  return c;
}

// The oldest ABI minor this plugin serves. kiln_add_plugin() defines it from its MIN_ABI
// argument (default: the SDK's own minor) and writes the same version into the manifest's
// `abi`, so the manifest and the binary cannot disagree.
#ifndef KILN_PLUGIN_MIN_ABI_MINOR
#define KILN_PLUGIN_MIN_ABI_MINOR KILN_ABI_VERSION_MINOR
#endif

// What negotiate() reports to the host.
struct PluginDescription {
  const char* name;
  // The plugin's semver. kiln_add_plugin() defines KILN_PLUGIN_VERSION from the same VERSION
  // it writes into the manifest; pass that.
  const char* version;
  std::span<const KilnComponent> components;
  void* state = nullptr;
  void (*shutdown)(void* state) = nullptr;
  // Called after the version checks, with the host's offer, before `out` is filled: reads
  // the options and sets the plugin up. An exception it throws becomes the returned error and
  // leaves `out` untouched, so the host has nothing to call or free.
  std::function<void(const KilnNegotiateIn& in)> configure = nullptr;
  // The oldest host minor this plugin serves. A plugin that sets it below the SDK's minor
  // must check negotiated_abi_minor() before it uses anything a later minor added.
  int min_abi_minor = KILN_PLUGIN_MIN_ABI_MINOR;
};

// The minor version negotiate() answered: min(the SDK's minor, the host's minor). 0 before
// negotiation.
inline int& negotiated_abi_minor() {
  static int minor = 0;
  return minor;
}

// Checks the host's offer and fills `out`. In this order, so that a too-new or too-old party
// always gets an error that names both versions: (1) the offer and its host services must be
// at least their 1.0 layouts, the least needed to create an error at all; (2) the major
// versions must match and the host's newest minor must be at least `min_abi_minor`
// (KILN_ERROR_ABI, "... upgrade Kiln"); (3) `out` must be at least its 1.0 layout. Answers
// min(the SDK's minor, the host's minor). Keeps the host services for log() and errors.
// Returns NULL without filling `out` only when (1) fails: no error can be created then, and
// the host treats the unfilled `out` as a failure.
inline KilnError* negotiate(const KilnNegotiateIn* in, KilnPluginInfo* out,
                            const PluginDescription& description) {
  if (in == nullptr || in->struct_size < KILN_NEGOTIATE_IN_SIZE_1_0 || in->host == nullptr ||
      in->host->struct_size < KILN_HOST_SERVICES_SIZE_1_0 || in->host->error_new == nullptr) {
    return nullptr;
  }
  host_services() = in->host;
  error_factory() = {in->host->host_ctx, in->host->error_new, in->host->error_free};
  plugin_name() = description.name;
  char message[320];
  if (in->abi_major != KILN_ABI_VERSION_MAJOR) {
    std::snprintf(message, sizeof(message),
                  "plugin '%s' implements Kiln ABI %d.%d but the host offers %u.%u (major "
                  "versions differ: rebuild the plugin against the host's SDK)",
                  description.name, KILN_ABI_VERSION_MAJOR, KILN_ABI_VERSION_MINOR, in->abi_major,
                  in->abi_minor);
    return make_error(KILN_ERROR_ABI, message);
  }
  if (static_cast<int>(in->abi_minor) < description.min_abi_minor) {
    std::snprintf(message, sizeof(message),
                  "plugin '%s' needs Kiln ABI %d.%d but the host offers only %u.%u: upgrade Kiln",
                  description.name, KILN_ABI_VERSION_MAJOR, description.min_abi_minor,
                  in->abi_major, in->abi_minor);
    return make_error(KILN_ERROR_ABI, message);
  }
  if (out == nullptr || out->struct_size < KILN_PLUGIN_INFO_SIZE_1_0) {
    return make_error(KILN_ERROR_ABI,
                      "KilnPluginInfo from the host is smaller than its 1.0 layout");
  }
  if (description.configure) {
    if (KilnError* err = guard(description.name, [&] { description.configure(*in); })) {
      return err;
    }
  }
  const int answered = std::min<int>(KILN_ABI_VERSION_MINOR, in->abi_minor);
  negotiated_abi_minor() = answered;
  out->abi_major = KILN_ABI_VERSION_MAJOR;
  out->abi_minor = static_cast<uint16_t>(answered);
  out->name = description.name;
  out->version = description.version;
  out->num_components = static_cast<int32_t>(description.components.size());
  out->components = description.components.data();
  out->plugin_state = description.state;
  out->shutdown = description.shutdown;
  return nullptr;
}

// A per-negotiation plugin state: default-constructible, and lists the components whose tables
// it owns (their `self` usually points back at it).
template <typename State>
concept NegotiatedState = std::default_initializable<State> && requires(const State& state) {
  { state.components() } -> std::convertible_to<std::span<const KilnComponent>>;
};

// The body of kiln_plugin_negotiate for a plugin with state: creates a `State`, runs
// negotiate() with `configure(state, offer)` as its configure step, and on success hands the
// state to the host, which frees it through the shutdown slot (`delete`) once every object
// made through the plugin is gone. `in` is borrowed for the call; `out` (host-allocated)
// receives pointers owned by the state. Errors: those of negotiate() (KILN_ERROR_ABI, whatever
// `configure` throws); on error the state is freed and nothing is left for the host to
// release. Returns NULL without filling `out` when the state cannot be created or the host
// offers no usable services (no error object can be made then; the host treats the unfilled
// `out` as a failure).
template <NegotiatedState State, typename Configure>
KilnError* negotiate_with_state(const KilnNegotiateIn* in, KilnPluginInfo* out, const char* name,
                                const char* version, Configure&& configure) {
  std::unique_ptr<State> state;
  try {
    state = std::make_unique<State>();
  } catch (...) {
    return nullptr;  // before negotiate() there is no error factory
  }
  PluginDescription description{name, version, state->components(), state.get(),
                                [](void* s) { delete static_cast<State*>(s); }};
  description.configure = [&](const KilnNegotiateIn& offer) { configure(*state, offer); };
  if (KilnError* error = negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;  // no host services
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}

}  // namespace kiln::sdk

#endif  // KILN_SDK_PLUGIN_HPP_
