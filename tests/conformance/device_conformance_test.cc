// The device conformance suite: what every device backend plugin must do, through the same
// C++ wrapper the core uses. Parametrized by device type name; a backend with no devices
// skips with the plugin's reason. Add a backend by adding its test module to kModules.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <thread>

#include "kiln/kiln.h"
#include "pocl_env.h"

namespace kiln {
namespace {

// A module each backend can load from bytes, and a kernel in it computing
// out[i] = a[i] + alpha * b[i] for float32 vectors (launch extents: one thread per element).
// Device kernels also take the length `n` (int32) after alpha; their metadata is read from
// the sidecar file `<path>.json` when `metadata_json` is empty.
struct ConformanceModule {
  std::string device_type;
  std::string path;
  std::string format;
  std::string kernel;
  std::string metadata_json;
  bool takes_length = false;
};

const std::vector<ConformanceModule>& modules() {
  static const std::string dir = KILN_EXAMPLE_KERNEL_DIR;
  static const std::vector<ConformanceModule> m = {
      {"cpu", dir + "/libvector_add.so", "so", "vector_add", "{}", false},
      {"opencl", dir + "/opencl/vector_add.cl", "opencl_c", "vector_add", "", true},
      {"cuda", dir + "/cuda/vector_add.ptx", "ptx", "vector_add", "", true},
      {"rocm", dir + "/rocm/vector_add.hsaco", "hsaco", "vector_add", "", true},
  };
  return m;
}

std::vector<std::string> device_types_under_test() {
  if (const char* env = std::getenv("KILN_CONFORMANCE_DEVICES")) {
    std::vector<std::string> out;
    std::string s = env;
    size_t start = 0;
    while (start < s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) out.push_back(s.substr(start, end - start));
      start = end + 1;
    }
    return out;
  }
  // Default: every device type Kiln ships a backend for; one whose plugin is absent or has no
  // device skips with the reason. (Parameters are generated during static initialisation,
  // too early to ask the runtime which backends loaded.)
  return {"cpu", "opencl", "cuda", "rocm"};
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class DeviceConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "opencl") test::pocl_loaded = true;
    auto code = Runtime::global().device_types().find(GetParam());
    backend_ = code ? Runtime::global().find_backend(*code) : Ref<DeviceBackend>();
    if (!backend_) {
      std::string why = "no plugin serving it is loaded";
      for (const auto& s : Runtime::global().plugins()) {
        for (const auto& p : s.provides) {
          if (p == "device:" + GetParam())
            why = fmt::format("plugin {} is {}: {}", s.name, to_string(s.state), s.reason);
        }
      }
      GTEST_SKIP() << GetParam() << ": " << why;
    }
    std::string why_none;
    if (backend_->device_count(&why_none) == 0) {
      GTEST_SKIP() << GetParam() << " has no devices: " << why_none;
    }
    device_ = Device{backend_->dl_device_type(), 0};
  }

  const ConformanceModule* module() const {
    for (const auto& m : modules()) {
      if (m.device_type == GetParam()) return &m;
    }
    return nullptr;
  }

  Ref<DeviceBackend> backend_;
  Device device_;
};

TEST_P(DeviceConformance, EnumeratesDevicesWithAttributes) {
  std::string why;
  const int32_t count = backend_->device_count(&why);
  EXPECT_GE(count, 1);
  EXPECT_TRUE(why.empty());
  for (int32_t id = 0; id < count; ++id) {
    auto attrs = backend_->attributes(id);
    ASSERT_FALSE(attrs.empty()) << "device " << id << " reports no attributes";
    bool has_name = false;
    for (const auto& [k, v] : attrs) has_name |= (k == "name" && !v.str().empty());
    EXPECT_TRUE(has_name) << "every device reports a non-empty 'name' attribute";
  }
  EXPECT_THROW(backend_->attributes(count), Error) << "an id past the count is an error";
}

TEST_P(DeviceConformance, AllocatesAlignedMemory) {
  for (size_t alignment : {64u, 256u, 4096u}) {
    void* p = backend_->alloc(device_.id, 1 << 20, alignment);
    ASSERT_NE(p, nullptr);
    if (device_.type == kDLCPU) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u);
    }
    backend_->free(device_.id, p);
  }
  EXPECT_THROW(backend_->alloc(backend_->device_count() + 5, 64, 64), Error);
}

TEST_P(DeviceConformance, CopiesBothWaysAndOnDevice) {
  constexpr size_t n = 1 << 16;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 7);
  void* a = backend_->alloc(device_.id, n + 128, 64);
  void* b = backend_->alloc(device_.id, n + 128, 64);
  backend_->copy_to_device(device_.id, src.data(), a, 64, n);
  backend_->copy_on_device(device_.id, a, 64, b, 128, n);
  backend_->copy_to_host(device_.id, b, 128, back.data(), n);
  backend_->synchronize(device_.id);
  EXPECT_EQ(src, back);
  backend_->free(device_.id, a);
  backend_->free(device_.id, b);
}

