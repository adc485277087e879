// Streams (command queues) and timers (marker events) of the opencl backend.
#include <memory>
#include <string>
#include <utility>

#include "cl_error.h"
#include "kiln/sdk/error.hpp"
#include "plugin_state.h"

namespace kiln::opencl {

// ---- streams ----

cl_command_queue PluginState::queue_for(int32_t id, void* stream) {
  DeviceRecord& d = device(id);
  if (stream == nullptr) return d.queue();
  auto q = static_cast<cl_command_queue>(stream);
  std::lock_guard<std::mutex> lock(objects_mu_);
  auto it = streams_.find(q);
  if (it == streams_.end()) {
    throw sdk::Error(KILN_ERROR_VALUE, "stream " + hex_pointer(stream) +
                                           " is not a live stream of the opencl backend");
  }
  if (it->second.device != id) {
    throw sdk::Error(KILN_ERROR_VALUE, "stream " + hex_pointer(stream) + " belongs to device " +
                                           std::to_string(it->second.device) + ", not device " +
                                           std::to_string(id));
  }
  return q;
}

void PluginState::synchronize(int32_t id, void* stream) {
  cl_command_queue q = queue_for(id, stream);
  const cl_int err = clFinish(q);
  if (err != CL_SUCCESS) {
    throw_cl("synchronize on " + device(id).label() + " (a kernel or copy enqueued earlier failed)",
             "clFinish", err);
  }
}

void* PluginState::stream_create(int32_t id) {
  DeviceRecord& d = device(id);
  cl_int err = CL_SUCCESS;
  QueueHandle queue(clCreateCommandQueue(d.context(), d.device, CL_QUEUE_PROFILING_ENABLE, &err));
  if (err != CL_SUCCESS || !queue) {
    throw_cl("stream_create on " + d.label(), "clCreateCommandQueue", err);
  }
  cl_command_queue q = queue.get();
  std::lock_guard<std::mutex> lock(objects_mu_);
  streams_.emplace(q, Stream{id, std::move(queue)});
  return q;
}

void PluginState::stream_destroy(int32_t id, void* stream) {
  device(id);
  if (stream == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "stream_destroy: the default stream (NULL) cannot be destroyed");
  }
  queue_for(id, stream);  // validates
  auto q = static_cast<cl_command_queue>(stream);
  QueueHandle queue;  // finished and released on return, outside the lock
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    auto it = streams_.find(q);
    if (it == streams_.end()) return;  // destroyed concurrently since queue_for checked it
    queue = std::move(it->second.queue);
    streams_.erase(it);
    handles_epoch_.fetch_add(1, std::memory_order_release);  // launches look streams up again
  }
}

// ---- timers ----

void* PluginState::timer_create(int32_t id) {
  device(id).queue();  // the context must exist before markers can be enqueued
  auto t = std::make_unique<Timer>();
  t->device = id;
  Timer* handle = t.get();
  std::lock_guard<std::mutex> lock(objects_mu_);
  timers_.emplace(handle, std::move(t));
  return handle;
}

Timer& PluginState::timer(void* handle, const char* slot) {
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    auto* t = static_cast<Timer*>(handle);
    if (handle != nullptr && timers_.count(t) != 0) return *t;
  }
  require_devices();  // without devices there are no timers: say why
  throw sdk::Error(KILN_ERROR_VALUE, std::string(slot) + ": " + hex_pointer(handle) +
                                         " is not a live timer of the opencl backend");
}

void PluginState::timer_mark(void* handle, void* stream, bool start) {
  const char* slot = start ? "timer_start" : "timer_stop";
  Timer& t = timer(handle, slot);
  cl_command_queue q = queue_for(t.device, stream);
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

int64_t PluginState::timer_elapsed_ns(void* handle) {
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

void PluginState::timer_destroy(void* handle) noexcept {
  std::unique_ptr<Timer> owned;  // freed on return, outside the lock
  std::lock_guard<std::mutex> lock(objects_mu_);
  auto it = timers_.find(static_cast<Timer*>(handle));
  if (handle == nullptr || it == timers_.end()) return;  // not ours: nothing to free
  owned = std::move(it->second);
  timers_.erase(it);
}

}  // namespace kiln::opencl
