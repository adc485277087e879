// SPDX-License-Identifier: Apache-2.0
// The timers of the opencl backend: two marker events with profiling, enqueued on the streams
// a timer is started and stopped on; their difference is the device time in between.
#ifndef KILN_PLUGINS_OPENCL_TIMERS_H_
#define KILN_PLUGINS_OPENCL_TIMERS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cl_handle.h"
#include "device_registry.h"
#include "queues.h"

namespace kiln::opencl {

// A timer: two markers with profiling events on the queues it was started and stopped on.
// `start` and `stop` are guarded by `mu`.
struct Timer {
  int32_t device = 0;
  EventHandle start;
  EventHandle stop;
  std::mutex mu;
};

// Owns the timers handed to the host; the void* timer of the ABI is the Timer*. Thread-safe:
// mu_ guards the registry, each Timer's own mutex its markers.
class Timers {
 public:
  // `devices` and `queues` (borrowed) must outlive this object.
  Timers(DeviceRegistry& devices, Queues& queues);
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;
  // Releases the timers (and their events) the host left.
  ~Timers();

  // A new timer on device `id`, owned by this object until destroy(). Creates the device's
  // default queue first (markers need its context). Throws as DeviceRegistry::device and
  // Queues::default_queue.
  void* create(int32_t id);
  // Enqueues the start marker on `stream` (NULL: the default queue) of the timer's device and
  // forgets a previous stop. Never blocks. Throws KILN_ERROR_VALUE for a timer or stream that
  // is not live (KILN_ERROR_UNAVAILABLE with the reason when there is no device), and for a
  // failed clEnqueueMarkerWithWaitList.
  void start(void* timer, void* stream);
  // Enqueues the stop marker and flushes the queue; never blocks. Errors as start(), and
  // KILN_ERROR_VALUE before a start.
  void stop(void* timer, void* stream);
  // Waits for the stop marker and returns the nanoseconds between the two markers' completion
  // (0 when the stop completed first). Throws KILN_ERROR_VALUE for a timer that is not live or
  // not started and stopped, and for failed OpenCL calls (work before the marker failed).
  int64_t elapsed_ns(void* timer);
  // Releases `timer`; NULL or a handle that is not live is ignored. Never throws.
  void destroy(void* timer) noexcept;

 private:
  // The live timer `handle`; throws KILN_ERROR_VALUE naming `slot` otherwise.
  Timer& timer(void* handle, const char* slot);
  // Records a profiling marker for the start (`start`) or stop of `timer` on `stream`.
  void mark(void* timer, void* stream, bool start);

  DeviceRegistry& devices_;
  Queues& queues_;
  std::mutex mu_;  // guards timers_
  std::unordered_map<Timer*, std::unique_ptr<Timer>> timers_;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_TIMERS_H_
