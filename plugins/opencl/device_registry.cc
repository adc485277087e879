// SPDX-License-Identifier: Apache-2.0
// The device registry of the opencl backend: enumeration, attributes and contexts.
#include "device_registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cl_error.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"

namespace kiln::opencl {
namespace {

// The file the ICD loader was loaded from (e.g. /lib/x86_64-linux-gnu/libOpenCL.so.1).
std::string loader_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&clGetPlatformIDs), &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "libOpenCL.so.1";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains_ci(const std::string& haystack, const std::string& needle) {
  return needle.empty() || lower(haystack).find(lower(needle)) != std::string::npos;
}

// Trailing NULs and spaces removed (drivers pad some strings).
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) {
    s.pop_back();
  }
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t size = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string s(size, '\0');
  if (clGetPlatformInfo(p, what, size, s.data(), nullptr) != CL_SUCCESS) return "";
  return trimmed(std::move(s));
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string s(size, '\0');
  if (clGetDeviceInfo(d, what, size, s.data(), nullptr) != CL_SUCCESS) return "";
  return trimmed(std::move(s));
}

// A scalar device property, or `fallback` when the query fails.
template <typename T>
T device_value(cl_device_id d, cl_device_info what, T fallback = T{}) {
  T value{};
  if (clGetDeviceInfo(d, what, sizeof(T), &value, nullptr) != CL_SUCCESS) return fallback;
  return value;
}

std::string device_type_name(cl_device_type type) {
  std::string out;
  auto add = [&](cl_device_type bit, const char* name) {
    if ((type & bit) == 0) return;
    if (!out.empty()) out += ",";
    out += name;
  };
  add(CL_DEVICE_TYPE_GPU, "gpu");
  add(CL_DEVICE_TYPE_CPU, "cpu");
  add(CL_DEVICE_TYPE_ACCELERATOR, "accelerator");
  add(CL_DEVICE_TYPE_CUSTOM, "custom");
  return out.empty() ? "unknown" : out;
}

cl_device_type cl_type_of(DeviceTypeFilter filter) {
  switch (filter) {
    case DeviceTypeFilter::kGpu:
      return CL_DEVICE_TYPE_GPU;
    case DeviceTypeFilter::kCpu:
      return CL_DEVICE_TYPE_CPU;
    case DeviceTypeFilter::kAccelerator:
      return CL_DEVICE_TYPE_ACCELERATOR;
    case DeviceTypeFilter::kAll:
      break;
  }
  return CL_DEVICE_TYPE_ALL;
}

bool has_extension(const std::string& extensions, const char* name) {
  size_t pos = 0;
  const size_t len = std::strlen(name);
  while ((pos = extensions.find(name, pos)) != std::string::npos) {
    const bool start_ok = pos == 0 || extensions[pos - 1] == ' ';
    const bool end_ok = pos + len == extensions.size() || extensions[pos + len] == ' ';
    if (start_ok && end_ok) return true;
    pos += len;
  }
  return false;
}

