// SPDX-License-Identifier: Apache-2.0
// Modules (programs from the program cache, with their metadata) and kernels of the opencl
// backend.
#include "modules.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "cl_error.h"
#include "handle_epoch.h"
#include "kiln/sdk/error.hpp"

namespace kiln::opencl {
namespace {

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

}  // namespace

Modules::Modules(DeviceRegistry& devices, ProgramCache& cache, std::string build_options)
    : devices_(devices), cache_(cache), build_options_(std::move(build_options)) {}

Modules::~Modules() {
  // What is left was leaked by the host; each module owns its kernels.
  for (Kernel* k : kernels_) k->module = nullptr;
  HandleEpoch::advance();  // no launch may skip a lookup now
  kernels_.clear();
  modules_.clear();
}

void* Modules::load(int32_t id, const void* data, size_t size, const char* format,
                    const char* metadata_json) {
  DeviceRecord& d = devices_.device(id);
  if (format == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_load: format is NULL");
  sdk::ModuleMetadata metadata =
      sdk::parse_module_metadata(metadata_json != nullptr ? metadata_json : "");
  const std::string build_options = join_build_options(metadata.build_options, build_options_);
  std::shared_ptr<Program> program = cache_.get(d, format, data, size, build_options);
  auto m = std::make_unique<Module>(d, std::move(program), std::move(metadata));
  Module* handle = m.get();
  std::lock_guard<std::mutex> lock(mu_);
  modules_.emplace(handle, std::move(m));
  return handle;
}

Module& Modules::module(void* handle, const char* slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto* m = static_cast<Module*>(handle);
    if (handle != nullptr && modules_.count(m) != 0) return *m;
  }
  devices_.require_devices();  // without devices there are no modules: say why
  throw sdk::Error(KILN_ERROR_VALUE, std::string(slot) + ": " + hex_pointer(handle) +
                                         " is not a live module of the opencl backend");
}

void* Modules::get_kernel(void* handle, const char* name_cstr) {
  Module& m = module(handle, "module_get_kernel");
  if (name_cstr == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "module_get_kernel: name is NULL");
  const std::string name = name_cstr;
  std::lock_guard<std::mutex> lock(m.mu());
  auto& kernels = m.kernels();
  if (auto it = kernels.find(name); it != kernels.end()) return it->second.get();
  const sdk::KernelInfo& info = sdk::find_kernel(m.metadata(), name);
  DeviceRecord& d = m.device();
  cl_int err = CL_SUCCESS;
  KernelHandle created(clCreateKernel(m.program().get(), name.c_str(), &err));
  if (err != CL_SUCCESS || !created) {
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
  kernel->kernel = std::move(created);
  cl_kernel k = kernel->kernel.get();
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
  std::lock_guard<std::mutex> reg(mu_);
  kernels_.insert(out);
  return out;
}

Kernel* Modules::find_kernel(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* k = static_cast<Kernel*>(handle);
  return handle != nullptr && kernels_.count(k) != 0 ? k : nullptr;
}

void Modules::unload(void* handle) noexcept {
  // Released on return, outside the lock: its kernels and its reference to the program.
  std::unique_ptr<Module> owned;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(static_cast<Module*>(handle));
  if (handle == nullptr || it == modules_.end()) return;  // not ours: nothing to release
  owned = std::move(it->second);
  modules_.erase(it);
  for (auto& [name, k] : owned->kernels()) kernels_.erase(k.get());
  HandleEpoch::advance();  // launches look kernels up again
}

}  // namespace kiln::opencl
