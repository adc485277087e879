// SPDX-License-Identifier: Apache-2.0
#include "kiln/device_code.h"

#include <fmt/format.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/device_backend.h"
#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/module_loader.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "kiln/tensor.h"
#include "module/format_loaders.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using sdk::LaunchTag;

// Parses `json` as kernel metadata, naming `where` (a file or artifact) in errors.
sdk::ModuleMetadata parse_metadata(const std::string& json, const std::string& where) {
  try {
    return sdk::parse_module_metadata(json);
  } catch (const sdk::Error& e) {
    throw ValueError(fmt::format("{}: {}", where, e.what()));
  }
}

// One blob and the places it has been loaded into: per device, the backend's module handle
// and the kernels looked up in it. Shared by the blob's kernel functions; unloads everything
// when the last of them goes.
class LoadedCode : public Object {
 public:
  // A kernel loaded on one device. Entries never move and live as long as the blob, so a
  // kernel function may keep a pointer to the last one it used and skip the lookup.
  struct Kernel {
    Device device;
    DeviceBackend* backend;  // held by the blob's PerDevice
    void* handle;
  };

  LoadedCode(DeviceCode code, const DeviceContext& context)
      : code_(std::move(code)), context_(context.retain()) {}
  ~LoadedCode() override {
    for (auto& [device, loaded] : per_device_) loaded.backend->module_unload(loaded.module);
  }

  const DeviceCode& code() const { return code_; }
  const DeviceContext& context() const { return *context_; }

  // Kernel `name` loaded on `device` (loading the code there on first use).
  const Kernel& kernel(Device device, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_pair(device.type, device.id);
    auto it = per_device_.find(key);
    if (it == per_device_.end()) {
      Ref<DeviceBackend> backend = context_->backend(device.type);
      void* module = backend->module_load(device.id, code_.data.data(), code_.data.size(),
                                          code_.format, code_.metadata_json);
      it = per_device_.emplace(key, PerDevice{std::move(backend), module, {}}).first;
    }
    PerDevice& loaded = it->second;
    auto k = loaded.kernels.find(name);
    if (k == loaded.kernels.end()) {
      void* handle = loaded.backend->module_get_kernel(loaded.module, name);
      k = loaded.kernels.emplace(name, Kernel{device, loaded.backend.get(), handle}).first;
    }
    return k->second;
  }

 private:
  struct PerDevice {
    Ref<DeviceBackend> backend;
    void* module;
    std::map<std::string, Kernel> kernels;  // std::map: entries keep their address
  };
  DeviceCode code_;
  std::shared_ptr<const DeviceContext> context_;  // kept alive by the module
  std::mutex mu_;
  std::map<std::pair<int32_t, int32_t>, PerDevice> per_device_;
};

// The device every tensor argument of a call of `kernel` lives on, from the arguments' ABI
// views (no reference counting); throws when they disagree or there is none.
Device device_of_call(const LoadedCode& blob, const sdk::KernelInfo& kernel, const KilnAny* abi,
                      size_t num_kernel_args) {
  std::optional<Device> device;
  size_t first = 0;
  for (size_t i = 0; i < num_kernel_args; ++i) {
    if (abi[i].type_code != KILN_TYPE_TENSOR) continue;
    const Device d = Device::from_dlpack(abi[i].value.v_tensor->device);
    if (!device) {
      device = d;
      first = i;
    } else if (d != *device) {
      throw ValueError(fmt::format(
          "kernel '{}': argument {} is on {} but argument {} is on {}; every tensor of a launch "
          "must be on one device",
          kernel.name, i, blob.context().device_str(d), first, blob.context().device_str(*device)));
    }
  }
  if (!device) {
    throw ValueError(
        fmt::format("kernel '{}' got no tensor argument, so the device to launch it on is unknown",
                    kernel.name));
  }
  return *device;
}

// Throws unless `device` is of the blob's target type.
void check_target(const LoadedCode& blob, const sdk::KernelInfo& kernel, Device device) {
  const auto type_name = blob.context().device_types().name_of(device.type);
  if (!type_name || *type_name != blob.code().target) {
    throw ValueError(fmt::format(
        "kernel '{}' is {} code for '{}' devices, but its tensors are on {}", kernel.name,
        blob.code().format, blob.code().target, blob.context().device_str(device)));
  }
}