// Reads everything Kiln reports about `d` into `r`.
void describe(DeviceRecord& r, cl_device_id d) {
  r.name = device_string(d, CL_DEVICE_NAME);
  if (r.name.empty()) r.name = "OpenCL device " + std::to_string(r.id);
  r.version = device_string(d, CL_DEVICE_VERSION);
  r.driver_version = device_string(d, CL_DRIVER_VERSION);
  r.device_cl = parse_cl_version(r.version);
  const std::string extensions = device_string(d, CL_DEVICE_EXTENSIONS);
  r.khr_il_program = has_extension(extensions, "cl_khr_il_program");
  // CL_DEVICE_IL_VERSION is core in 2.1 and has the same value as the KHR query; a 1.2 device
  // without the extension would answer CL_INVALID_VALUE.
  if (r.device_cl.at_least(2, 1) || r.khr_il_program) {
    r.il_version = device_string(d, CL_DEVICE_IL_VERSION);
  }
  r.max_work_group_size = device_value<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, 1);
  r.max_work_item_dimensions = device_value<cl_uint>(d, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, 3);
  {
    std::vector<size_t> sizes(std::max<cl_uint>(r.max_work_item_dimensions, 3), 1);
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizes.size() * sizeof(size_t),
                        sizes.data(), nullptr) != CL_SUCCESS) {
      std::fill(sizes.begin(), sizes.end(), r.max_work_group_size);
    }
    for (size_t i = 0; i < 3; ++i) r.max_work_item_sizes[i] = sizes[i];
  }
  r.max_alloc_bytes = device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  r.base_address_align_bytes = device_value<cl_uint>(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, 8) / 8;

  auto& a = r.attributes;
  auto str = [&](const char* key, std::string value) { a.push_back({key, std::move(value)}); };
  auto num = [&](const char* key, uint64_t value) {
    a.push_back({key, static_cast<int64_t>(value)});
  };
  str("name", r.name);
  str("vendor", device_string(d, CL_DEVICE_VENDOR));
  str("device_type", device_type_name(device_value<cl_device_type>(d, CL_DEVICE_TYPE)));
  str("platform", r.platform_name);
  num("platform_index", static_cast<uint64_t>(r.platform_index));
  str("platform_version", r.platform_version);
  str("version", r.version);
  str("driver_version", r.driver_version);
  str("opencl_c_version", device_string(d, CL_DEVICE_OPENCL_C_VERSION));
  num("available", device_value<cl_bool>(d, CL_DEVICE_AVAILABLE) ? 1 : 0);
  num("compute_units", device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS));
  num("max_clock_mhz", device_value<cl_uint>(d, CL_DEVICE_MAX_CLOCK_FREQUENCY));
  num("memory_bytes", device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE));
  num("max_alloc_bytes", r.max_alloc_bytes);
  num("local_memory_bytes", device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE));
  if (device_value<cl_device_mem_cache_type>(d, CL_DEVICE_GLOBAL_MEM_CACHE_TYPE) != CL_NONE) {
    const auto cache = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE);
    if (cache > 0) num("l2_cache_bytes", cache);
    num("cache_line_bytes", device_value<cl_uint>(d, CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE));
  }
  num("constant_buffer_bytes", device_value<cl_ulong>(d, CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE));
  num("max_work_group_size", r.max_work_group_size);
  str("max_work_item_sizes", std::to_string(r.max_work_item_sizes[0]) + "x" +
                                 std::to_string(r.max_work_item_sizes[1]) + "x" +
                                 std::to_string(r.max_work_item_sizes[2]));
  num("base_address_align_bytes", r.base_address_align_bytes);
  num("preferred_vector_width_char",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR));
  num("preferred_vector_width_short",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT));
  num("preferred_vector_width_int", device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT));
  num("preferred_vector_width_long",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG));
  num("preferred_vector_width_half",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF));
  num("preferred_vector_width_float",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT));
  num("preferred_vector_width_double",
      device_value<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE));
  if (!r.il_version.empty()) str("il_version", r.il_version);
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

// Called by the driver (possibly on its own threads) with asynchronous errors of a context.
void CL_CALLBACK context_notify(const char* errinfo, const void*, size_t, void* user_data) {
  const auto* record = static_cast<const DeviceRecord*>(user_data);
  sdk::log(KILN_LOG_WARN, "%s: OpenCL driver reports: %s", record->label().c_str(),
           errinfo != nullptr ? errinfo : "(no text)");
}

}  // namespace

ClVersion parse_cl_version(const std::string& text) {
  // "OpenCL 3.0 PoCL ...", "OpenCL C 1.2 ...": the first "<digits>.<digits>".
  ClVersion v;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) continue;
    size_t j = i;
    int major = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
      major = major * 10 + (text[j++] - '0');
      if (major > 1000) break;
    }
    if (j + 1 < text.size() && text[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
      int minor = 0;
      ++j;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
        minor = minor * 10 + (text[j++] - '0');
        if (minor > 1000) break;
      }
      v.major = major;
      v.minor = minor;
      return v;
    }
    i = j;
  }
  return v;
}

DeviceRecord::~DeviceRecord() {
  if (context_ != nullptr) clReleaseContext(context_);
}

std::string DeviceRecord::label() const {
  return "device " + std::to_string(id) + " (" + name + ", platform " + platform_name + ")";
}

std::string DeviceRecord::identity() const {
  return "platform: " + platform_name + " | " + platform_version + "\ndevice: " + name + " | " +
         version + " | driver " + driver_version + "\n";
}

void DeviceRecord::create_context() {
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   reinterpret_cast<cl_context_properties>(platform), 0};
  cl_int err = CL_SUCCESS;
  context_ = clCreateContext(props, 1, &device, &context_notify, this, &err);
  if (err != CL_SUCCESS || context_ == nullptr) {
    context_ = nullptr;
    error_code_ = err == CL_DEVICE_NOT_AVAILABLE ? KILN_ERROR_UNAVAILABLE : kiln_code_for(err);
    error_ = "cannot create an OpenCL context for " + label() + ": " +
             cl_failure("clCreateContext", err);
    return;
  }
  sdk::log(KILN_LOG_DEBUG, "%s: context created", label().c_str());
}

cl_context DeviceRecord::context() {
  std::call_once(once_, [this] { create_context(); });
  if (context_ == nullptr) throw sdk::Error(error_code_, error_);
  return context_;
}

DeviceRegistry::DeviceRegistry(PluginOptions options) : options_(std::move(options)) {}

DeviceRegistry::~DeviceRegistry() = default;  // the records release their contexts

const DeviceRegistry::Enumeration& DeviceRegistry::enumeration() {
  std::call_once(once_, [this] {
    pin_icd_loader();
    enumeration_ = enumerate(options_);
    if (enumeration_.devices.empty()) {
      sdk::log(KILN_LOG_DEBUG, "no devices: %s", enumeration_.why_none.c_str());
    }
    for (const auto& d : enumeration_.devices) {
      sdk::log(KILN_LOG_DEBUG, "%s: %s", d->label().c_str(), d->version.c_str());
    }
  });
  return enumeration_;
}

