// SPDX-License-Identifier: Apache-2.0
// A fake HIP runtime for the rocm plugin's tests on machines without an AMD GPU: a shared
// library exporting the HIP entry points the plugin resolves, backed by host memory. It lets
// the tests drive the plugin's device paths (enumeration, memory, copies, streams, timers,
// module loading, argument packing, launches) end to end. It is NOT a GPU: "kernels" are the
// three example kernels re-implemented here on the host, selected by name and run over the
// launch's grid and block exactly as the HIP kernels index them, so wrong pointers, offsets,
// scalars or extents from the plugin show up as wrong results.
//
// Built as libkiln_fake_amdhip64.so (target kiln_rocm_fake_hip) and selected with the rocm
// plugin option hip_library. Environment: KILN_FAKE_HIP_DEVICES (default 1; 0 makes
// hipGetDeviceCount fail with hipErrorNoDevice), KILN_FAKE_HIP_ARCH (the gcnArchName, default
// gfx90a:sramecc+:xnack-).
#include <hip/hip_runtime_api.h>

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
#include <vector>

struct ihipStream_t {
  int device;
};
struct ihipEvent_t {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
};
struct ihipModuleSymbol_t {
  std::string name;
};
struct ihipModule_t {
  int device;
  uint32_t mach;
  // The functions looked up in this module: freed with it, as a real runtime does.
  std::vector<std::unique_ptr<ihipModuleSymbol_t>> functions;
};

