// SPDX-License-Identifier: Apache-2.0
// Devices: a {type, id} pair, and tables of device-type names.
#ifndef KILN_DEVICE_H_
#define KILN_DEVICE_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

static_assert(sizeof(DLDeviceType) == sizeof(int32_t), "DLDeviceType is stored as an int32");

// Device types at or above this carry an RPC session: type = server type + (session index +
// 1) * kRemoteDeviceMask (SPEC.md §4.3). Local device types stay below it.
inline constexpr int32_t kRemoteDeviceMask = 128;
// Device type codes of vendor backends without a DLPack code: kFirstVendorDeviceType up to
// kRemoteDeviceMask - 1 (docs/plugin-abi.md §10.1); the host refuses a plugin outside them.
inline constexpr int32_t kFirstVendorDeviceType = 64;

// A device: a DLPack device type code and an index among that backend's devices.
struct Device {
  int32_t type = kDLCPU;
  int32_t id = 0;

  static Device cpu(int32_t id = 0) { return {kDLCPU, id}; }
  // Parses "cpu", "cpu:0", "cuda:1", "opencl:0" or another built-in name, with optional
  // ":index". Throws ValueError for an unknown name (listing the known ones) or a bad index.
  // Names that plugins add belong to a Runtime: Runtime::parse_device knows them too.
  static Device parse(std::string_view text);

  // Vendor device types (>= 64) lie outside DLDeviceType's enumerators, so the code is copied
  // bit for bit rather than converted (a conversion would be undefined behaviour).
  DLDevice to_dlpack() const {
    DLDevice d{};
    std::memcpy(&d.device_type, &type, sizeof(type));
    d.device_id = id;
    return d;
  }
  static Device from_dlpack(DLDevice d) {
    Device out;
    std::memcpy(&out.type, &d.device_type, sizeof(out.type));
    out.id = d.device_id;
    return out;
  }
  // Whether this is a device of an RPC session, which session, and the server's own device.
  bool is_remote() const { return type >= kRemoteDeviceMask; }
  int32_t session_index() const { return type / kRemoteDeviceMask - 1; }
  Device server_device() const { return {type % kRemoteDeviceMask, id}; }
  // "cpu:0"; a remote device prints as "remote<session>:cpu:0"; a type without a built-in
  // name prints as "dev<code>:<id>" (Runtime::device_str names plugins' types too).
  std::string str() const;
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Device-type names: a table from names (canonical names and aliases) to DLPack device type
// codes. Every table starts with the DLPack names (cpu, cuda, cuda_host, opencl, vulkan, metal,
// vpi, rocm, rocm_host, ext_dev, cuda_managed) and aliases (llvm, c -> cpu; nvptx -> cuda; cl ->
// opencl; hip -> rocm). A Runtime owns one and adds the names of the plugins it loads; the
// built-in table is a constant every process shares. Not synchronised: a Runtime fills its
// table while it is constructed and only reads it afterwards.
class DeviceTypeNames {
 public:
  // A table with the built-in names only.
  DeviceTypeNames();
  // The built-in names (immutable).
  static const DeviceTypeNames& builtin();

  // The code of `name` (alias or canonical), or nullopt.
  std::optional<int32_t> find(std::string_view name) const;
  // The canonical name of `code`, or nullopt.
  std::optional<std::string> name_of(int32_t code) const;
  // Adds `name` for `code`. Throws ValueError if `name` is already bound to another code.
  void add(const std::string& name, int32_t code);
  // Every canonical name, sorted.
  std::vector<std::string> names() const;
  // Records why `name`, a type this table does not have, is missing (e.g. "; plugin 'x' would
  // provide it but is disabled: ..."); parse() appends it to its "unknown device type" error.
  void add_missing_hint(const std::string& name, std::string hint);
  // Records what parse() says of an unknown name that has no hint of its own (e.g. "; plugin
  // 'y' may provide it, but its manifest could not be read: ..."); empty: nothing.
  void set_hint_for_any_missing(std::string hint);

  // Parses "cpu", "cpu:0", "cuda:1" or any name of this table, with optional ":index". Throws
  // ValueError for an unknown name (listing the known ones) or a bad index.
  Device parse(std::string_view text) const;
  // "cpu:0"; a remote device prints as "remote<session>:cpu:0"; a type this table does not
  // name prints as "dev<code>:<id>".
  std::string str(Device device) const;

 private:
  std::map<std::string, int32_t, std::less<>> by_name_;  // canonical names and aliases
  std::map<int32_t, std::string> canonical_;
  std::map<std::string, std::string, std::less<>> missing_hints_;
  std::string any_missing_hint_;  // set_hint_for_any_missing
};

}  // namespace kiln

#endif  // KILN_DEVICE_H_