int32_t DeviceRegistry::count(const char** why_none) {
  const Enumeration& e = enumeration();
  if (e.devices.empty() && why_none != nullptr) *why_none = e.why_none.c_str();
  return static_cast<int32_t>(e.devices.size());
}

void DeviceRegistry::visit_attributes(int32_t id, const sdk::AttributeVisitor& visit) {
  visit.all(device(id).attributes);
}

void DeviceRegistry::require_devices() {
  const Enumeration& e = enumeration();
  if (e.devices.empty()) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE, "no OpenCL devices: " + e.why_none);
  }
}

DeviceRecord& DeviceRegistry::device(int32_t id) {
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

DeviceRegistry::Enumeration DeviceRegistry::enumerate(const PluginOptions& options) {
  Enumeration out;
  cl_uint num_platforms = 0;
  const cl_int err = clGetPlatformIDs(0, nullptr, &num_platforms);
  if (err != CL_SUCCESS || num_platforms == 0) {
    std::string why = "no OpenCL platform: " +
                      (err != CL_SUCCESS ? cl_failure("clGetPlatformIDs", err)
                                         : std::string("clGetPlatformIDs lists none")) +
                      " in the ICD loader " + loader_path() +
                      "; no installable client driver (ICD) was found";
    const char* vendors = std::getenv("OCL_ICD_VENDORS");
    why += vendors != nullptr ? std::string(" (OCL_ICD_VENDORS=") + vendors + ")"
                              : std::string(" (the loader reads /etc/OpenCL/vendors/*.icd)");
    out.why_none = why;
    return out;
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  const cl_int list_err = clGetPlatformIDs(num_platforms, platforms.data(), nullptr);
  if (list_err != CL_SUCCESS) {
    out.why_none = "no OpenCL platform: " + cl_failure("clGetPlatformIDs", list_err) +
                   " in the ICD loader " + loader_path();
    return out;
  }
  const cl_device_type wanted = cl_type_of(options.device_type);
  std::vector<std::string> seen;      // every device found, "name (type) on platform"
  std::vector<std::string> problems;  // per-platform failures
  for (cl_uint p = 0; p < num_platforms; ++p) {
    const std::string pname = platform_string(platforms[p], CL_PLATFORM_NAME);
    const std::string pvendor = platform_string(platforms[p], CL_PLATFORM_VENDOR);
    const std::string pversion = platform_string(platforms[p], CL_PLATFORM_VERSION);
    cl_uint num_devices = 0;
    cl_int derr = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &num_devices);
    if (derr == CL_DEVICE_NOT_FOUND || (derr == CL_SUCCESS && num_devices == 0)) {
      problems.push_back("platform '" + pname + "' has no devices");
      continue;
    }
    if (derr != CL_SUCCESS) {
      problems.push_back("platform '" + pname + "': " + cl_failure("clGetDeviceIDs", derr));
      continue;
    }
    std::vector<cl_device_id> devices(num_devices);
    derr = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, num_devices, devices.data(), nullptr);
    if (derr != CL_SUCCESS) {
      problems.push_back("platform '" + pname + "': " + cl_failure("clGetDeviceIDs", derr));
      continue;
    }
    const bool platform_ok =
        contains_ci(pname, options.platform) || contains_ci(pvendor, options.platform);
    for (cl_device_id d : devices) {
      const std::string dname = device_string(d, CL_DEVICE_NAME);
      const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
      seen.push_back("'" + dname + "' (" + device_type_name(type) + ") on platform '" + pname +
                     "'");
      if (!platform_ok || (type & wanted) == 0 || !contains_ci(dname, options.device)) continue;
      auto r = std::make_unique<DeviceRecord>();
      r->id = static_cast<int32_t>(out.devices.size());
      r->platform = platforms[p];
      r->device = d;
      r->platform_index = static_cast<int32_t>(p);
      r->platform_name = pname;
      r->platform_version = pversion;
      r->platform_cl = parse_cl_version(pversion);
      describe(*r, d);
      out.devices.push_back(std::move(r));
    }
  }
  if (!out.devices.empty()) return out;
  std::string why;
  if (!seen.empty()) {
    why = "no OpenCL device matches the plugin options (platform='" + options.platform +
          "', device='" + options.device + "', device_type=" + to_string(options.device_type) +
          "); found ";
    for (size_t i = 0; i < seen.size(); ++i) why += (i == 0 ? "" : ", ") + seen[i];
  } else {
    why = "no OpenCL device: ";
    for (size_t i = 0; i < problems.size(); ++i) why += (i == 0 ? "" : "; ") + problems[i];
  }
  out.why_none = why;
  return out;
}

}  // namespace kiln::opencl
