#include "plugin_state.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "cl_error.h"
#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/kernel_args.hpp"

namespace kiln::opencl {
namespace {

std::string hex_pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// Keeps the ICD loader (and with it the drivers it opened, whose threads may outlive this
// plugin's objects) loaded for the rest of the process, even after this plugin is unloaded.
void pin_icd_loader() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&clGetPlatformIDs), &info) != 0 && info.dli_fname != nullptr) {
    if (void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) {
      dlclose(handle);  // RTLD_NODELETE stays in force
    }
  }
}

// Bytes from the first to one past the last element of `t` (0 for an empty tensor), or
// nullopt when strides are negative or the size overflows.
std::optional<uint64_t> tensor_extent_bytes(const DLTensor& t) {
  const uint64_t elem_bits = uint64_t{t.dtype.bits} * std::max<uint16_t>(t.dtype.lanes, 1);
  const uint64_t elem_bytes = (elem_bits + 7) / 8;
  uint64_t last = 0;  // index of the last element, in elements
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return std::nullopt;
    if (t.shape[i] == 0) return 0;
    const int64_t stride = t.strides != nullptr ? t.strides[i] : 1;
    if (stride < 0) return std::nullopt;
    uint64_t step = 0;
    if (t.strides != nullptr) {
      step = static_cast<uint64_t>(stride);
    } else {
      step = 1;
      for (int j = i + 1; j < t.ndim; ++j) {
        if (__builtin_mul_overflow(step, static_cast<uint64_t>(t.shape[j]), &step)) {
          return std::nullopt;
        }
      }
    }
    uint64_t add = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1), step, &add) ||
        __builtin_add_overflow(last, add, &last)) {
      return std::nullopt;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_add_overflow(last, uint64_t{1}, &bytes) ||
      __builtin_mul_overflow(bytes, elem_bytes, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// Names from CL_PROGRAM_KERNEL_NAMES ("a;b"), as "a, b"; empty when unavailable.
std::string program_kernel_names(cl_program program) {
  size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &size) != CL_SUCCESS ||
      size <= 1) {
    return "";
  }
  std::string names(size, '\0');
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, size, names.data(), nullptr) !=
      CL_SUCCESS) {
    return "";
  }
  names.resize(std::strlen(names.c_str()));
  std::string out;
  for (char c : names) out += c == ';' ? std::string(", ") : std::string(1, c);
  return out;
}

std::string extents_text(const uint32_t v[3]) {
  return std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]);
}

// Releases the sub-buffers of one launch when it goes out of scope. OpenCL keeps a released
// memory object alive until the commands that use it have finished.
struct SubBuffers {
  std::vector<cl_mem> list;
  ~SubBuffers() {
    for (cl_mem m : list) clReleaseMemObject(m);
  }
};

}  // namespace

Kernel::~Kernel() {
  if (kernel != nullptr) clReleaseKernel(kernel);
}

Timer::~Timer() {
  if (start != nullptr) clReleaseEvent(start);
  if (stop != nullptr) clReleaseEvent(stop);
}

PluginState::PluginState()
    : device_table_(sdk::make_device_backend(this, kDLOpenCL)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "opencl", &device_table_)} {}

PluginState::~PluginState() {
  // The host releases every object before shutdown; what is left was leaked by a caller.
  for (Kernel* k : kernels_) k->module = nullptr;
  for (Module* m : modules_) delete m;  // owns its kernels
  modules_.clear();
  kernels_.clear();
  for (Timer* t : timers_) delete t;
  timers_.clear();
  if (cache_) cache_->clear();
  for (auto& [queue, device] : streams_) {
    clFinish(queue);
    clReleaseCommandQueue(queue);
  }
  streams_.clear();
  for (auto& [mem, buffer] : buffers_) clReleaseMemObject(mem);
  buffers_.clear();
  cache_.reset();
  enumeration_.devices.clear();  // finishes the default queues, releases the contexts
}

