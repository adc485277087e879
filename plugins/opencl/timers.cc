// SPDX-License-Identifier: Apache-2.0
// The timers (marker events) of the opencl backend.
#include "timers.h"

#include <memory>
#include <string>
#include <utility>

#include "cl_error.h"
#include "kiln/sdk/error.hpp"

namespace kiln::opencl {

Timers::Timers(DeviceRegistry& devices, Queues& queues) : devices_(devices), queues_(queues) {}

Timers::~Timers() = default;  // the registry owns the timers left

void* Timers::create(int32_t id) {
  // The context and default queue must exist before markers can be enqueued.
  queues_.default_queue(devices_.device(id));
  auto t = std::make_unique<Timer>();
  t->device = id;
  Timer* handle = t.get();
  std::lock_guard<std::mutex> lock(mu_);
  timers_.emplace(handle, std::move(t));
  return handle;
}

Timer& Timers::timer(void* handle, const char* slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto* t = static_cast<Timer*>(handle);
    if (handle != nullptr && timers_.count(t) != 0) return *t;
  }
  devices_.require_devices();  // without devices there are no timers: say why
  throw sdk::Error(KILN_ERROR_VALUE, std::string(slot) + ": " + hex_pointer(handle) +
                                         " is not a live timer of the opencl backend");
}

void Timers::start(void* timer, void* stream) { mark(timer, stream, true); }

void Timers::stop(void* timer, void* stream) { mark(timer, stream, false); }

void Timers::mark(void* handle, void* stream, bool start) {
  const char* slot = start ? "timer_start" : "timer_stop";
  Timer& t = timer(handle, slot);
  cl_command_queue q = queues_.queue_for(t.device, stream);
  std::lock_guard<std::mutex> lock(t.mu);
  if (!start && !t.start) {
    throw sdk::Error(KILN_ERROR_VALUE, "timer_stop before timer_start");
  }
  cl_event marker = nullptr;
  // A marker completes when every command enqueued before it on the in-order queue has; its
  // profiling counters give that point on the device's clock. Never blocks.
  const cl_int err = clEnqueueMarkerWithWaitList(q, 0, nullptr, &marker);
  EventHandle event(marker);
  if (err != CL_SUCCESS) {
    throw_cl(std::string(slot) + " on device " + std::to_string(t.device),
             "clEnqueueMarkerWithWaitList", err);
  }
  if (start) {
    t.start = std::move(event);
    t.stop.reset();
  } else {
    t.stop = std::move(event);
    clFlush(q);  // submits the batch without waiting for it
  }
}

int64_t Timers::elapsed_ns(void* handle) {
  Timer& t = timer(handle, "timer_elapsed_ns");
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.start || !t.stop) {
    throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: the timer was not started and stopped");
  }
  const cl_event stop = t.stop.get();
  cl_int err = clWaitForEvents(1, &stop);
  if (err != CL_SUCCESS) {
    throw_cl("timer_elapsed_ns: waiting for the stop marker (work enqueued before it failed)",
             "clWaitForEvents", err);
  }
  cl_ulong begin = 0;
  cl_ulong end = 0;
  err = clGetEventProfilingInfo(t.start.get(), CL_PROFILING_COMMAND_END, sizeof(begin), &begin,
                                nullptr);
  if (err == CL_SUCCESS) {
    err = clGetEventProfilingInfo(stop, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
  }
  if (err != CL_SUCCESS) {
    throw_cl("timer_elapsed_ns: reading the markers' profiling counters", "clGetEventProfilingInfo",
             err);
  }
  // Markers on two different queues may complete in either order; that is no time at all.
  return end > begin ? static_cast<int64_t>(end - begin) : 0;
}

void Timers::destroy(void* handle) noexcept {
  std::unique_ptr<Timer> owned;  // freed on return, outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = timers_.find(static_cast<Timer*>(handle));
  if (handle == nullptr || it == timers_.end()) return;  // not ours: nothing to free
  owned = std::move(it->second);
  timers_.erase(it);
}

}  // namespace kiln::opencl