TEST_P(DeviceConformance, TensorRoundTrip) {
  Tensor t = Tensor::empty({3, 5}, DataType::Float(32), device_);
  std::vector<float> host(15);
  std::iota(host.begin(), host.end(), 1.5f);
  t.copy_from(host.data(), host.size() * sizeof(float));
  Tensor h = t.to_host();
  auto span = h.host_span<float>();
  EXPECT_TRUE(std::equal(span.begin(), span.end(), host.begin()));
  Tensor t2 = t.to(device_);
  std::vector<float> back(15);
  t2.copy_to(back.data(), back.size() * sizeof(float));
  EXPECT_EQ(back, host);
}

TEST_P(DeviceConformance, StreamsOrderWork) {
  if (!backend_->has_streams()) GTEST_SKIP() << "no stream slots: work runs on the default stream";
  void* stream = backend_->stream_create(device_.id);
  std::vector<int32_t> src(1024, 42), back(1024, 0);
  void* p = backend_->alloc(device_.id, 4096, 64);
  backend_->copy_to_device(device_.id, src.data(), p, 0, 4096, stream);
  backend_->copy_to_host(device_.id, p, 0, back.data(), 4096, stream);
  backend_->synchronize(device_.id, stream);
  EXPECT_EQ(src, back);
  backend_->free(device_.id, p);
  backend_->stream_destroy(device_.id, stream);
}

TEST_P(DeviceConformance, TimerMeasuresElapsedTime) {
  if (!backend_->has_timer()) {
    GTEST_SKIP() << "no timer slots: the evaluator falls back to sync + wall clock";
  }
  void* timer = backend_->timer_create(device_.id);
  backend_->timer_start(timer);
  if (device_.type == kDLCPU) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  backend_->timer_stop(timer);
  const int64_t ns = backend_->timer_elapsed_ns(timer);
  EXPECT_GE(ns, 0);
  if (device_.type == kDLCPU) {
    EXPECT_GT(ns, 9'000'000);  // SPEC 1.5: a CPU timer around a 10 ms sleep reads > 9e6 ns
  }
  backend_->timer_destroy(timer);
}

TEST_P(DeviceConformance, LoadsModuleAndLaunchesKernel) {
  const ConformanceModule* m = module();
  if (m == nullptr) GTEST_SKIP() << "no conformance module is registered for " << GetParam();
  if (!backend_->has_modules()) GTEST_SKIP() << "the backend has no module slots";
  std::vector<uint8_t> bytes = read_file(m->path);
  ASSERT_FALSE(bytes.empty()) << "cannot read " << m->path;
  std::string metadata = m->metadata_json;
  if (metadata.empty()) {
    const std::vector<uint8_t> sidecar = read_file(m->path + ".json");
    ASSERT_FALSE(sidecar.empty()) << "cannot read " << m->path << ".json";
    metadata.assign(sidecar.begin(), sidecar.end());
  }
  void* mod = backend_->module_load(device_.id, bytes.data(), bytes.size(), m->format, metadata);
  void* kernel = backend_->module_get_kernel(mod, m->kernel);

  constexpr int64_t n = 10000;
  Tensor a = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor b = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor out = Tensor::empty({n}, DataType::Float(32), device_);
  std::vector<float> ha(n), hb(n), hout(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i) * 0.5f;
    hb[i] = static_cast<float>(n - i);
  }
  a.copy_from(ha.data(), n * 4);
  b.copy_from(hb.data(), n * 4);
  const Any length(n);
  KilnAny args[5] = {Any(a).to_abi(), Any(b).to_abi(), Any(out).to_abi(), Any(2.0).to_abi(),
                     length.to_abi()};
  const uint32_t block[3] = {256, 1, 1};
  const uint32_t grid[3] = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
  backend_->launch(kernel, args, m->takes_length ? 5 : 4, grid, block, 0);
  backend_->synchronize(device_.id);
  out.copy_to(hout.data(), n * 4);
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(hout[i], ha[i] + 2.0f * hb[i]) << "at " << i;

  EXPECT_THROW(backend_->module_get_kernel(mod, "no_such_kernel"), NotFoundError);
  KilnAny bad[1] = {Any(int64_t{3}).to_abi()};
  EXPECT_THROW(backend_->launch(kernel, bad, 1, grid, block, 0), Error);
  backend_->module_unload(mod);
}

TEST_P(DeviceConformance, RejectsGarbageModules) {
  const ConformanceModule* m = module();
  if (m == nullptr || !backend_->has_modules()) GTEST_SKIP() << "no module support to test";
  const std::string garbage = "this is not device code";
  EXPECT_THROW(backend_->module_load(device_.id, garbage.data(), garbage.size(), m->format, "{}"),
               Error);
  EXPECT_THROW(
      backend_->module_load(device_.id, garbage.data(), garbage.size(), "no-such-format", "{}"),
      Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceConformance,
                         ::testing::ValuesIn(device_types_under_test()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace kiln
