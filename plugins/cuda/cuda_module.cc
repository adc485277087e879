// SPDX-License-Identifier: Apache-2.0
#include "cuda_module.h"

#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "cuda_driver.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/kernel_args.hpp"
#include "nvrtc_compiler.h"
#include "plugin_state.h"

namespace kiln::cuda {
namespace {

// Bytes kept of each JIT log (info and error).
constexpr size_t kJitLogBytes = 64 * 1024;

// Serialises raising a function's dynamic shared memory limit, so the attribute only grows.
std::mutex& shared_limit_mutex() {
  static std::mutex mu;
  return mu;
}

// Text up to the first NUL of a log buffer, without trailing newlines.
std::string log_text(const std::vector<char>& buffer) {
  std::string text(buffer.data(), strnlen(buffer.data(), buffer.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// True when an option sets the target architecture itself.
bool sets_arch(const std::string& option) {
  return option.rfind("-arch", 0) == 0 || option.rfind("--gpu-architecture", 0) == 0;
}

std::string extents(const uint32_t v[3]) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) +
         ")";
}

void raise_shared_limit(CudaKernel& kernel, uint32_t bytes) {
  CudaModule& module = *kernel.module;
  CudaDriver& driver = module.state().driver();
  const DeviceProperties& props = driver.device(module.device_id());
  if (props.max_dynamic_shared_bytes > 0 &&
      bytes > static_cast<uint32_t>(props.max_dynamic_shared_bytes)) {
    sdk::throw_value_error("kernel '" + kernel.info->name + "' asks for " + std::to_string(bytes) +
                           " bytes of dynamic shared memory; " + props.label + " allows at most " +
                           std::to_string(props.max_dynamic_shared_bytes) + " per block");
  }
  std::lock_guard<std::mutex> lock(shared_limit_mutex());
  if (bytes <= kernel.dynamic_shared_limit.load(std::memory_order_acquire)) return;
  driver.check(driver.api().cuFuncSetAttribute(kernel.function,
                                               CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               static_cast<int>(bytes)),
               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = " + std::to_string(bytes) +
                   ") for kernel '" + kernel.info->name + "' on " + props.label);
  kernel.dynamic_shared_limit.store(bytes, std::memory_order_release);
}

}  // namespace

std::unique_ptr<CudaModule> CudaModule::load(PluginState& state, int32_t device_id,
                                             const void* data, size_t size, const char* format,
                                             const char* metadata_json) {
  CudaDriver& driver = state.driver();
  const DeviceProperties& props = driver.device(device_id);
  if (format == nullptr) sdk::throw_value_error("module_load: format is NULL");
  const ImageFormat image_format = parse_image_format(format);
  std::vector<uint8_t> image = prepare_image(data, size, image_format);
  std::unique_ptr<CudaModule> module(new CudaModule(state, device_id));
  module->metadata_ = sdk::parse_module_metadata(metadata_json != nullptr ? metadata_json : "");
  const sdk::ModuleMetadata& metadata = module->metadata_;
  std::string what = std::string("the ") + format + " module on " + props.label;

  // The symbol each kernel is looked up under: its own name, or what NVRTC lowered it to.
  std::map<std::string, std::string> symbols;
  std::set<std::string> ptx_entries;
  bool know_entries = false;
  if (image_format == ImageFormat::kCudaSource) {
    std::vector<std::string> options =
        split_options(state.options().build_options, "plugin option build_options");
    for (std::string& option : split_options(metadata.build_options, "metadata build_options")) {
      options.push_back(std::move(option));
    }
    bool explicit_arch = false;
    for (const std::string& option : options) explicit_arch |= sets_arch(option);
    std::vector<std::string> names;
    for (const auto& [name, info] : metadata.kernels) names.push_back(name);
    const std::string arch = sm_arch(props.cc_major, props.cc_minor);
    const std::string source(reinterpret_cast<const char*>(image.data()));
    // An -arch among the options replaces the device's own.
    NvrtcOutput compiled = nvrtc_compile(state.nvrtc(), source, "cuda_source.cu",
                                         explicit_arch ? std::string() : arch, options, names);
    if (!compiled.log.empty()) {
      sdk::log(KILN_LOG_DEBUG, "NVRTC log for %s:\n%s", what.c_str(), compiled.log.c_str());
    }
    symbols = std::move(compiled.lowered_names);
    if (!compiled.cubin.empty() && !explicit_arch) {
      image = std::move(compiled.cubin);
    } else {
      ptx_entries = ptx_entry_names(compiled.ptx);
      know_entries = true;
      image.assign(compiled.ptx.begin(), compiled.ptx.end());
      image.push_back(0);
    }
    what += " (compiled by NVRTC for " + arch + ")";
  } else if (image_format == ImageFormat::kPtx) {
    ptx_entries = ptx_entry_names(std::string_view(reinterpret_cast<const char*>(image.data())));
    know_entries = true;
    // The metadata is checked against the entries before the driver JIT-compiles anything.
    check_kernels_present(
        metadata, [&](const std::string& name) { return ptx_entries.count(name) != 0; }, what,
        &ptx_entries);
  }

  driver.make_current(device_id);
  module->context_ = driver.context(device_id);
  std::vector<char> info_log(kJitLogBytes, '\0');
  std::vector<char> error_log(kJitLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {info_log.data(), reinterpret_cast<void*>(uintptr_t{kJitLogBytes - 1}),
                    error_log.data(), reinterpret_cast<void*>(uintptr_t{kJitLogBytes - 1})};
  const DriverApi& api = driver.api();
  const CUresult loaded = api.cuModuleLoadDataEx(
      &module->module_, image.data(), sizeof(options) / sizeof(options[0]), options, values);
  if (loaded != CUDA_SUCCESS) {
    module->module_ = nullptr;
    const std::string log = log_text(error_log);
    std::string hint;
    if (loaded == CUDA_ERROR_NO_BINARY_FOR_GPU) {
      hint = "; the image has no code for " + sm_arch(props.cc_major, props.cc_minor) +
             " and no PTX the driver could compile for it";
    } else if (loaded == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      hint = "; the PTX is newer than this driver (CUDA " +
             std::to_string(driver.driver_version() / 1000) + "." +
             std::to_string(driver.driver_version() % 1000 / 10) + ") understands";
    }
    throw sdk::Error(kiln_code_of(loaded),
                     "cannot load " + what +
                         ": cuModuleLoadDataEx failed: " + describe_result(&api, loaded) + hint +
                         (log.empty() ? std::string("; the JIT error log is empty")
                                      : "; JIT error log:\n" + log));
  }
  if (const std::string info = log_text(info_log); !info.empty()) {
    sdk::log(KILN_LOG_DEBUG, "JIT log for %s:\n%s", what.c_str(), info.c_str());
  }

  std::set<std::string> found;
  std::map<std::string, CUfunction> functions;
  for (const auto& [name, info] : metadata.kernels) {
    auto symbol = symbols.find(name);
    const std::string& lookup = symbol != symbols.end() ? symbol->second : name;
    CUfunction function = nullptr;
    const CUresult r = api.cuModuleGetFunction(&function, module->module_, lookup.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) continue;
    driver.check(r, "cuModuleGetFunction('" + lookup + "') in " + what);
    found.insert(name);
    functions.emplace(name, function);
  }
  check_kernels_present(
      metadata, [&](const std::string& name) { return found.count(name) != 0; }, what,
      know_entries ? &ptx_entries : nullptr);
  for (const auto& [name, info] : metadata.kernels) {
    auto kernel = std::make_unique<CudaKernel>();
    kernel->module = module.get();
    kernel->function = functions.at(name);
    kernel->info = &info;
    module->kernels_.emplace(name, std::move(kernel));
  }
  return module;
}

CudaModule::~CudaModule() {
  if (module_ == nullptr) return;
  const DriverApi& api = state_.driver().api();
  CUresult r = api.cuCtxSetCurrent(context_);
  if (r == CUDA_SUCCESS) r = api.cuModuleUnload(module_);
  if (r != CUDA_SUCCESS) {
    sdk::log(KILN_LOG_WARN, "cannot unload a module on cuda:%d: %s", device_id_,
             describe_result(&api, r).c_str());
  }
}

CudaKernel& CudaModule::kernel(const std::string& name) {
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return *it->second;
  sdk::find_kernel(metadata_, name);  // throws NOT_FOUND listing the kernels
  throw sdk::Error(KILN_ERROR_NOT_FOUND, "no kernel '" + name + "' in the module");
}

void launch_kernel(CudaKernel& kernel, const KilnAny* args, int32_t num_args,
                   const uint32_t grid[3], const uint32_t block[3], uint32_t dynamic_shared_bytes,
                   void* stream) {
  CudaModule& module = *kernel.module;
  CudaDriver& driver = module.state().driver();
  const DriverApi& api = driver.api();
  const int32_t device_id = module.device_id();
  // Packed on the stack: the launch path allocates nothing.
  sdk::PackedArgs packed;
  sdk::pack_kernel_args(
      *kernel.info, args, num_args,
      [&kernel, device_id](const DLTensor& tensor, size_t index) {
        return tensor_device_address(tensor, device_id, kernel.info->name, index);
      },
      packed);
  void** params = packed.kernel_params();
  driver.check(api.cuCtxSetCurrent(module.context()), "cuCtxSetCurrent");
  if (dynamic_shared_bytes > kernel.dynamic_shared_limit.load(std::memory_order_acquire)) {
    raise_shared_limit(kernel, dynamic_shared_bytes);
  }
  const CUresult r =
      api.cuLaunchKernel(kernel.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                         dynamic_shared_bytes, static_cast<CUstream>(stream), params, nullptr);
  if (r != CUDA_SUCCESS) {
    driver.fail(r, "cuLaunchKernel of '" + kernel.info->name +
                       "' on cuda:" + std::to_string(device_id) + " with grid " + extents(grid) +
                       ", block " + extents(block) + ", " + std::to_string(dynamic_shared_bytes) +
                       " bytes of dynamic shared memory");
  }
}

}  // namespace kiln::cuda