void PluginState::configure(const char* options_json) {
  options_ = resolve_options(options_json, std::getenv("KILN_OPENCL_CACHE_DIR"));
  for (const std::string& key : options_.unknown) {
    sdk::log(KILN_LOG_WARN,
             "ignoring unknown option '%s' (known: platform, device, device_type, "
             "cache_dir, build_options, memory_cache_entries)",
             key.c_str());
  }
  cache_ = std::make_unique<ProgramCache>(options_.cache_dir, options_.memory_cache_entries);
  if (!options_.cache_dir.empty()) {
    sdk::log(KILN_LOG_DEBUG, "program cache folder %s (from %s)", options_.cache_dir.c_str(),
             options_.cache_dir_source.c_str());
  }
}

// ---- devices ----

const Enumeration& PluginState::enumeration() {
  std::call_once(enumerate_once_, [this] {
    pin_icd_loader();
    enumeration_ = enumerate_devices(options_);
    if (enumeration_.devices.empty()) {
      sdk::log(KILN_LOG_DEBUG, "no devices: %s", enumeration_.why_none.c_str());
    }
    for (const auto& d : enumeration_.devices) {
      sdk::log(KILN_LOG_DEBUG, "%s: %s", d->label().c_str(), d->version.c_str());
    }
  });
  return enumeration_;
}

void PluginState::require_devices() {
  const Enumeration& e = enumeration();
  if (e.devices.empty()) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE, "no OpenCL devices: " + e.why_none);
  }
}

DeviceRecord& PluginState::device(int32_t id) {
  require_devices();
  const auto& devices = enumeration_.devices;
  if (id < 0 || static_cast<size_t>(id) >= devices.size()) {
    const size_t n = devices.size();
    throw sdk::Error(
        KILN_ERROR_INDEX,
        "device id " + std::to_string(id) + " is out of range: the opencl backend has " +
            std::to_string(n) +
            (n == 1 ? " device (id 0)" : " devices (ids 0.." + std::to_string(n - 1) + ")"));
  }
  return *devices[static_cast<size_t>(id)];
}

// ---- memory and copies ----

void* PluginState::alloc(int32_t id, size_t nbytes, size_t alignment) {
  DeviceRecord& d = device(id);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "alloc: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  // A cl_mem has no host-visible address: its start is aligned to the device's
  // CL_DEVICE_MEM_BASE_ADDR_ALIGN whatever is asked, which is what kernels see.
  const size_t size = nbytes == 0 ? 1 : nbytes;
  if (d.max_alloc_bytes > 0 && size > d.max_alloc_bytes) {
    throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(nbytes) + " bytes on " + d.label() +
                         ": the device allows at most " + std::to_string(d.max_alloc_bytes) +
                         " bytes per buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
  }
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(d.context(), CL_MEM_READ_WRITE, size, nullptr, &err);
  if (err != CL_SUCCESS || mem == nullptr) {
    throw_cl(
        "cannot allocate " + std::to_string(nbytes) + " bytes on " + d.label(), "clCreateBuffer",
        err,
        err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE ? KILN_ERROR_OUT_OF_MEMORY : 0);
  }
  std::lock_guard<std::mutex> lock(buffers_mu_);
  buffers_[mem] = Buffer{id, size};
  return mem;
}

void PluginState::free(int32_t id, void* ptr) {
  device(id);
  if (ptr == nullptr) return;
  auto mem = static_cast<cl_mem>(ptr);
  {
    std::lock_guard<std::mutex> lock(buffers_mu_);
    auto it = buffers_.find(mem);
    if (it == buffers_.end()) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "free: " + hex_pointer(ptr) + " is not a live buffer of the opencl backend");
    }
    if (it->second.device != id) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "free: buffer " + hex_pointer(ptr) + " belongs to device " +
                           std::to_string(it->second.device) + ", not " + std::to_string(id));
    }
    buffers_.erase(it);
  }
  buffer_epoch_.fetch_add(1, std::memory_order_release);  // kernels forget buffer arguments
  // Commands still using the buffer keep it alive until they finish.
  const cl_int err = clReleaseMemObject(mem);
  if (err != CL_SUCCESS)
    throw_cl("free: releasing buffer " + hex_pointer(ptr), "clReleaseMemObject", err);
}

