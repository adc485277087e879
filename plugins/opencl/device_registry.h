// The OpenCL devices the plugin offers: every device of every platform the ICD loader lists
// (filtered by the plugin options), numbered in platform order, then device order. Each device
// gets its own context and default in-order queue (with profiling) on first use.
#ifndef KILN_PLUGINS_OPENCL_DEVICE_REGISTRY_H_
#define KILN_PLUGINS_OPENCL_DEVICE_REGISTRY_H_

#include <CL/cl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "plugin_options.h"

namespace kiln::opencl {

// One attribute as `kiln devices` shows it.
struct DeviceAttribute {
  std::string key;
  std::variant<int64_t, std::string> value;
};

// An OpenCL version as "OpenCL <major>.<minor> ..." texts give it.
struct ClVersion {
  int major = 1;
  int minor = 0;
  bool at_least(int m, int n) const { return major > m || (major == m && minor >= n); }
};

// One device. Everything but the context and queue is read at enumeration and never changes.
class DeviceRecord {
 public:
  DeviceRecord() = default;
  DeviceRecord(const DeviceRecord&) = delete;
  DeviceRecord& operator=(const DeviceRecord&) = delete;
  ~DeviceRecord();  // finishes and releases the queue and the context

  int32_t id = 0;  // Kiln's device id
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  int32_t platform_index = 0;  // position of the platform in clGetPlatformIDs
  std::string name;
  std::string platform_name;
  std::string platform_version;
  std::string version;
  std::string driver_version;
  ClVersion platform_cl;        // parsed from platform_version
  ClVersion device_cl;          // parsed from version
  std::string il_version;       // CL_DEVICE_IL_VERSION(_KHR); empty: no IL programs
  bool khr_il_program = false;  // the device lists cl_khr_il_program
  size_t max_work_group_size = 0;
  cl_uint max_work_item_dimensions = 3;
  std::array<size_t, 3> max_work_item_sizes{};
  cl_ulong max_alloc_bytes = 0;
  cl_uint base_address_align_bytes = 0;
  std::vector<DeviceAttribute> attributes;

  // "device 0 (<name>, platform <platform name>)", for messages.
  std::string label() const;
  // Text identifying the device and its driver, for on-disk cache keys.
  std::string identity() const;

  // The device's context and default queue, created on first call (thread-safe). Throws
  // kiln::sdk::Error naming the device and the failed call; the failure is remembered.
  cl_context context();
  cl_command_queue queue();

 private:
  void create_context();
  std::once_flag once_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  int32_t error_code_ = 0;  // a KilnErrorCode when creation failed
  std::string error_;
};

// The outcome of enumeration: the devices, or why there are none.
struct Enumeration {
  std::vector<std::unique_ptr<DeviceRecord>> devices;
  std::string why_none;  // set when `devices` is empty
};

// Lists the devices of every platform that `options` select. Never throws for a missing
// ICD, platform or device: the reason lands in why_none (library, call, code and name).
Enumeration enumerate_devices(const PluginOptions& options);

// Parses "OpenCL 3.0 ..." / "OpenCL C 1.2 ..." into a version; {1, 0} when unreadable.
ClVersion parse_cl_version(const std::string& text);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_DEVICE_REGISTRY_H_
