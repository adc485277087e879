// SPDX-License-Identifier: Apache-2.0
// A fake CUDA driver for testing the cuda plugin without a GPU (loaded through the plugin's
// driver_library option). It implements exactly the entry points the plugin resolves, under
// the versioned symbols of plugins/cuda/cuda_api_subset.h (checked at the end of this file),
// over host memory, and checks what a real driver
// checks: a current context on the calling thread, pointers inside live allocations (copies and
// kernel arguments included), launch extents, the dynamic shared memory limit a function was
// given. "Device memory" is host memory, so tests can read it. Kernels run on the host: the
// example kernels vector_add, relu and matmul are emulated thread by thread from
// kernelParams, with the grid and block the plugin passes; other kernels do nothing.
//
// kiln_fake_cuda_live() reports live objects, so tests can check that nothing leaks.
// Environment: KILN_FAKE_CUDA_DEVICES (default 1) sets the device count (0 makes cuInit report
// CUDA_ERROR_NO_DEVICE); KILN_FAKE_CUDA_MEMORY the bytes per device (default 1 GiB).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cuda_api_subset.h"

struct CUctx_st {
  int device = 0;
  int retains = 0;
};
struct CUfunc_st {
  CUmodule module = nullptr;
  std::string name;
  int max_dynamic_shared = 48 * 1024;
};
struct CUmod_st {
  CUcontext context = nullptr;
  std::set<std::string> kernels;
  // The functions looked up in this module: freed with it, as the real driver does.
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};
struct CUstream_st {
  CUcontext context = nullptr;
};
struct CUevent_st {
  CUcontext context = nullptr;
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kOptinShared = 227 * 1024;

struct Allocation {
  size_t size;
  int device;
  void* block;  // what malloc returned
};

struct Driver {
  std::mutex mu;
  bool initialised = false;
  int devices = 1;
  size_t memory = size_t{1} << 30;
  std::vector<std::unique_ptr<CUctx_st>> contexts;
  std::vector<size_t> used;
  std::map<uintptr_t, Allocation> allocations;  // start -> allocation
  std::set<CUmodule> modules;
  std::set<CUstream> streams;
  std::set<CUevent> events;
};

Driver& driver() {
  static Driver* d = new Driver;
  return *d;
}

thread_local CUcontext current = nullptr;

CUresult need_context() {
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return driver().initialised ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// True when [p, p + n) lies inside one live allocation of the current device.
bool valid_range(CUdeviceptr p, size_t n) {
  Driver& d = driver();
  auto it = d.allocations.upper_bound(static_cast<uintptr_t>(p));
  if (it == d.allocations.begin()) return false;
  --it;
  const uintptr_t start = it->first;
  return it->second.device == current->device && p >= start && p + n <= start + it->second.size &&
         p + n >= p;
}

bool valid_stream(CUstream s) { return s == nullptr || driver().streams.count(s) != 0; }

template <typename T>
T param(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

struct Extents {
  unsigned gx, gy, gz, bx, by, bz, shared;
};

// The example kernels, thread by thread as the GPU would run them.
CUresult emulate(const std::string& name, void** params, const Extents& e) {
  if (name == "vector_add") {
    const auto a = param<CUdeviceptr>(params, 0);
    const auto b = param<CUdeviceptr>(params, 1);
    const auto out = param<CUdeviceptr>(params, 2);
    const auto alpha = param<float>(params, 3);
    const auto n = param<int>(params, 4);
    if (n > 0) {
      const size_t bytes = static_cast<size_t>(n) * 4;
      if (!valid_range(a, bytes) || !valid_range(b, bytes) || !valid_range(out, bytes)) {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
      }
    }
    for (uint64_t block = 0; block < e.gx; ++block) {
      for (uint64_t t = 0; t < e.bx; ++t) {
        const uint64_t i = block * e.bx + t;
        if (i >= static_cast<uint64_t>(n < 0 ? 0 : n)) continue;
        const float product = alpha * reinterpret_cast<const float*>(b)[i];
        reinterpret_cast<float*>(out)[i] = reinterpret_cast<const float*>(a)[i] + product;
      }
    }
    return CUDA_SUCCESS;
  }
  if (name == "relu") {
    const auto in = param<CUdeviceptr>(params, 0);
    const auto out = param<CUdeviceptr>(params, 1);
    const auto n = param<int>(params, 2);
    if (n > 0 && (!valid_range(in, static_cast<size_t>(n) * 4) ||
                  !valid_range(out, static_cast<size_t>(n) * 4))) {
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    for (uint64_t block = 0; block < e.gx; ++block) {
      for (uint64_t t = 0; t < e.bx; ++t) {
        const uint64_t i = block * e.bx + t;
        if (i >= static_cast<uint64_t>(n < 0 ? 0 : n)) continue;
        const float x = reinterpret_cast<const float*>(in)[i];
        reinterpret_cast<float*>(out)[i] = x < 0.0f ? 0.0f : x;
      }
    }
    return CUDA_SUCCESS;
  }
  if (name == "matmul") {
    const auto a = param<CUdeviceptr>(params, 0);
    const auto b = param<CUdeviceptr>(params, 1);
    const auto c = param<CUdeviceptr>(params, 2);
    const auto m = param<int>(params, 3);
    const auto n = param<int>(params, 4);
    const auto k = param<int>(params, 5);
    const unsigned t = e.bx;
    if (e.by != t || e.shared < 2u * t * t * 4) return CUDA_SUCCESS;  // writes nothing
    if (!valid_range(a, static_cast<size_t>(m) * k * 4) ||
        !valid_range(b, static_cast<size_t>(k) * n * 4) ||
        !valid_range(c, static_cast<size_t>(m) * n * 4)) {
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    const auto* pa = reinterpret_cast<const float*>(a);
    const auto* pb = reinterpret_cast<const float*>(b);
    auto* pc = reinterpret_cast<float*>(c);
    for (uint64_t row = 0; row < uint64_t{e.gy} * t; ++row) {
      for (uint64_t col = 0; col < uint64_t{e.gx} * t; ++col) {
        if (row >= static_cast<uint64_t>(m) || col >= static_cast<uint64_t>(n)) continue;
        float acc = 0.0f;
        for (int kk = 0; kk < k; ++kk) {
          const float product = pa[row * k + kk] * pb[kk * n + col];
          acc = acc + product;
        }
        pc[row * n + col] = acc;
      }
    }
    return CUDA_SUCCESS;
  }
  return CUDA_SUCCESS;
}

// The kernels an image holds: ".entry <name>" in PTX, ".text.<name>" sections in machine code.
std::set<std::string> kernels_of(const void* image) {
  std::set<std::string> names;
  const auto* bytes = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  std::memcpy(&magic, bytes, 4);
  const bool elf = bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
  if (elf || magic == 0xBA55ED50u) {
    size_t size = 0;
    if (elf) {
      uint64_t shoff = 0;
      uint16_t shentsize = 0, shnum = 0;
      std::memcpy(&shoff, bytes + 0x28, 8);
      std::memcpy(&shentsize, bytes + 0x3A, 2);
      std::memcpy(&shnum, bytes + 0x3C, 2);
      size = shoff + size_t{shentsize} * shnum;
    } else {
      uint16_t header = 0;
      uint64_t fat = 0;
      std::memcpy(&header, bytes + 6, 2);
      std::memcpy(&fat, bytes + 8, 8);
      size = header + fat;
    }
    const std::string_view text(reinterpret_cast<const char*>(bytes), size);
    for (size_t pos = text.find(".text."); pos != std::string_view::npos;
         pos = text.find(".text.", pos + 1)) {
      const size_t end = text.find('\0', pos);
      if (end != std::string_view::npos) names.emplace(text.substr(pos + 6, end - pos - 6));
    }
    return names;
  }
  const std::string_view ptx(reinterpret_cast<const char*>(bytes));
  for (size_t pos = ptx.find(".entry "); pos != std::string_view::npos;
       pos = ptx.find(".entry ", pos + 1)) {
    size_t end = pos + 7;
    while (end < ptx.size() && ptx[end] != '(' && ptx[end] != ' ' && ptx[end] != '\n') ++end;
    names.emplace(ptx.substr(pos + 7, end - pos - 7));
  }
  return names;
}

void write_log(unsigned num_options, CUjit_option* options, void** values, CUjit_option buffer,
               CUjit_option size, const std::string& text) {
  char* out = nullptr;
  size_t capacity = 0;
  for (unsigned i = 0; i < num_options; ++i) {
    if (options[i] == buffer) out = static_cast<char*>(values[i]);
    if (options[i] == size) capacity = reinterpret_cast<uintptr_t>(values[i]);
  }
  if (out == nullptr || capacity == 0) return;
  const size_t n = std::min(capacity - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** str) {
  switch (error) {
    case CUDA_SUCCESS:
      *str = "CUDA_SUCCESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_PTX:
      *str = "CUDA_ERROR_INVALID_PTX";
      return CUDA_SUCCESS;
    default:
      *str = nullptr;
      return CUDA_ERROR_INVALID_VALUE;  // the plugin falls back to its own table
  }
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  switch (error) {
    case CUDA_ERROR_INVALID_VALUE:
      *str = "invalid argument";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_PTX:
      *str = "a PTX JIT compilation failed";
      return CUDA_SUCCESS;
    default:
      *str = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.initialised) {
    if (const char* n = std::getenv("KILN_FAKE_CUDA_DEVICES")) d.devices = std::atoi(n);
    if (const char* m = std::getenv("KILN_FAKE_CUDA_MEMORY"))
      d.memory = std::strtoull(m, nullptr, 10);
    for (int i = 0; i < d.devices; ++i) {
      d.contexts.push_back(std::make_unique<CUctx_st>());
      d.contexts.back()->device = i;
    }
    d.used.assign(static_cast<size_t>(d.devices), 0);
    d.initialised = true;
  }
  return d.devices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (!driver().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  *count = driver().devices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!driver().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= driver().devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (dev < 0 || dev >= driver().devices || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "Kiln Fake GPU %d", dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  if (dev < 0 || dev >= driver().devices) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = 132;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = 50 * 1024 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = 1980000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = 2619000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = kMaxThreadsPerBlock;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = kOptinShared;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *value = 228 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *value = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *value = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (dev < 0 || dev >= driver().devices) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = driver().memory;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice dev) {
  if (dev < 0 || dev >= driver().devices || len < 13) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + dev);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= d.devices) return CUDA_ERROR_INVALID_DEVICE;
  ++d.contexts[dev]->retains;
  *ctx = d.contexts[dev].get();
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  if (dev < 0 || dev >= d.devices || d.contexts[dev]->retains == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  --d.contexts[dev]->retains;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != nullptr && ctx->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return need_context(); }

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  size_t& used = d.used[current->device];
  if (bytes > d.memory - used) return CUDA_ERROR_OUT_OF_MEMORY;
  void* block = std::malloc(bytes + 256);
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(block) + 255) & ~uintptr_t{255};
  d.allocations[start] = Allocation{bytes, current->device, block};
  used += bytes;
  *ptr = start;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  if (CUresult r = need_context()) return r;
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.allocations.find(static_cast<uintptr_t>(ptr));
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  d.used[it->second.device] -= it->second.size;
  std::free(it->second.block);
  d.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (!valid_stream(s) || !valid_range(dst, n) || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (!valid_stream(s) || !valid_range(src, n) || dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (!valid_stream(s) || !valid_range(src, n) || !valid_range(dst, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  *stream = new CUstream_st{current};
  driver().streams.insert(*stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  return valid_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventCreate(CUevent* event, unsigned int) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  *event = new CUevent_st{current, false, {}};
  driver().events.insert(*event);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) {
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().events.erase(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete event;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().events.count(event) == 0 || !valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (event->context != current) return CUDA_ERROR_INVALID_CONTEXT;
  event->recorded = true;
  event->at = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent event) {
  std::lock_guard<std::mutex> lock(driver().mu);
  return driver().events.count(event) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent stop) {
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().events.count(start) == 0 || driver().events.count(stop) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!start->recorded || !stop->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(stop->at - start->at).count();
  // KILN_FAKE_CUDA_TIMER=zero: a broken driver whose events always read 0 ms, for the tests of
  // the checks that refuse such a timing.
  if (const char* timer = std::getenv("KILN_FAKE_CUDA_TIMER");
      timer != nullptr && std::string_view(timer) == "zero") {
    *ms = 0;
  }
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int num_options,
                            CUjit_option* options, void** values) {
  if (CUresult r = need_context()) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const bool binary = (bytes[0] == 0x7f && bytes[1] == 'E') || bytes[0] == 0x50;
  if (!binary) {
    const std::string_view ptx(static_cast<const char*>(image));
    std::string error;
    if (ptx.find(".version") == std::string_view::npos) {
      error = "ptxas application ptx input, line 1; fatal   : Parsing error near '" +
              std::string(ptx.substr(0, ptx.find(' '))) + "': syntax error";
    } else if (size_t bad = ptx.find("kiln_not_an_instruction"); bad != std::string_view::npos) {
      error =
          "ptxas application ptx input, line 6; error   : Not a name of any known "
          "instruction: 'kiln_not_an_instruction'";
    }
    if (!error.empty()) {
      write_log(num_options, options, values, CU_JIT_ERROR_LOG_BUFFER,
                CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                error + "\nptxas fatal   : Ptx assembly aborted");
      return CUDA_ERROR_INVALID_PTX;
    }
  }
  write_log(num_options, options, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            "fake JIT: nothing to report");
  std::lock_guard<std::mutex> lock(driver().mu);
  *module = new CUmod_st{current, kernels_of(image), {}};
  driver().modules.insert(*module);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().modules.erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete module;  // and its functions: their handles are invalid from now on
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (driver().modules.count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (module->kernels.count(name) == 0) return CUDA_ERROR_NOT_FOUND;
  module->functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{module, name, 48 * 1024}));
  *function = module->functions.back().get();
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  if (CUresult r = need_context()) return r;
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  if (value < 0 || value > kOptinShared) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(driver().mu);
  function->max_dynamic_shared = value;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  if (CUresult r = need_context()) return r;
  std::lock_guard<std::mutex> lock(driver().mu);
  if (f == nullptr || extra != nullptr || !valid_stream(stream)) return CUDA_ERROR_INVALID_VALUE;
  if (f->module->context != current) return CUDA_ERROR_INVALID_CONTEXT;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      uint64_t{bx} * by * bz > kMaxThreadsPerBlock) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shared > static_cast<unsigned>(f->max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
  return emulate(f->name, params, Extents{gx, gy, gz, bx, by, bz, shared});
}

// Test introspection: how many of `what` ("retains", "allocations", "modules", "streams",
// "events") are live; -1 for an unknown name.
long kiln_fake_cuda_live(const char* what) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mu);
  const std::string_view w(what);
  if (w == "retains") {
    long n = 0;
    for (const auto& c : d.contexts) n += c->retains;
    return n;
  }
  if (w == "allocations") return static_cast<long>(d.allocations.size());
  if (w == "modules") return static_cast<long>(d.modules.size());
  if (w == "streams") return static_cast<long>(d.streams.size());
  if (w == "events") return static_cast<long>(d.events.size());
  return -1;
}

}  // extern "C"

// Every entry point of the subset is defined here, under its versioned symbol and with its
// signature (a missing or mistyped one fails the build rather than DriverApi::open).
#define KILN_FAKE_CUDA_CHECK(name, symbol, since, result, parameters)      \
  static_assert(std::is_same_v<decltype(&::symbol), result(*) parameters>, \
                #symbol " differs from cuda_api_subset.h");
KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_FAKE_CUDA_CHECK)
#undef KILN_FAKE_CUDA_CHECK