// The launch extent `tag` given as argument `index`.
uint32_t launch_extent(const sdk::KernelInfo& kernel, LaunchTag tag, const Any& value,
                       size_t index) {
  if (value.type_code() != KILN_TYPE_INT) {
    throw TypeError(
        fmt::format("kernel '{}' argument {} is the launch extent {} and expects int, "
                    "got {}",
                    kernel.name, index, sdk::to_string(tag), value.type_name()));
  }
  const int64_t v = value.cast<int64_t>();
  const int64_t low = tag == LaunchTag::kDynamicSharedBytes ? 0 : 1;
  if (v < low || v > std::numeric_limits<uint32_t>::max()) {
    throw ValueError(fmt::format(
        "kernel '{}': launch extent {} (argument {}) must be in [{}, {}], "
        "got {}",
        kernel.name, sdk::to_string(tag), index, low, std::numeric_limits<uint32_t>::max(), v));
  }
  return static_cast<uint32_t>(v);
}

// The function that launches `kernel` of `blob`: the kernel's arguments, then its extents.
Function kernel_function(Ref<LoadedCode> blob, sdk::KernelInfo kernel) {
  std::string name = kernel.name;
  // The kernel entry of the last launch: a launch on the same device (the usual case) finds
  // its backend and handle without the blob's lock, map lookups or the target check, which
  // that entry already passed. Shared by copies of the function.
  auto last = std::make_shared<std::atomic<const LoadedCode::Kernel*>>(nullptr);
  return Function::from_packed(
      std::move(name),
      [blob = std::move(blob), kernel = std::move(kernel), last](const Any* args,
                                                                 int32_t num_args) -> Any {
        const size_t n_args = kernel.args.size();
        const size_t n_launch = kernel.launch.size();
        if (num_args < 0 || static_cast<size_t>(num_args) != n_args + n_launch) {
          std::string tags;
          for (LaunchTag t : kernel.launch) {
            tags += tags.empty() ? "" : ", ";
            tags += sdk::to_string(t);
          }
          throw TypeError(fmt::format(
              "kernel '{}' takes {} arguments and then {} launch extents ({}), {} in all; got {}",
              kernel.name, n_args, n_launch, tags.empty() ? "none" : tags, n_args + n_launch,
              num_args));
        }
        constexpr size_t kInline = 16;
        KilnAny inline_args[kInline];
        std::vector<KilnAny> heap_args;
        KilnAny* abi = inline_args;
        if (n_args > kInline) {
          heap_args.resize(n_args);
          abi = heap_args.data();
        }
        for (size_t i = 0; i < n_args; ++i) abi[i] = args[i].to_abi();
        const Device device = device_of_call(*blob, kernel, abi, n_args);
        uint32_t grid[3] = {1, 1, 1};
        uint32_t block[3] = {1, 1, 1};
        uint32_t dynamic_shared = 0;
        for (size_t i = 0; i < n_launch; ++i) {
          const LaunchTag tag = kernel.launch[i];
          const uint32_t v = launch_extent(kernel, tag, args[n_args + i], n_args + i);
          switch (tag) {
            case LaunchTag::kGridX:
              grid[0] = v;
              break;
            case LaunchTag::kGridY:
              grid[1] = v;
              break;
            case LaunchTag::kGridZ:
              grid[2] = v;
              break;
            case LaunchTag::kBlockX:
              block[0] = v;
              break;
            case LaunchTag::kBlockY:
              block[1] = v;
              break;
            case LaunchTag::kBlockZ:
              block[2] = v;
              break;
            case LaunchTag::kDynamicSharedBytes:
              dynamic_shared = v;
              break;
          }
        }
        const LoadedCode::Kernel* k = last->load(std::memory_order_acquire);
        if (k == nullptr || k->device != device) {
          check_target(*blob, kernel, device);
          k = &blob->kernel(device, kernel.name);
          last->store(k, std::memory_order_release);
        }
        k->backend->launch(k->handle, abi, static_cast<int32_t>(n_args), grid, block,
                           dynamic_shared);
        return Any();
      });
}

// The metadata of `code` with "format" and "target" filled in, as a sidecar would carry it.
std::string complete_metadata(const std::string& json, const DeviceCode& code,
                              const std::string& where) {
  Json doc = json.empty() ? Json::object() : Json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    throw ValueError(fmt::format("{}: kernel metadata: not a JSON object", where));
  }
  doc["format"] = code.format;
  doc["target"] = code.target;
  return doc.dump(2) + "\n";
}

std::vector<uint8_t> read_code_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NotFoundError(fmt::format("cannot open {}", path.string()));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

namespace {
// Extension -> (format, target).
const std::map<std::string, std::pair<std::string, std::string>> kFormats = {
    {"cl", {"opencl_c", "opencl"}},  {"clbin", {"opencl_binary", "opencl"}},
    {"spv", {"spirv", "opencl"}},    {"ptx", {"ptx", "cuda"}},
    {"cubin", {"cubin", "cuda"}},    {"fatbin", {"fatbin", "cuda"}},
    {"cu", {"cuda_source", "cuda"}}, {"hsaco", {"hsaco", "rocm"}},
    {"hip", {"hip_source", "rocm"}},
};

std::vector<std::string> device_code_extensions() {
  std::vector<std::string> out;
  for (const auto& [ext, format] : kFormats) out.push_back(ext);
  return out;
}
}  // namespace