PluginState::Buffer PluginState::buffer(int32_t id, const void* ptr, const char* what) {
  if (ptr == nullptr) throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
  std::lock_guard<std::mutex> lock(buffers_mu_);
  auto it = buffers_.find(static_cast<cl_mem>(const_cast<void*>(ptr)));
  if (it == buffers_.end()) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " " + hex_pointer(ptr) +
                                           " is not a live buffer of the opencl backend "
                                           "(freed, or not allocated by it)");
  }
  if (it->second.device != id) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     std::string(what) + " " + hex_pointer(ptr) + " belongs to device " +
                         std::to_string(it->second.device) + ", not device " + std::to_string(id));
  }
  return it->second;
}

void PluginState::check_range(const Buffer& b, size_t offset, size_t nbytes, const char* what) {
  if (offset > b.size || nbytes > b.size - offset) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + ": bytes [" + std::to_string(offset) +
                                           ", " + std::to_string(offset) + " + " +
                                           std::to_string(nbytes) + ") lie outside the buffer of " +
                                           std::to_string(b.size) + " bytes");
  }
}

void PluginState::copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset,
                                 size_t nbytes, void* stream) {
  DeviceRecord& d = device(id);
  const Buffer b = buffer(id, dst, "copy_to_device: destination");
  check_range(b, dst_offset, nbytes, "copy_to_device");
  if (nbytes == 0) return;
  if (host_src == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "copy_to_device: source is NULL");
  cl_command_queue q = queue_for(id, stream);
  // Blocking: the host source is only borrowed for the call.
  const cl_int err = clEnqueueWriteBuffer(q, static_cast<cl_mem>(dst), CL_TRUE, dst_offset, nbytes,
                                          host_src, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    throw_cl("copy_to_device of " + std::to_string(nbytes) + " bytes on " + d.label(),
             "clEnqueueWriteBuffer", err);
  }
}

void PluginState::copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst,
                               size_t nbytes, void* stream) {
  DeviceRecord& d = device(id);
  const Buffer b = buffer(id, src, "copy_to_host: source");
  check_range(b, src_offset, nbytes, "copy_to_host");
  if (nbytes == 0) return;
  if (host_dst == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "copy_to_host: destination is NULL");
  cl_command_queue q = queue_for(id, stream);
  // Blocking, so the data is there when the call returns (the ABI only promises it after a
  // synchronize; this is stricter).
  const cl_int err = clEnqueueReadBuffer(q, static_cast<cl_mem>(const_cast<void*>(src)), CL_TRUE,
                                         src_offset, nbytes, host_dst, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    throw_cl("copy_to_host of " + std::to_string(nbytes) + " bytes on " + d.label(),
             "clEnqueueReadBuffer", err);
  }
}

