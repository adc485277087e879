// SPDX-License-Identifier: Apache-2.0
// kiln.Device, kiln.DataType, and what the runtime loaded: devices(), backends(), plugins().
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/dtype.h"

namespace kiln::python {
namespace {

// A device's attributes as a dict of Python values.
nb::dict attribute_dict(const DeviceInfo& info) {
  nb::dict out;
  for (const auto& [name, value] : info.attributes) out[name.c_str()] = from_any(value);
  return out;
}

}  // namespace

Runtime& runtime() { return Runtime::global(); }

void bind_device(nb::module_& m) {
  nb::class_<Device>(m, "Device",
                     "A device: a DLPack device type code and an index. Make one with "
                     "kiln.device('cuda:1'), kiln.cpu(0), kiln.opencl(0), ...")
      .def(nb::init<>())
      .def_rw("device_type", &Device::type, "The DLPack device type code (1 is cpu).")
      .def_rw("device_id", &Device::id, "The index among that backend's devices.")
      .def_prop_ro(
          "type_name",
          [](const Device& d) {
            auto name = runtime().device_types().name_of(d.server_device().type);
            return name ? *name : "dev" + std::to_string(d.type);
          },
          "The device type's name ('cpu', 'opencl', ...).")
      .def_prop_ro("is_remote", &Device::is_remote, "Whether the device belongs to an RPC session.")
      .def(
          "__str__", [](const Device& d) { return runtime().device_str(d); },
          "'cpu:0', 'opencl:1', 'remote0:cpu:0'.")
      .def("__repr__",
           [](const Device& d) { return "kiln.device('" + runtime().device_str(d) + "')"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__eq__", [](const Device&, nb::handle) { return false; })
      .def("__hash__", [](const Device& d) { return (static_cast<int64_t>(d.type) << 32) ^ d.id; })
      .def("__dlpack_device__", [](const Device& d) { return nb::make_tuple(d.type, d.id); });

  m.def(
      "device",
      [](const std::string& name, std::optional<int32_t> index) {
        Device d = runtime().parse_device(name);
        if (index) d.id = *index;
        return d;
      },
      nb::arg("name"), nb::arg("index") = nb::none(),
      "The device named `name`: 'cpu', 'cuda:1', 'opencl', 'llvm' (= cpu), or a plugin's type "
      "name, with an optional ':index' (or `index`). ValueError for an unknown name, listing the "
      "known ones.");

  nb::class_<DataType>(m, "DataType", "A tensor element type: 'float32', 'int8x4', 'bool', ...")
      .def(
          "__init__",
          [](DataType* self, const std::string& text) {
            new (self) DataType(DataType::parse(text));
          },
          nb::arg("text"))
      .def_ro("code", &DataType::code)
      .def_ro("bits", &DataType::bits)
      .def_ro("lanes", &DataType::lanes)
      .def_prop_ro(
          "itemsize", [](const DataType& t) { return t.bytes(); }, "Bytes per element.")
      .def("__str__", &DataType::str)
      .def("__repr__", [](const DataType& t) { return "kiln.DataType('" + t.str() + "')"; })
      .def("__eq__", [](const DataType& a, const DataType& b) { return a == b; })
      .def("__eq__", [](const DataType& a, const std::string& b) { return a.str() == b; })
      .def("__eq__", [](const DataType&, nb::handle) { return false; })
      .def("__hash__", [](const DataType& t) { return nb::hash(nb::str(t.str().c_str())); });

  m.def(
      "devices",
      [] {
        std::vector<Device> out;
        for (const BackendInfo& backend : runtime().backends()) {
          for (const DeviceInfo& info : backend.devices) out.push_back(info.device);
        }
        return out;
      },
      "Every device the loaded backends offer, backend by backend.");

  m.def(
      "backends",
      [] {
        nb::list out;
        for (const BackendInfo& backend : runtime().backends()) {
          nb::dict entry;
          entry["type_name"] = backend.type_name;
          entry["plugin"] = backend.plugin;
          nb::list devices;
          for (const DeviceInfo& info : backend.devices) {
            nb::dict device;
            device["device"] = nb::cast(info.device);
            device["attributes"] = attribute_dict(info);
            devices.append(device);
          }
          entry["devices"] = devices;
          entry["why_none"] = backend.why_none;
          out.append(entry);
        }
        return out;
      },
      "Every device backend: its type name, plugin, devices with their attributes, and why it "
      "has no device when it has none (e.g. the driver could not be loaded).");

  m.def(
      "plugins",
      [] {
        nb::list out;
        for (const PluginStatus& p : runtime().plugins()) {
          nb::dict entry;
          entry["name"] = p.name;
          entry["version"] = p.version;
          entry["abi"] = p.abi;
          entry["state"] = to_string(p.state);
          entry["reason"] = p.reason;
          entry["manifest"] = p.manifest.string();
          entry["library"] = p.library.string();
          entry["provides"] = p.provides;
          entry["load_ms"] = p.load_ms;
          out.append(entry);
        }
        return out;
      },
      "Every plugin the runtime considered, in search order: name, version, abi, state "
      "('loaded', 'disabled' or 'failed'), the reason when not loaded, manifest, library, what "
      "it provides and its load time in ms.");
}

}  // namespace kiln::python
