// SPDX-License-Identifier: Apache-2.0
// The command queues of the opencl backend: default queues and streams.
#include "queues.h"

#include <string>
#include <utility>

#include "cl_error.h"
#include "handle_epoch.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"

namespace kiln::opencl {

Queues::Queues(DeviceRegistry& devices) : devices_(devices) {}

Queues::~Queues() {
  streams_.clear();        // finished and released
  HandleEpoch::advance();  // no launch may skip looking a stream up now
  defaults_.reset();       // finished and released, before the registry drops the contexts
}

cl_command_queue Queues::default_queue(DeviceRecord& device) {
  cl_context context = device.context();  // throws the context's failure
  std::call_once(defaults_once_, [this] {
    defaults_ = std::make_unique<DefaultQueue[]>(static_cast<size_t>(devices_.count(nullptr)));
  });
  DefaultQueue& slot = defaults_[static_cast<size_t>(device.id)];
  std::call_once(slot.once, [&] {
    // In order, with profiling for the timers. clCreateCommandQueue is the 1.2 entry point,
    // present (deprecated) in every later version.
    cl_int err = CL_SUCCESS;
    cl_command_queue queue =
        clCreateCommandQueue(context, device.device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS || queue == nullptr) {
      slot.error_code = kiln_code_for(err);
      slot.error = "cannot create the command queue of " + device.label() + ": " +
                   cl_failure("clCreateCommandQueue", err);
      return;
    }
    slot.queue.reset(queue);
    sdk::log(KILN_LOG_DEBUG, "%s: default in-order queue created", device.label().c_str());
  });
  if (!slot.queue) throw sdk::Error(slot.error_code, slot.error);
  return slot.queue.get();
}

cl_command_queue Queues::queue_for(int32_t id, void* stream) {
  DeviceRecord& d = devices_.device(id);
  if (stream == nullptr) return default_queue(d);
  auto q = static_cast<cl_command_queue>(stream);
  std::lock_guard<std::mutex> lock(streams_mu_);
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

bool Queues::find_stream(void* stream, int32_t* device) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  auto it = streams_.find(static_cast<cl_command_queue>(stream));
  if (it == streams_.end()) return false;
  *device = it->second.device;
  return true;
}

void Queues::synchronize(int32_t id, void* stream) {
  cl_command_queue q = queue_for(id, stream);
  const cl_int err = clFinish(q);
  if (err != CL_SUCCESS) {
    throw_cl("synchronize on " + devices_.device(id).label() +
                 " (a kernel or copy enqueued earlier failed)",
             "clFinish", err);
  }
}

void* Queues::stream_create(int32_t id) {
  DeviceRecord& d = devices_.device(id);
  cl_int err = CL_SUCCESS;
  QueueHandle queue(clCreateCommandQueue(d.context(), d.device, CL_QUEUE_PROFILING_ENABLE, &err));
  if (err != CL_SUCCESS || !queue) {
    throw_cl("stream_create on " + d.label(), "clCreateCommandQueue", err);
  }
  cl_command_queue q = queue.get();
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.emplace(q, Stream{id, std::move(queue)});
  return q;
}

void Queues::stream_destroy(int32_t id, void* stream) {
  devices_.device(id);
  if (stream == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "stream_destroy: the default stream (NULL) cannot be destroyed");
  }
  queue_for(id, stream);  // validates
  auto q = static_cast<cl_command_queue>(stream);
  QueueHandle queue;  // finished and released on return, outside the lock
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    auto it = streams_.find(q);
    if (it == streams_.end()) return;  // destroyed concurrently since queue_for checked it
    queue = std::move(it->second.queue);
    streams_.erase(it);
    HandleEpoch::advance();  // launches look streams up again
  }
}

}  // namespace kiln::opencl