void PluginState::copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst,
                                 size_t dst_offset, size_t nbytes, void* stream) {
  DeviceRecord& d = device(id);
  const Buffer sb = buffer(id, src, "copy_on_device: source");
  const Buffer db = buffer(id, dst, "copy_on_device: destination");
  check_range(sb, src_offset, nbytes, "copy_on_device (source)");
  check_range(db, dst_offset, nbytes, "copy_on_device (destination)");
  if (nbytes == 0) return;
  cl_command_queue q = queue_for(id, stream);
  auto s = static_cast<cl_mem>(const_cast<void*>(src));
  auto t = static_cast<cl_mem>(dst);
  const std::string what = "copy_on_device of " + std::to_string(nbytes) + " bytes on " + d.label();
  const bool overlap =
      s == t && src_offset < dst_offset + nbytes && dst_offset < src_offset + nbytes;
  if (!overlap) {
    const cl_int err =
        clEnqueueCopyBuffer(q, s, t, src_offset, dst_offset, nbytes, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) throw_cl(what, "clEnqueueCopyBuffer", err);
    return;
  }
  // clEnqueueCopyBuffer refuses overlapping ranges (CL_MEM_COPY_OVERLAP); go through a
  // temporary buffer, as memmove would.
  cl_int err = CL_SUCCESS;
  cl_mem temp = clCreateBuffer(d.context(), CL_MEM_READ_WRITE, nbytes, nullptr, &err);
  if (err != CL_SUCCESS || temp == nullptr)
    throw_cl(what + " (overlapping)", "clCreateBuffer", err);
  err = clEnqueueCopyBuffer(q, s, temp, src_offset, 0, nbytes, 0, nullptr, nullptr);
  if (err == CL_SUCCESS)
    err = clEnqueueCopyBuffer(q, temp, t, 0, dst_offset, nbytes, 0, nullptr, nullptr);
  clReleaseMemObject(temp);  // freed once both copies are done
  if (err != CL_SUCCESS) throw_cl(what + " (overlapping)", "clEnqueueCopyBuffer", err);
}

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
  if (it->second != id) {
    throw sdk::Error(KILN_ERROR_VALUE, "stream " + hex_pointer(stream) + " belongs to device " +
                                           std::to_string(it->second) + ", not device " +
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
  cl_command_queue q = clCreateCommandQueue(d.context(), d.device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS || q == nullptr) {
    throw_cl("stream_create on " + d.label(), "clCreateCommandQueue", err);
  }
  std::lock_guard<std::mutex> lock(objects_mu_);
  streams_[q] = id;
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
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    streams_.erase(q);
  }
  clFinish(q);
  clReleaseCommandQueue(q);
}

// ---- timers ----

void* PluginState::timer_create(int32_t id) {
  device(id).queue();  // the context must exist before markers can be enqueued
  auto t = std::make_unique<Timer>();
  t->device = id;
  std::lock_guard<std::mutex> lock(objects_mu_);
  timers_.insert(t.get());
  return t.release();
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
  if (!start && t.start == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, "timer_stop before timer_start");
  }
  cl_event event = nullptr;
  // A marker completes when every command enqueued before it on the in-order queue has; its
  // profiling counters give that point on the device's clock. Never blocks.
  const cl_int err = clEnqueueMarkerWithWaitList(q, 0, nullptr, &event);
  if (err != CL_SUCCESS) {
    throw_cl(std::string(slot) + " on device " + std::to_string(t.device),
             "clEnqueueMarkerWithWaitList", err);
  }
  if (start) {
    if (t.start != nullptr) clReleaseEvent(t.start);
    if (t.stop != nullptr) clReleaseEvent(t.stop);
    t.start = event;
    t.stop = nullptr;
  } else {
    if (t.stop != nullptr) clReleaseEvent(t.stop);
    t.stop = event;
    clFlush(q);  // submits the batch without waiting for it
  }
}

int64_t PluginState::timer_elapsed_ns(void* handle) {
  Timer& t = timer(handle, "timer_elapsed_ns");
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.start == nullptr || t.stop == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, "timer_elapsed_ns: the timer was not started and stopped");
  }
  cl_int err = clWaitForEvents(1, &t.stop);
  if (err != CL_SUCCESS) {
    throw_cl("timer_elapsed_ns: waiting for the stop marker (work enqueued before it failed)",
             "clWaitForEvents", err);
  }
  cl_ulong begin = 0;
  cl_ulong end = 0;
  err = clGetEventProfilingInfo(t.start, CL_PROFILING_COMMAND_END, sizeof(begin), &begin, nullptr);
  if (err == CL_SUCCESS) {
    err = clGetEventProfilingInfo(t.stop, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
  }
  if (err != CL_SUCCESS) {
    throw_cl("timer_elapsed_ns: reading the markers' profiling counters", "clGetEventProfilingInfo",
             err);
  }
  // Markers on two different queues may complete in either order; that is no time at all.
  return end > begin ? static_cast<int64_t>(end - begin) : 0;
}

