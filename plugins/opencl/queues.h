// SPDX-License-Identifier: Apache-2.0
// The command queues of the opencl backend: each device's default queue and the streams handed
// to the host, all in-order queues with profiling (the timers' markers need it).
#ifndef KILN_PLUGINS_OPENCL_QUEUES_H_
#define KILN_PLUGINS_OPENCL_QUEUES_H_

#include <CL/cl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cl_handle.h"
#include "device_registry.h"

namespace kiln::opencl {

// A stream created for the host: its device and the queue, finished and released with it.
struct Stream {
  int32_t device = 0;
  QueueHandle queue;
};

// Owns every queue of the plugin instance. The void* stream of the ABI is the
// cl_command_queue itself; NULL stands for the device's default queue. Thread-safe: the
// default queues are created once each, and streams_mu_ guards the stream registry.
class Queues {
 public:
  // `devices` (borrowed) must outlive this object. Creates no queue until one is asked for.
  explicit Queues(DeviceRegistry& devices);
  Queues(const Queues&) = delete;
  Queues& operator=(const Queues&) = delete;
  // Finishes and releases the streams the host left, then the default queues.
  ~Queues();

  // The default queue of `device` (owned by this object), created on first call with the
  // device's context. Throws kiln::sdk::Error: the context's failure (DeviceRecord::context),
  // or "cannot create the command queue of <device>: clCreateCommandQueue returned ...", which
  // is remembered and thrown again.
  cl_command_queue default_queue(DeviceRecord& device);
  // The queue `stream` stands for on device `id` (NULL: the default queue); owned by this
  // object. Throws as DeviceRegistry::device and default_queue, and KILN_ERROR_VALUE for a
  // stream that is not live or belongs to another device.
  cl_command_queue queue_for(int32_t id, void* stream);
  // Whether `stream` (not NULL) is a live stream; if so its device goes to `*device`. Takes
  // streams_mu_; never throws. For the launch path, which words its own errors.
  bool find_stream(void* stream, int32_t* device);

  // Waits for the work of `stream` on device `id` (clFinish). Throws as queue_for, and
  // KILN_ERROR_RUNTIME (or the OpenCL code's) when earlier work failed.
  void synchronize(int32_t id, void* stream);
  // Creates a stream on device `id`: a new in-order queue with profiling, owned by this object
  // until stream_destroy. Throws as DeviceRegistry::device and DeviceRecord::context, and for a
  // failed clCreateCommandQueue.
  void* stream_create(int32_t id);
  // Finishes and releases `stream` of device `id`. Throws KILN_ERROR_VALUE for NULL (the
  // default queue), a stream that is not live or one of another device.
  void stream_destroy(int32_t id, void* stream);

 private:
  // A device's default queue, created once; the failure is kept when creation failed.
  struct DefaultQueue {
    std::once_flag once;  // guards the fields below
    QueueHandle queue;
    int32_t error_code = 0;
    std::string error;
  };

  DeviceRegistry& devices_;
  std::once_flag defaults_once_;              // guards the allocation of defaults_
  std::unique_ptr<DefaultQueue[]> defaults_;  // one per device, indexed by device id
  std::mutex streams_mu_;                     // guards streams_
  std::unordered_map<cl_command_queue, Stream> streams_;
};

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_QUEUES_H_
