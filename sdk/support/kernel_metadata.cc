// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/kernel_metadata.hpp"

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

using Json = nlohmann::json;

constexpr std::array<std::pair<const char*, ArgKind>, 12> kArgKinds = {{
    {"tensor", ArgKind::kTensor},
    {"handle", ArgKind::kTensor},
    {"int8", ArgKind::kInt8},
    {"int16", ArgKind::kInt16},
    {"int32", ArgKind::kInt32},
    {"int64", ArgKind::kInt64},
    {"uint8", ArgKind::kUInt8},
    {"uint16", ArgKind::kUInt16},
    {"uint32", ArgKind::kUInt32},
    {"uint64", ArgKind::kUInt64},
    {"float32", ArgKind::kFloat32},
    {"float64", ArgKind::kFloat64},
}};

constexpr std::array<std::pair<const char*, LaunchTag>, 8> kLaunchTags = {{
    {"blockIdx.x", LaunchTag::kGridX},
    {"blockIdx.y", LaunchTag::kGridY},
    {"blockIdx.z", LaunchTag::kGridZ},
    {"threadIdx.x", LaunchTag::kBlockX},
    {"threadIdx.y", LaunchTag::kBlockY},
    {"threadIdx.z", LaunchTag::kBlockZ},
    {"dynamic_shared_bytes", LaunchTag::kDynamicSharedBytes},
    {"tir.use_dyn_shared_memory", LaunchTag::kDynamicSharedBytes},
}};

[[noreturn]] void bad(const std::string& message) {
  throw sdk::Error(KILN_ERROR_VALUE, "kernel metadata: " + message);
}

std::string joined_names(const auto& table) {
  std::string out;
  for (const auto& [name, value] : table) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

KernelInfo parse_kernel(const std::string& name, const Json& body) {
  const std::string where = "kernels." + name;
  if (!body.is_object()) bad(where + " must be an object");
  KernelInfo info;
  info.name = name;
  for (const auto& [key, value] : body.items()) {
    if (key != "args" && key != "launch") continue;  // other keys belong to one backend
    if (!value.is_array()) bad(where + "." + key + " must be a list of strings");
  }
  if (auto it = body.find("args"); it != body.end()) {
    if (it->size() > kMaxKernelArgs) {
      bad(where + ".args lists " + std::to_string(it->size()) + " arguments; at most " +
          std::to_string(kMaxKernelArgs) + " are supported");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& item = (*it)[i];
      const std::string at = where + ".args[" + std::to_string(i) + "]";
      if (!item.is_string()) bad(at + " must be a string");
      const std::string kind = item.get<std::string>();
      bool found = false;
      for (const auto& [text, value] : kArgKinds) {
        if (kind == text) {
          info.args.push_back(value);
          found = true;
          break;
        }
      }
      if (!found)
        bad(at + ": unknown argument kind '" + kind + "' (known: " + joined_names(kArgKinds) + ")");
    }
  }
  if (auto it = body.find("launch"); it != body.end()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& item = (*it)[i];
      const std::string at = where + ".launch[" + std::to_string(i) + "]";
      if (!item.is_string()) bad(at + " must be a string");
      const std::string tag = item.get<std::string>();
      bool found = false;
      for (const auto& [text, value] : kLaunchTags) {
        if (tag == text) {
          for (LaunchTag seen : info.launch) {
            if (seen == value) bad(at + ": launch tag '" + tag + "' appears twice");
          }
          info.launch.push_back(value);
          found = true;
          break;
        }
      }
      if (!found)
        bad(at + ": unknown launch tag '" + tag + "' (known: " + joined_names(kLaunchTags) + ")");
    }
  }
  return info;
}

}  // namespace

const char* to_string(ArgKind kind) {
  for (const auto& [text, value] : kArgKinds) {
    if (value == kind) return text;
  }
  return "?";
}

size_t arg_size(ArgKind kind) {
  switch (kind) {
    case ArgKind::kInt8:
    case ArgKind::kUInt8:
      return 1;
    case ArgKind::kInt16:
    case ArgKind::kUInt16:
      return 2;
    case ArgKind::kInt32:
    case ArgKind::kUInt32:
    case ArgKind::kFloat32:
      return 4;
    case ArgKind::kTensor:
    case ArgKind::kInt64:
    case ArgKind::kUInt64:
    case ArgKind::kFloat64:
      return 8;
  }
  return 8;
}

const char* to_string(LaunchTag tag) {
  for (const auto& [text, value] : kLaunchTags) {
    if (value == tag) return text;
  }
  return "?";
}

ModuleMetadata parse_module_metadata(std::string_view json) {
  ModuleMetadata out;
  if (json.empty()) return out;
  Json doc = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) bad("not valid JSON");
  if (!doc.is_object()) bad("the document must be a JSON object");
  if (auto it = doc.find("build_options"); it != doc.end()) {
    if (!it->is_string()) bad("build_options must be a string");
    out.build_options = it->get<std::string>();
  }
  if (auto it = doc.find("kernels"); it != doc.end()) {
    if (!it->is_object()) bad("kernels must be an object mapping kernel names to {args, launch}");
    for (const auto& [name, body] : it->items())
      out.kernels.emplace(name, parse_kernel(name, body));
  }
  return out;
}

const KernelInfo& find_kernel(const ModuleMetadata& metadata, const std::string& name) {
  auto it = metadata.kernels.find(name);
  if (it != metadata.kernels.end()) return it->second;
  throw sdk::Error(
      KILN_ERROR_NOT_FOUND,
      "no kernel '" + name + "' in the module's metadata (kernels: " +
          (metadata.kernels.empty() ? std::string("none") : joined_names(metadata.kernels)) + ")");
}

}  // namespace kiln::sdk