void PluginState::timer_destroy(void* handle) noexcept {
  auto* t = static_cast<Timer*>(handle);
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (handle == nullptr || timers_.erase(t) == 0) return;  // not ours: nothing to free
  }
  delete t;
}

// ---- device code ----

void* PluginState::module_load(int32_t id, const void* data, size_t size, const char* format,
                               const char* metadata_json) {
  DeviceRecord& d = device(id);
  if (format == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_load: format is NULL");
  sdk::ModuleMetadata metadata =
      sdk::parse_module_metadata(metadata_json != nullptr ? metadata_json : "");
  const std::string build_options =
      join_build_options(metadata.build_options, options_.build_options);
  std::shared_ptr<Program> program = cache_->get(d, format, data, size, build_options);
  auto m = std::make_unique<Module>(d, std::move(program), std::move(metadata));
  std::lock_guard<std::mutex> lock(objects_mu_);
  modules_.insert(m.get());
  return m.release();
}

Module& PluginState::module(void* handle, const char* slot) {
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    auto* m = static_cast<Module*>(handle);
    if (handle != nullptr && modules_.count(m) != 0) return *m;
  }
  require_devices();  // without devices there are no modules: say why
  throw sdk::Error(KILN_ERROR_VALUE, std::string(slot) + ": " + hex_pointer(handle) +
                                         " is not a live module of the opencl backend");
}

void* PluginState::module_get_kernel(void* handle, const char* name_cstr) {
  Module& m = module(handle, "module_get_kernel");
  if (name_cstr == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_get_kernel: name is NULL");
  const std::string name = name_cstr;
  std::lock_guard<std::mutex> lock(m.mu());
  auto& kernels = m.kernels();
  if (auto it = kernels.find(name); it != kernels.end()) return it->second.get();
  const sdk::KernelInfo& info = sdk::find_kernel(m.metadata(), name);
  DeviceRecord& d = m.device();
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(m.program().get(), name.c_str(), &err);
  if (err != CL_SUCCESS || k == nullptr) {
    if (err == CL_INVALID_KERNEL_NAME) {
      const std::string names = program_kernel_names(m.program().get());
      throw sdk::Error(KILN_ERROR_NOT_FOUND,
                       "the metadata describes kernel '" + name + "' but " +
                           m.program().description() + " defines no such kernel" +
                           (names.empty() ? std::string() : " (it defines: " + names + ")"));
    }
    throw_cl("cannot create kernel '" + name + "' on " + d.label(), "clCreateKernel", err);
  }
  auto kernel = std::make_unique<Kernel>();
  kernel->kernel = k;
  kernel->module = &m;
  kernel->device = &d;
  kernel->info = &info;
  cl_uint num_params = 0;
  err = clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof(num_params), &num_params, nullptr);
  if (err != CL_SUCCESS) throw_cl("kernel '" + name + "'", "clGetKernelInfo", err);
  bool wants_dynamic = false;
  for (sdk::LaunchTag tag : info.launch) {
    wants_dynamic |= tag == sdk::LaunchTag::kDynamicSharedBytes;
  }
  const size_t expected = info.args.size() + (wants_dynamic ? 1 : 0);
  if (num_params != expected) {
    std::string kinds;
    for (sdk::ArgKind a : info.args) {
      kinds += kinds.empty() ? "" : ", ";
      kinds += sdk::to_string(a);
    }
    throw sdk::Error(KILN_ERROR_VALUE,
                     "kernel '" + name + "' has " + std::to_string(num_params) +
                         " parameters in the program, but its metadata lists " +
                         std::to_string(info.args.size()) + " arguments (" + kinds + ")" +
                         (wants_dynamic ? " plus the trailing __local parameter that "
                                          "dynamic_shared_bytes sizes"
                                        : ""));
  }
  kernel->dynamic_local = wants_dynamic;
  size_t wg = 0;
  err = clGetKernelWorkGroupInfo(k, d.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(wg), &wg, nullptr);
  kernel->work_group_size = err == CL_SUCCESS && wg > 0 ? wg : d.max_work_group_size;
  Kernel* out = kernel.get();
  kernels.emplace(name, std::move(kernel));
  std::lock_guard<std::mutex> reg(objects_mu_);
  kernels_.insert(out);
  return out;
}

