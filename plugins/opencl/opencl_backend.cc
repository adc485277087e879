// The members of PluginState that serve the device table's enumeration and timer slots
// directly; the table itself is built by kiln::sdk::make_device_backend
// (kiln/sdk/device_backend.hpp).
#include "kiln/sdk/device_backend.hpp"
#include "plugin_state.h"

namespace kiln::opencl {

int32_t PluginState::device_count(const char** why_none) {
  const Enumeration& e = enumeration();
  if (e.devices.empty() && why_none != nullptr) *why_none = e.why_none.c_str();
  return static_cast<int32_t>(e.devices.size());
}

void PluginState::device_attributes(int32_t id, const sdk::AttributeVisitor& visit) {
  visit.all(device(id).attributes);
}

void PluginState::timer_start(void* timer, void* stream) { timer_mark(timer, stream, true); }

void PluginState::timer_stop(void* timer, void* stream) { timer_mark(timer, stream, false); }

}  // namespace kiln::opencl
