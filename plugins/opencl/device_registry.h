// SPDX-License-Identifier: Apache-2.0
// The device registry of the opencl backend: every device of every platform the ICD loader
// lists (filtered by the plugin options), numbered in platform order, then device order, with
// its attributes and its context. Enumeration, the first OpenCL call the plugin makes, happens
// on the first device query, never at load. Each device's context is created on first use; its
// default queue belongs to Queues (queues.h).
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

#include "kiln/sdk/device_backend.hpp"
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

// One device, owned by the DeviceRegistry. Everything but the context is read at enumeration
// and never changes.
class DeviceRecord {
 public:
  DeviceRecord() = default;
  DeviceRecord(const DeviceRecord&) = delete;
  DeviceRecord& operator=(const DeviceRecord&) = delete;
  // Releases the context. Whatever was made in it (queues, buffers, programs) must be gone.
  ~DeviceRecord();

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

  // The device's context (owned by this record), created on first call (thread-safe: once_).
  // Throws kiln::sdk::Error naming the device and clCreateContext: KILN_ERROR_UNAVAILABLE for
  // CL_DEVICE_NOT_AVAILABLE, else as kiln_code_for; the failure is remembered and thrown again.
  cl_context context();

 private:
  void create_context();
  std::once_flag once_;  // guards the creation of context_ (error_code_, error_ on failure)
  cl_context context_ = nullptr;
  int32_t error_code_ = 0;  // a KilnErrorCode when creation failed
  std::string error_;
};

// The devices of the plugin instance. Thread-safe: enumeration runs once (once_), and the
// records never change after it but for their contexts, which guard themselves.
class DeviceRegistry {
 public:
  // Keeps a copy of `options`, whose platform, device and device_type select the devices.
  // Touches no OpenCL API: the driver is initialised on the first call of a member below.
  explicit DeviceRegistry(PluginOptions options);
  DeviceRegistry(const DeviceRegistry&) = delete;
  DeviceRegistry& operator=(const DeviceRegistry&) = delete;
  // Releases the devices' contexts. Queues, buffers and programs made in them must be gone.
  ~DeviceRegistry();

  // The number of devices; when 0 and `why_none` is not NULL, `*why_none` points at the
  // reason (owned by the registry, valid for its lifetime). Never throws for a missing ICD,
  // platform or device.
  int32_t count(const char** why_none);
  // Calls `visit` (borrowed for the call) with each attribute of device `id`, in the order of
  // docs/backends/opencl.md. Errors as device().
  void visit_attributes(int32_t id, const sdk::AttributeVisitor& visit);
  // Device `id`, owned by the registry (valid for its lifetime). Throws kiln::sdk::Error:
  // KILN_ERROR_UNAVAILABLE with the reason when there is no device, KILN_ERROR_INDEX for an
  // id outside 0..count-1.
  DeviceRecord& device(int32_t id);
  // Throws KILN_ERROR_UNAVAILABLE ("no OpenCL devices: <reason>") when there is no device.
  void require_devices();

 private:
  // The devices, or why there are none.
  struct Enumeration {
    std::vector<std::unique_ptr<DeviceRecord>> devices;
    std::string why_none;  // set when `devices` is empty
  };
  // Lists the devices of every platform that `options` select; the reason for none lands in
  // why_none (library, call, code and name).
  static Enumeration enumerate(const PluginOptions& options);
  // The enumeration, done on the first call (pins the ICD loader, then enumerate()).
  const Enumeration& enumeration();

  const PluginOptions options_;
  std::once_flag once_;      // guards the one enumeration
  Enumeration enumeration_;  // written once under once_, read-only after
};

// Parses "OpenCL 3.0 ..." / "OpenCL C 1.2 ..." into a version; {1, 0} when unreadable.
ClVersion parse_cl_version(const std::string& text);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_DEVICE_REGISTRY_H_