void PluginState::module_unload(void* handle) noexcept {
  auto* m = static_cast<Module*>(handle);
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (handle == nullptr || modules_.erase(m) == 0) return;  // not ours: nothing to release
    for (auto& [name, k] : m->kernels()) kernels_.erase(k.get());
  }
  delete m;  // releases its kernels and its reference to the program
}

Kernel& PluginState::kernel(void* handle, void* stream, cl_command_queue* queue) {
  // One lock for both checks: this runs on every launch.
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    auto* k = static_cast<Kernel*>(handle);
    if (handle != nullptr && kernels_.count(k) != 0) {
      if (stream == nullptr) {
        *queue = nullptr;  // the caller takes the device's default queue
        return *k;
      }
      auto it = streams_.find(static_cast<cl_command_queue>(stream));
      if (it != streams_.end() && it->second == k->device->id) {
        *queue = it->first;
        return *k;
      }
      if (it != streams_.end()) {
        throw sdk::Error(KILN_ERROR_VALUE, "launch: stream " + hex_pointer(stream) +
                                               " belongs to device " + std::to_string(it->second) +
                                               ", but the kernel was loaded on device " +
                                               std::to_string(k->device->id));
      }
      throw sdk::Error(KILN_ERROR_VALUE, "launch: stream " + hex_pointer(stream) +
                                             " is not a live stream of the opencl backend");
    }
  }
  require_devices();  // without devices there are no kernels: say why
  throw sdk::Error(KILN_ERROR_VALUE, "launch: " + hex_pointer(handle) +
                                         " is not a live kernel of the opencl backend (was its "
                                         "module unloaded?)");
}

cl_mem PluginState::tensor_argument(const Kernel& k, const DLTensor& t, size_t index,
                                    std::vector<cl_mem>& sub_buffers) {
  // Messages are built only on failure: this runs for every tensor of every launch.
  auto where = [&] { return "kernel '" + k.info->name + "' argument " + std::to_string(index); };
  const int32_t type = sdk::device_type_code(t.device);
  if (type != kDLOpenCL) {
    throw sdk::Error(KILN_ERROR_VALUE, where() + " is a tensor on device type " +
                                           std::to_string(type) +
                                           ", not on an opencl device (copy it to opencl:" +
                                           std::to_string(k.device->id) + " first)");
  }
  if (t.device.device_id != k.device->id) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + " is a tensor on opencl:" + std::to_string(t.device.device_id) +
                         ", but the kernel was loaded on opencl:" + std::to_string(k.device->id));
  }
  Buffer b{};
  {
    std::lock_guard<std::mutex> lock(buffers_mu_);
    auto it = buffers_.find(static_cast<cl_mem>(t.data));
    if (it == buffers_.end() || it->second.device != k.device->id) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       where() + ": tensor data " + hex_pointer(t.data) +
                           " is not a live buffer of opencl:" + std::to_string(k.device->id) +
                           " (freed, or not allocated by this backend)");
    }
    b = it->second;
  }
  const std::optional<uint64_t> extent = tensor_extent_bytes(t);
  if (!extent || t.byte_offset > b.size || *extent > b.size - t.byte_offset) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + ": the tensor (byte_offset " + std::to_string(t.byte_offset) + ", " +
                         (extent ? std::to_string(*extent) : std::string("overflowing")) +
                         " bytes) does not fit in its buffer of " + std::to_string(b.size) +
                         " bytes");
  }
  auto mem = static_cast<cl_mem>(t.data);
  if (t.byte_offset == 0) return mem;
  // A kernel receives whole buffers: an offset becomes a sub-buffer, which OpenCL allows only
  // at multiples of the device's base address alignment.
  const size_t align = std::max<cl_uint>(k.device->base_address_align_bytes, 1);
  if (t.byte_offset % align != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     where() + ": byte_offset " + std::to_string(t.byte_offset) +
                         " is not a multiple of " + std::to_string(align) +
                         " bytes, the sub-buffer alignment of " + k.device->label() +
                         " (CL_DEVICE_MEM_BASE_ADDR_ALIGN); OpenCL kernels take whole buffers, so "
                         "pass a tensor at an aligned offset or a copy of it");
  }
  cl_buffer_region region{static_cast<size_t>(t.byte_offset),
                          static_cast<size_t>(std::max<uint64_t>(*extent, 1))};
  if (region.size > b.size - region.origin) region.size = b.size - region.origin;
  if (region.size == 0) {
    throw sdk::Error(KILN_ERROR_VALUE, where() + ": byte_offset " + std::to_string(t.byte_offset) +
                                           " is at the end of its buffer");
  }
  cl_int err = CL_SUCCESS;
  cl_mem sub =
      clCreateSubBuffer(mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  if (err != CL_SUCCESS || sub == nullptr) {
    throw_cl(where() + ": cannot make a sub-buffer at byte_offset " + std::to_string(t.byte_offset),
             "clCreateSubBuffer", err,
             err == CL_MISALIGNED_SUB_BUFFER_OFFSET ? KILN_ERROR_VALUE : 0);
  }
  sub_buffers.push_back(sub);
  return sub;
}