std::optional<std::pair<std::string, std::string>> device_code_format_of(
    const std::string& extension) {
  auto it = kFormats.find(extension);
  if (it == kFormats.end()) return std::nullopt;
  return it->second;
}

DeviceCode read_device_code(const fs::path& path) {
  const fs::path sidecar = fs::path(path.string() + ".json");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw NotFoundError(fmt::format("cannot find device code file {}", path.string()));
  }
  if (!fs::is_regular_file(sidecar, ec)) {
    throw NotFoundError(fmt::format(
        "device code {} has no metadata: expected the sidecar file {} (docs/plugin-abi.md §10.2)",
        path.string(), sidecar.string()));
  }
  DeviceCode code;
  code.name = path.filename().string();
  code.data = read_code_file(path);
  const std::vector<uint8_t> meta = read_code_file(sidecar);
  const std::string text(meta.begin(), meta.end());
  Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    throw ValueError(fmt::format("{}: kernel metadata: not a JSON object", sidecar.string()));
  }
  std::string ext = path.extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  if (auto known = device_code_format_of(ext)) std::tie(code.format, code.target) = *known;
  for (const char* key : {"format", "target"}) {
    auto it = doc.find(key);
    if (it == doc.end()) continue;
    if (!it->is_string() || it->get<std::string>().empty()) {
      throw ValueError(fmt::format("{}: '{}' must be a non-empty string", sidecar.string(), key));
    }
    (std::string_view(key) == "format" ? code.format : code.target) = it->get<std::string>();
  }
  if (code.format.empty() || code.target.empty()) {
    throw ValueError(fmt::format(
        "{}: the extension '.{}' names no device code format; give \"format\" and \"target\"",
        sidecar.string(), ext));
  }
  parse_metadata(text, sidecar.string());  // validated before any backend sees it
  code.metadata_json = complete_metadata(text, code, sidecar.string());
  return code;
}

Module make_device_code_module(std::vector<DeviceCode> blobs, const DeviceContext& context) {
  auto obj = make_object<ModuleObj>(kDeviceCodeKind, "");
  std::set<std::string> names;
  for (DeviceCode& code : blobs) {
    if (code.name.empty() || code.name.find('/') != std::string::npos) {
      throw ValueError(fmt::format("device code needs a base file name, got '{}'", code.name));
    }
    const sdk::ModuleMetadata meta = parse_metadata(code.metadata_json, code.name);
    if (meta.kernels.empty()) {
      throw ValueError(fmt::format("{}: the metadata describes no kernels", code.name));
    }
    code.metadata_json = complete_metadata(code.metadata_json, code, code.name);
    obj->artifacts.push_back(Artifact{code.name, "device_blob", code.data});
    obj->artifacts.push_back(
        Artifact{code.name + ".json", "metadata",
                 std::vector<uint8_t>(code.metadata_json.begin(), code.metadata_json.end())});
    auto blob = make_object<LoadedCode>(std::move(code), context);
    for (const auto& [name, kernel] : meta.kernels) {
      if (!names.insert(name).second) {
        throw ValueError(fmt::format("kernel '{}' is defined by two device code blobs ({})", name,
                                     blob->code().name));
      }
      obj->add_function(name, kernel_function(blob, kernel));
    }
  }
  return Module(std::move(obj));
}

namespace {

// Device code files with a known extension or a metadata sidecar (docs/plugin-abi.md §10.4).
class DeviceCodeFormatLoader : public FormatLoader {
 public:
  std::string describe() const override { return "device code"; }
  std::vector<std::string> formats() const override { return device_code_extensions(); }
  bool accepts(const fs::path& path, const std::string& format) const override {
    std::error_code ec;
    return device_code_format_of(format) || fs::is_regular_file(path.string() + ".json", ec);
  }
  Module load(const fs::path& path, ModuleLoadContext& context) const override {
    context.check_path(path.string() + ".json");
    std::vector<DeviceCode> code;
    code.push_back(read_device_code(path));
    Module m = make_device_code_module(std::move(code), context.devices());
    m.get()->set_source(path.string());
    return m;
  }
};

}  // namespace

std::shared_ptr<const FormatLoader> device_code_format_loader() {
  return std::make_shared<DeviceCodeFormatLoader>();
}

}  // namespace kiln
