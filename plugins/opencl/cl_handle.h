// SPDX-License-Identifier: Apache-2.0
// Owning handles for OpenCL objects: one reference, released in the destructor, so that no
// code path of the plugin releases by hand.
#ifndef KILN_PLUGINS_OPENCL_CL_HANDLE_H_
#define KILN_PLUGINS_OPENCL_CL_HANDLE_H_

#include <CL/cl.h>

#include <utility>

namespace kiln::opencl {

// Owns one reference to an OpenCL object of type `T` (cl_mem, cl_event...), dropped with
// `Release` when the handle is destroyed or reset. Movable, not copyable. A null handle owns
// nothing.
template <typename T, cl_int (*Release)(T)>
class ClHandle {
 public:
  ClHandle() = default;
  // Takes over the reference `handle` holds (may be NULL).
  explicit ClHandle(T handle) : handle_(handle) {}
  ClHandle(ClHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  ClHandle& operator=(ClHandle&& other) noexcept {
    if (this != &other) reset(std::exchange(other.handle_, nullptr));
    return *this;
  }
  ClHandle(const ClHandle&) = delete;
  ClHandle& operator=(const ClHandle&) = delete;
  ~ClHandle() { reset(); }

  // The object, still owned by this handle; NULL when empty.
  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  // Gives up ownership: returns the object (the caller's reference now) and leaves this empty.
  T release() noexcept { return std::exchange(handle_, nullptr); }
  // Releases the object held (if any) and takes over `handle`. Returns the status of the
  // release (CL_SUCCESS when nothing was held), for callers that report it.
  cl_int reset(T handle = nullptr) noexcept {
    const T old = std::exchange(handle_, handle);
    return old != nullptr ? Release(old) : CL_SUCCESS;
  }

 private:
  T handle_ = nullptr;
};

// Waits for the queue's commands, then releases it: a stream's work finishes before it goes.
inline cl_int finish_and_release_queue(cl_command_queue queue) {
  clFinish(queue);
  return clReleaseCommandQueue(queue);
}

using MemHandle = ClHandle<cl_mem, &clReleaseMemObject>;
using EventHandle = ClHandle<cl_event, &clReleaseEvent>;
using KernelHandle = ClHandle<cl_kernel, &clReleaseKernel>;
using QueueHandle = ClHandle<cl_command_queue, &finish_and_release_queue>;

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_CL_HANDLE_H_