void PluginState::launch(void* handle, const KilnAny* args, int32_t num_args,
                         const uint32_t grid[3], const uint32_t block[3],
                         uint32_t dynamic_shared_bytes, void* stream) {
  cl_command_queue q = nullptr;
  Kernel& k = kernel(handle, stream, &q);
  DeviceRecord& d = *k.device;
  if (q == nullptr) q = d.queue();
  const std::string& name = k.info->name;
  if (grid == nullptr || block == nullptr) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': grid or block is NULL");
  }
  if (num_args < 0 || (num_args > 0 && args == nullptr)) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': malformed argument list");
  }
  // Global size = grid * block per axis, local size = block; axes past the last one used are
  // left out of work_dim.
  size_t global[3];
  size_t local[3];
  size_t group = 1;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) {
      throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': grid " +
                                             extents_text(grid) + " and block " +
                                             extents_text(block) + " must be >= 1 on every axis");
    }
    if (block[i] > d.max_work_item_sizes[static_cast<size_t>(i)]) {
      throw sdk::Error(KILN_ERROR_VALUE,
                       "launch of kernel '" + name + "': block " + extents_text(block) +
                           " exceeds the maximum work-item sizes " +
                           std::to_string(d.max_work_item_sizes[0]) + "x" +
                           std::to_string(d.max_work_item_sizes[1]) + "x" +
                           std::to_string(d.max_work_item_sizes[2]) + " of " + d.label());
    }
    global[i] = size_t{grid[i]} * block[i];
    local[i] = block[i];
    group *= block[i];
  }
  if (group > k.work_group_size) {
    throw sdk::Error(KILN_ERROR_VALUE, "launch of kernel '" + name + "': block " +
                                           extents_text(block) + " has " + std::to_string(group) +
                                           " work-items, more than the " +
                                           std::to_string(k.work_group_size) +
                                           " this kernel allows per work-group on " + d.label() +
                                           " (CL_KERNEL_WORK_GROUP_SIZE)");
  }
  const cl_uint dims = grid[2] > 1 || block[2] > 1 ? 3 : grid[1] > 1 || block[1] > 1 ? 2 : 1;
  if (k.dynamic_local && dynamic_shared_bytes == 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "launch of kernel '" + name +
                         "': its trailing __local parameter needs dynamic_shared_bytes > 0");
  }
  if (!k.dynamic_local && dynamic_shared_bytes != 0) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "launch of kernel '" + name + "': dynamic_shared_bytes " +
                         std::to_string(dynamic_shared_bytes) +
                         " given, but the kernel's metadata has no dynamic_shared_bytes launch "
                         "tag (and no trailing __local parameter to receive it)");
  }
  SubBuffers subs;
  struct Context {
    PluginState* self;
    const Kernel* kernel;
    std::vector<cl_mem>* subs;
  } ctx{this, &k, &subs.list};
  sdk::PackedArgs packed;  // on the stack: the launch path allocates nothing
  sdk::pack_kernel_args(
      *k.info, args, num_args,
      [c = &ctx](const DLTensor& t, size_t index) -> uint64_t {
        static_assert(sizeof(cl_mem) <= sizeof(uint64_t));
        cl_mem mem = c->self->tensor_argument(*c->kernel, t, index, *c->subs);
        uint64_t bits = 0;
        std::memcpy(&bits, &mem, sizeof(mem));
        return bits;
      },
      packed);

  std::lock_guard<std::mutex> lock(k.mu);  // argument values live in the cl_kernel
  const size_t count = packed.count;
  if (k.set_values.size() != count) {
    k.set_values.assign(count, {});
    k.set_valid.assign(count, 0);
  }
  const uint64_t epoch = buffer_epoch_.load(std::memory_order_acquire);
  if (epoch != k.set_epoch) {
    for (size_t i = 0; i < count; ++i) {
      if (k.info->args[i] == sdk::ArgKind::kTensor) k.set_valid[i] = 0;
    }
    k.set_epoch = epoch;
  }
  for (size_t i = 0; i < count; ++i) {
    if (k.set_valid[i] != 0 && k.set_values[i] == packed.values[i]) continue;  // already set
    k.set_valid[i] = 0;
    const cl_int err =
        clSetKernelArg(k.kernel, static_cast<cl_uint>(i), packed.sizes[i], packed.pointers[i]);
    if (err != CL_SUCCESS) {
      throw_cl("launch of kernel '" + name + "': setting argument " + std::to_string(i) + " (" +
                   sdk::to_string(k.info->args[i]) +
                   "; does the metadata match the kernel's parameter types?)",
               "clSetKernelArg", err, KILN_ERROR_VALUE);
    }
    const bool sub_buffer =
        k.info->args[i] == sdk::ArgKind::kTensor && args[i].value.v_tensor->byte_offset != 0;
    k.set_values[i] = packed.values[i];
    k.set_valid[i] = sub_buffer ? 0 : 1;  // a sub-buffer lives for this launch only
  }
  if (k.dynamic_local && k.set_local_bytes != dynamic_shared_bytes) {
    k.set_local_bytes = 0;
    const cl_int err =
        clSetKernelArg(k.kernel, static_cast<cl_uint>(count), dynamic_shared_bytes, nullptr);
    if (err != CL_SUCCESS) {
      throw_cl("launch of kernel '" + name + "': setting the __local parameter to " +
                   std::to_string(dynamic_shared_bytes) + " bytes",
               "clSetKernelArg", err, KILN_ERROR_VALUE);
    }
    k.set_local_bytes = dynamic_shared_bytes;
  }
  const cl_int err =
      clEnqueueNDRangeKernel(q, k.kernel, dims, nullptr, global, local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const bool bad_launch = err == CL_INVALID_WORK_GROUP_SIZE || err == CL_INVALID_WORK_ITEM_SIZE ||
                            err == CL_INVALID_GLOBAL_WORK_SIZE || err == CL_INVALID_KERNEL_ARGS ||
                            err == CL_INVALID_WORK_DIMENSION;
    throw_cl("launch of kernel '" + name + "' with grid " + extents_text(grid) + " and block " +
                 extents_text(block) + " on " + d.label(),
             "clEnqueueNDRangeKernel", err, bad_launch ? KILN_ERROR_VALUE : 0);
  }
}

}  // namespace kiln::opencl
