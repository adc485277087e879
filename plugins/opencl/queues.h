// Queues and timers of the opencl backend: the streams handed to the host (in-order command
// queues with profiling) and the timers made of two marker events.
#ifndef KILN_PLUGINS_OPENCL_QUEUES_H_
#define KILN_PLUGINS_OPENCL_QUEUES_H_

#include <cstdint>
#include <mutex>

#include "cl_handle.h"

namespace kiln::opencl {

// A stream created for the host: its device and the queue, finished and released with it.
struct Stream {
  int32_t device = 0;
  QueueHandle queue;
};

// A timer: two markers with profiling events on the queues it was started and stopped on.
// `start` and `stop` are guarded by `mu`.
struct Timer {
  int32_t device = 0;
  EventHandle start;
  EventHandle stop;
  std::mutex mu;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_QUEUES_H_