namespace {

// Allocations are deliberately 256 bytes past a 4 KiB boundary: hipMalloc's documented
// alignment, but not more, so the plugin's over-alignment path is exercised.
constexpr size_t kAlignment = 4096;
constexpr size_t kMisalign = 256;

struct State {
  std::mutex mu;
  struct Allocation {
    void* base;   // what aligned_alloc returned
    size_t size;  // what hipMalloc was asked for
  };
  std::map<char*, Allocation> allocations;  // by the pointer handed out
  std::set<ihipStream_t*> streams;
  std::set<ihipModule_t*> modules;
  thread_local static int current;
  // What the tests inspect.
  int launches = 0;
  uint32_t last_mach = 0;
  unsigned last_grid[3] = {0, 0, 0};
  unsigned last_block[3] = {0, 0, 0};
  unsigned last_shared = 0;
};
thread_local int State::current = 0;

State& state() {
  static State s;
  return s;
}

int device_count() {
  const char* env = std::getenv("KILN_FAKE_HIP_DEVICES");
  return env != nullptr ? std::atoi(env) : 1;
}

bool valid_stream(hipStream_t s) {
  if (s == nullptr) return true;
  std::lock_guard<std::mutex> lock(state().mu);
  return state().streams.count(s) != 0;
}

// True when [p, p + n) lies inside one live allocation.
bool device_range(const void* p, size_t n) {
  std::lock_guard<std::mutex> lock(state().mu);
  const auto* c = static_cast<const char*>(p);
  auto it = state().allocations.upper_bound(const_cast<char*>(c));
  if (it == state().allocations.begin()) return false;
  --it;
  const char* start = it->first;
  const size_t size = it->second.size;
  return c >= start && static_cast<size_t>(c - start) <= size && n <= size - (c - start);
}

template <typename T>
T arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const char* hipGetErrorName(hipError_t e) {
  switch (e) {
    case hipSuccess:
      return "hipSuccess";
    case hipErrorInvalidValue:
      return "hipErrorInvalidValue";
    case hipErrorOutOfMemory:
      return "hipErrorOutOfMemory";
    case hipErrorNoDevice:
      return "hipErrorNoDevice";
    case hipErrorInvalidDevice:
      return "hipErrorInvalidDevice";
    case hipErrorInvalidImage:
      return "hipErrorInvalidImage";
    case hipErrorInvalidHandle:
      return "hipErrorInvalidHandle";
    case hipErrorNotFound:
      return "hipErrorNotFound";
    case hipErrorInvalidConfiguration:
      return "hipErrorInvalidConfiguration";
    default:
      return "hipErrorUnknown";
  }
}

__attribute__((visibility("default"))) const char* hipGetErrorString(hipError_t e) {
  return hipGetErrorName(e);
}

__attribute__((visibility("default"))) hipError_t hipRuntimeGetVersion(int* v) {
  if (v == nullptr) return hipErrorInvalidValue;
  *v = 50200001;  // "5.2.1"
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipGetDeviceCount(int* count) {
  if (count == nullptr) return hipErrorInvalidValue;
  *count = device_count();
  return *count > 0 ? hipSuccess : hipErrorNoDevice;
}

__attribute__((visibility("default"))) hipError_t hipGetDeviceProperties(hipDeviceProp_t* p,
                                                                         int id) {
  if (p == nullptr) return hipErrorInvalidValue;
  if (id < 0 || id >= device_count()) return hipErrorInvalidDevice;
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "Kiln fake HIP device %d", id);
  const char* arch = std::getenv("KILN_FAKE_HIP_ARCH");
  std::snprintf(p->gcnArchName, sizeof(p->gcnArchName), "%s",
                arch != nullptr ? arch : "gfx90a:sramecc+:xnack-");
  p->totalGlobalMem = size_t{64} << 30;
  p->sharedMemPerBlock = 65536;
  p->warpSize = 64;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->clockRate = 1700000;
  p->memoryClockRate = 1600000;
  p->memoryBusWidth = 4096;
  p->multiProcessorCount = 104;
  p->l2CacheSize = 8 << 20;
  p->pciDomainID = 0;
  p->pciBusID = 0xc1 + id;
  p->pciDeviceID = 0;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipDeviceGetPCIBusId(char* out, int len, int id) {
  if (out == nullptr || len < 13) return hipErrorInvalidValue;
  if (id < 0 || id >= device_count()) return hipErrorInvalidDevice;
  std::snprintf(out, static_cast<size_t>(len), "0000:%02x:00.0", 0xc1 + id);
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipSetDevice(int id) {
  if (id < 0 || id >= device_count()) return hipErrorInvalidDevice;
  State::current = id;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipMalloc(void** out, size_t size) {
  if (out == nullptr) return hipErrorInvalidValue;
  if (size > (size_t{1} << 36)) return hipErrorOutOfMemory;
  void* base = std::aligned_alloc(kAlignment, ((size + kMisalign) / kAlignment + 2) * kAlignment);
  if (base == nullptr) return hipErrorOutOfMemory;
  char* handed = static_cast<char*>(base) + kMisalign;
  std::lock_guard<std::mutex> lock(state().mu);
  state().allocations[handed] = {base, size};
  *out = handed;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipFree(void* p) {
  if (p == nullptr) return hipSuccess;
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().allocations.find(static_cast<char*>(p));
  if (it == state().allocations.end()) return hipErrorInvalidValue;  // not from hipMalloc
  std::free(it->second.base);
  state().allocations.erase(it);
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipMemcpyAsync(void* dst, const void* src,
                                                                 size_t n, hipMemcpyKind kind,
                                                                 hipStream_t stream) {
  if (!valid_stream(stream)) return hipErrorInvalidHandle;
  if (n == 0) return hipSuccess;
  if (dst == nullptr || src == nullptr) return hipErrorInvalidValue;
  const bool dst_device = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
  const bool src_device = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
  if (kind != hipMemcpyHostToDevice && kind != hipMemcpyDeviceToHost &&
      kind != hipMemcpyDeviceToDevice) {
    return hipErrorInvalidValue;
  }
  if ((dst_device && !device_range(dst, n)) || (src_device && !device_range(src, n))) {
    return hipErrorInvalidValue;
  }
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  if (s < d + n && d < s + n) return hipErrorInvalidValue;  // overlapping: undefined in HIP
  std::memcpy(dst, src, n);
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipStreamCreate(hipStream_t* s) {
  if (s == nullptr) return hipErrorInvalidValue;
  *s = new ihipStream_t{State::current};
  std::lock_guard<std::mutex> lock(state().mu);
  state().streams.insert(*s);
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipStreamDestroy(hipStream_t s) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().streams.erase(s) == 0) return hipErrorInvalidHandle;
  delete s;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipStreamSynchronize(hipStream_t s) {
  return valid_stream(s) ? hipSuccess : hipErrorInvalidHandle;
}

__attribute__((visibility("default"))) hipError_t hipEventCreate(hipEvent_t* e) {
  if (e == nullptr) return hipErrorInvalidValue;
  *e = new ihipEvent_t;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipEventDestroy(hipEvent_t e) {
  delete e;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  if (e == nullptr || !valid_stream(s)) return hipErrorInvalidHandle;
  e->when = std::chrono::steady_clock::now();
  e->recorded = true;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipEventSynchronize(hipEvent_t e) {
  return e != nullptr ? hipSuccess : hipErrorInvalidHandle;
}

__attribute__((visibility("default"))) hipError_t hipEventElapsedTime(float* ms, hipEvent_t a,
                                                                      hipEvent_t b) {
  if (ms == nullptr || a == nullptr || b == nullptr || !a->recorded || !b->recorded) {
    return hipErrorInvalidHandle;
  }
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  // KILN_FAKE_HIP_TIMER=zero: a broken runtime whose events always read 0 ms; =huge: one whose
  // events read 1000 times the time that passed. For the tests of the checks that refuse such
  // a timing.
  if (const char* timer = std::getenv("KILN_FAKE_HIP_TIMER"); timer != nullptr) {
    if (std::string_view(timer) == "zero") *ms = 0;
    if (std::string_view(timer) == "huge") *ms *= 1000;
  }
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipModuleLoadData(hipModule_t* m,
                                                                    const void* image) {
  if (m == nullptr || image == nullptr) return hipErrorInvalidValue;
  // The plugin hands over the raw AMDGPU ELF it chose, never a bundle.
  const auto* b = static_cast<const unsigned char*>(image);
  uint16_t machine = 0;
  uint32_t flags = 0;
  if (std::memcmp(b,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return hipErrorInvalidImage;
  std::memcpy(&machine, b + 18, 2);
  std::memcpy(&flags, b + 48, 4);
  if (machine != 0xe0) return hipErrorInvalidImage;
  *m = new ihipModule_t{State::current, flags & 0xff, {}};
  std::lock_guard<std::mutex> lock(state().mu);
  state().modules.insert(*m);
  state().last_mach = flags & 0xff;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipModuleUnload(hipModule_t m) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().modules.erase(m) == 0) return hipErrorInvalidHandle;
  delete m;
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipModuleGetFunction(hipFunction_t* f,
                                                                       hipModule_t m,
                                                                       const char* name) {
  if (f == nullptr || name == nullptr) return hipErrorInvalidValue;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (state().modules.count(m) == 0) return hipErrorInvalidHandle;
  }
  const std::string n = name;
  if (n != "vector_add" && n != "relu" && n != "matmul") return hipErrorNotFound;
  std::lock_guard<std::mutex> lock(state().mu);
  m->functions.push_back(std::make_unique<ihipModuleSymbol_t>(ihipModuleSymbol_t{n}));
  *f = m->functions.back().get();
  return hipSuccess;
}

__attribute__((visibility("default"))) hipError_t hipModuleLaunchKernel(
    hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
    unsigned shared, hipStream_t stream, void** params, void** extra) {
  if (f == nullptr || params == nullptr || extra != nullptr) return hipErrorInvalidValue;
  if (!valid_stream(stream)) return hipErrorInvalidHandle;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return hipErrorInvalidConfiguration;
  }
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().launches++;
    const unsigned g[3] = {gx, gy, gz};
    const unsigned b[3] = {bx, by, bz};
    std::memcpy(state().last_grid, g, sizeof(g));
    std::memcpy(state().last_block, b, sizeof(b));
    state().last_shared = shared;
  }
  if (f->name == "vector_add") {
    const auto* a = arg<const float*>(params, 0);
    const auto* b = arg<const float*>(params, 1);
    auto* out = arg<float*>(params, 2);
    const float alpha = arg<float>(params, 3);
    const int n = arg<int>(params, 4);
    for (unsigned block = 0; block < gx; ++block) {
      for (unsigned t = 0; t < bx; ++t) {
        const int i = static_cast<int>(block * bx + t);
        if (i < n) out[i] = a[i] + alpha * b[i];
      }
    }
  } else if (f->name == "relu") {
    const auto* in = arg<const float*>(params, 0);
    auto* out = arg<float*>(params, 1);
    const int n = arg<int>(params, 2);
    for (unsigned block = 0; block < gx; ++block) {
      for (unsigned t = 0; t < bx; ++t) {
        const int i = static_cast<int>(block * bx + t);
        if (i < n) out[i] = in[i] < 0.0f ? 0.0f : in[i];
      }
    }
  } else if (f->name == "matmul") {
    const auto* a = arg<const float*>(params, 0);
    const auto* b = arg<const float*>(params, 1);
    auto* c = arg<float*>(params, 2);
    const int m = arg<int>(params, 3);
    const int n = arg<int>(params, 4);
    const int k = arg<int>(params, 5);
    if (bx != 16 || by != 16) return hipSuccess;  // the HIP kernel computes nothing then
    for (unsigned y = 0; y < gy; ++y) {
      for (unsigned x = 0; x < gx; ++x) {
        for (unsigned ty = 0; ty < by; ++ty) {
          for (unsigned tx = 0; tx < bx; ++tx) {
            const int row = static_cast<int>(y * 16 + ty);
            const int col = static_cast<int>(x * 16 + tx);
            if (row >= m || col >= n) continue;
            float sum = 0.0f;
            for (int kk = 0; kk < k; ++kk) sum += a[row * k + kk] * b[kk * n + col];
            c[row * n + col] = sum;
          }
        }
      }
    }
  }
  return hipSuccess;
}

// ---- for the tests ----

// Launches so far; the last launch's grid, block and dynamic shared memory (7 values).
__attribute__((visibility("default"))) int kiln_fake_hip_last_launch(unsigned out[7]) {
  std::lock_guard<std::mutex> lock(state().mu);
  for (int i = 0; i < 3; ++i) {
    out[i] = state().last_grid[i];
    out[3 + i] = state().last_block[i];
  }
  out[6] = state().last_shared;
  return state().launches;
}

// The EF_AMDGPU_MACH value of the last module loaded.
__attribute__((visibility("default"))) uint32_t kiln_fake_hip_last_mach() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_mach;
}

// Live allocations (to check that everything allocated is freed).
__attribute__((visibility("default"))) int kiln_fake_hip_allocations() {
  std::lock_guard<std::mutex> lock(state().mu);
  return static_cast<int>(state().allocations.size());
}

}  // extern "C"
