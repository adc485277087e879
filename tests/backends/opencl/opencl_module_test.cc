// SPDX-License-Identifier: Apache-2.0
// Device code on the opencl backend, through the backend slots the host uses: building the
// three formats, launching, the program caches and every error path a user can hit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "kiln/kiln.h"
#include "opencl_test_util.h"
#include "raw_opencl.h"
#include "test_util.h"

namespace kiln::opencl_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A test program with a kernel whose trailing __local parameter is sized by the launch's
// dynamic_shared_bytes: each work-group writes the sum of its slice of `in`.
const char* const kGroupSumSource = R"(
__kernel void group_sum(__global const float* in, __global float* out, const int n,
                        __local float* scratch) {
  const size_t lid = get_local_id(0);
  const size_t gid = get_global_id(0);
  scratch[lid] = gid < (size_t)n ? in[gid] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float s = 0.0f;
    for (size_t i = 0; i < get_local_size(0); ++i) s += scratch[i];
    out[get_group_id(0)] = s;
  }
}
__kernel void fill(__global float* out, const float value, const long n) {
  const size_t i = get_global_id(0);
  if (i < (size_t)n) out[i] = value * SCALE;
}
)";
const char* const kGroupSumMetadata = R"({
  "build_options": "-DSCALE=3",
  "kernels": {
    "group_sum": {"args": ["tensor", "tensor", "int32"],
                  "launch": ["blockIdx.x", "threadIdx.x", "dynamic_shared_bytes"]},
    "fill": {"args": ["tensor", "float32", "int64"], "launch": ["blockIdx.x", "threadIdx.x"]},
    "not_in_the_program": {"args": [], "launch": []}
  }
})";

class OpenclModule : public OpenclTest {
 protected:
  void SetUp() override {
    OpenclTest::SetUp();
    if (IsSkipped()) return;
    vector_add_ = example("vector_add.cl");
  }
  void* load(const std::string& source, const std::string& metadata,
             const std::string& format = "opencl_c") {
    return backend_->module_load(0, source.data(), source.size(), format, metadata);
  }
  // Launches vector_add(a, b, out, alpha, n) with one work-item per element.
  void vector_add(void* kernel, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                  int64_t n, void* stream = nullptr) {
    const Any ta(a), tb(b), tout(out), s(alpha), len(n);
    const KilnAny args[5] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), s.to_abi(), len.to_abi()};
    const uint32_t grid[3] = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
    const uint32_t block[3] = {256, 1, 1};
    backend_->launch(kernel, args, 5, grid, block, 0, stream);
  }
  Example vector_add_;
};

TEST_F(OpenclModule, BuildsAndLaunchesVectorAddFromTheExample) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  EXPECT_EQ(backend_->module_get_kernel(mod, "vector_add"), k) << "looked up once per module";
  constexpr int64_t n = 10007;  // not a multiple of the block: the kernel checks n
  std::vector<float> ha(n), hb(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = 0.25f * static_cast<float>(i);
    hb[i] = static_cast<float>(n - i) - 0.5f;
  }
  Tensor a = upload(ha), b = upload(hb), out = upload(std::vector<float>(n + 1, -7.0f));
  vector_add(k, a, b, out, 1.5, n);
  backend_->synchronize(0);
  const std::vector<float> got = download(out);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ha[i] + 1.5f * hb[i]) << "at " << i;
  EXPECT_EQ(got[n], -7.0f) << "nothing is written past n";
  backend_->module_unload(mod);
  EXPECT_THROW(vector_add(k, a, b, out, 1.0, n), ValueError) << "kernels die with their module";
}

TEST_F(OpenclModule, SecondLoadIsAMemoryCacheHit) {
  void* first = load(vector_add_.source, vector_add_.metadata);
  LogCapture log;
  void* second = load(vector_add_.source, vector_add_.metadata);
  const std::string text = log.finish();
  EXPECT_THAT(text, HasSubstr("program cache: memory hit for OpenCL C source"));
  EXPECT_THAT(text, Not(HasSubstr("program cache: built")));
  // Each load is its own module with its own kernels, sharing the program.
  EXPECT_NE(first, second);
  EXPECT_NE(backend_->module_get_kernel(first, "vector_add"),
            backend_->module_get_kernel(second, "vector_add"));
  backend_->module_unload(first);
  // The second module still works after the first is gone.
  Tensor a = upload({1, 2, 3}), b = upload({4, 5, 6}), out = upload({0, 0, 0});
  vector_add(backend_->module_get_kernel(second, "vector_add"), a, b, out, 2.0, 3);
  backend_->synchronize(0);
  EXPECT_EQ(download(out), (std::vector<float>{9, 12, 15}));
  backend_->module_unload(second);
}

// The number of program files in the disk cache folder.
size_t cache_files(const fs::path& dir) {
  size_t n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".clbin";
  return n;
}

// Loads vector_add in a fresh Runtime (a new plugin instance) and returns what was logged.
std::string load_in_new_runtime(const Example& ex, bool check_result = true) {
  LogCapture log;
  {
    Runtime rt;
    Ref<DeviceBackend> b = rt.backend(kDLOpenCL);
    void* mod = b->module_load(0, ex.source.data(), ex.source.size(), "opencl_c", ex.metadata);
    void* k = b->module_get_kernel(mod, "vector_add");
    if (check_result) {
      const Device dev{kDLOpenCL, 0};
      Tensor a = Tensor::empty({4}, DataType::Float(32), dev, rt);
      Tensor out = Tensor::empty({4}, DataType::Float(32), dev, rt);
      const std::vector<float> ones(4, 1.0f);
      a.copy_from(ones.data(), 16);
      const Any ta(a), tout(out), s(3.0), len(int64_t{4});
      const KilnAny args[5] = {ta.to_abi(), ta.to_abi(), tout.to_abi(), s.to_abi(), len.to_abi()};
      const uint32_t one[3] = {1, 1, 1}, block[3] = {4, 1, 1};
      b->launch(k, args, 5, one, block, 0);
      std::vector<float> got(4);
      out.copy_to(got.data(), 16);
      EXPECT_EQ(got, std::vector<float>(4, 4.0f));
    }
    b->module_unload(mod);
  }
  return log.finish();
}

TEST_F(OpenclModule, DiskCacheSurvivesANewPluginInstanceAndIgnoresCorruptFiles) {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";  // created by the plugin
  ScopedEnv env("KILN_OPENCL_CACHE_DIR", cache.string());

  std::string log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("program cache: built OpenCL C source"));
  EXPECT_THAT(log, HasSubstr("program cache: stored"));
  ASSERT_EQ(cache_files(cache), 1u);

  // A new Runtime negotiates a new plugin instance: its memory cache is empty, the disk one not.
  log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("program cache: disk hit"));
  EXPECT_THAT(log, Not(HasSubstr("program cache: built")));

  // Corrupt the file: it is ignored with a warning, the program is rebuilt and stored again.
  const fs::path file = fs::directory_iterator(cache)->path();
  std::string bytes = read_text(file);
  bytes[bytes.size() / 2] ^= 0x5a;
  write_text(file, bytes);
  log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("[warning] opencl: program cache: ignoring corrupt cache file"));
  EXPECT_THAT(log, HasSubstr("checksum mismatch"));
  EXPECT_THAT(log, HasSubstr("program cache: built"));
  log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("program cache: disk hit")) << "the rewritten file is valid";

  // Garbage of any size is ignored too.
  write_text(file, "garbage");
  log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("ignoring corrupt cache file"));
  EXPECT_THAT(log, HasSubstr("bad magic number"));
  EXPECT_EQ(cache_files(cache), 1u);
}

TEST_F(OpenclModule, DiskCacheSurvivesANewProcess) {
  const fs::path kiln = fs::path(KILN_BUILD_DIR) / "bin" / "kiln";
  ASSERT_TRUE(fs::exists(kiln)) << kiln << " is missing: build the kiln_tool target";
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  // `kiln run` of the OpenCL vector_add run config in a child process fills the cache...
  std::string output;
  const int rc = run_command(
      "env KILN_OPENCL_CACHE_DIR=" + shell_quote(cache.string()) +
          " KILN_EXAMPLES=" + shell_quote(std::string(KILN_EXAMPLE_KERNEL_DIR)) + " " +
          shell_quote(kiln.string()) + " run " +
          shell_quote(std::string(KILN_SOURCE_DIR) + "/configs/runs/opencl_vector_add.yaml"),
      &output);
  ASSERT_EQ(rc, 0) << output;
  ASSERT_EQ(cache_files(cache), 1u) << output;
  // ... and this process builds nothing.
  ScopedEnv env("KILN_OPENCL_CACHE_DIR", cache.string());
  const std::string log = load_in_new_runtime(vector_add_);
  EXPECT_THAT(log, HasSubstr("program cache: disk hit"));
  EXPECT_THAT(log, Not(HasSubstr("program cache: built")));
}

// A program whose source includes a header: the same source text and build options under the
// same header name, but a header rewritten between loads (in one plugin instance, and across
// instances sharing a disk cache). The cache key holds the source's bytes only, so such a
// program is never cached: each load gives the header's current value, never an old program.
const char* const kIncludingSource =
    "#include \"value.h\"\n"
    "__kernel void fill_value(__global float* out) { out[get_global_id(0)] = VALUE; }\n";

// Loads `source` on `backend` with `options` and returns what its fill_value writes.
float included_value(DeviceBackend& backend, Runtime& runtime, const std::string& options,
                     const std::string& source = kIncludingSource) {
  const std::string metadata = R"({"build_options": ")" + options +
                               R"(", "kernels": {"fill_value": {"args": ["tensor"], )"
                               R"("launch": ["blockIdx.x", "threadIdx.x"]}}})";
  void* mod = backend.module_load(0, source.data(), source.size(), "opencl_c", metadata);
  void* k = backend.module_get_kernel(mod, "fill_value");
  Tensor out = Tensor::empty({4}, DataType::Float(32), Device{kDLOpenCL, 0}, runtime);
  const Any tout(out);
  const KilnAny args[1] = {tout.to_abi()};
  const uint32_t one[3] = {1, 1, 1}, block[3] = {4, 1, 1};
  backend.launch(k, args, 1, one, block, 0);
  backend.synchronize(0);
  std::vector<float> got(4);
  out.copy_to(got.data(), 16);
  backend.module_unload(mod);
  return got[0];
}

TEST_F(OpenclModule, ASourceThatIncludesAHeaderRunsTheHeaderItIsLoadedWith) {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  ScopedEnv env("KILN_OPENCL_CACHE_DIR", cache.string());
  const std::string options = "-I " + dir.path().string();
  // One plugin instance (the global runtime's): its memory cache.
  write_text(dir.path() / "value.h", "#define VALUE 1.0f\n");
  EXPECT_EQ(included_value(*backend_, Runtime::global(), options), 1.0f);
  write_text(dir.path() / "value.h", "#define VALUE 2.0f\n");
  LogCapture log;
  EXPECT_EQ(included_value(*backend_, Runtime::global(), options), 2.0f)
      << "the rewritten header, not the program built with the first one";
  EXPECT_THAT(log.finish(), HasSubstr("not cached: it includes other files"));
  // New plugin instances with a disk cache folder: nothing is stored for such a program.
  for (const float value : {3.0f, 4.0f}) {
    write_text(dir.path() / "value.h", "#define VALUE " + std::to_string(value) + "f\n");
    Runtime rt;
    std::string why;
    Ref<DeviceBackend> b = opencl_backend(rt, &why);
    ASSERT_TRUE(b) << why;
    EXPECT_EQ(included_value(*b, rt, options), value);
  }
  EXPECT_EQ(cache_files(cache), 0u);
  // A directive written with blanks counts as well. (-include and -imacros, which read a file
  // the source does not name, are not cached either; PoCL 3.1 crashes on -include, so they are
  // not run here.)
  const std::string spaced =
      "  #  include \"value.h\"\n"
      "__kernel void fill_value(__global float* out) "
      "{ out[get_global_id(0)] = VALUE; }\n";
  for (const float value : {5.0f, 6.0f}) {
    write_text(dir.path() / "value.h", "#define VALUE " + std::to_string(value) + "f\n");
    EXPECT_EQ(included_value(*backend_, Runtime::global(), options, spaced), value);
  }
}

TEST_F(OpenclModule, CompileErrorsCarryTheBuildLog) {
  const std::string bad =
      "__kernel void broken(__global float* x) { x[0] = undefined_function_xyz(1.0f); }";
  try {
    load(bad, R"({"kernels": {"broken": {"args": ["tensor"]}}})");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("building OpenCL C source"));
    EXPECT_THAT(what, HasSubstr("CL_BUILD_PROGRAM_FAILURE"));
    EXPECT_THAT(what, HasSubstr("build log:"));
    EXPECT_THAT(what, HasSubstr("undefined_function_xyz"));
    EXPECT_THAT(what, HasSubstr("undeclared")) << "the compiler's diagnosis reaches the user";
  }
  // Bad build options are the options' fault, named in the error.
  try {
    load(vector_add_.source, R"({"build_options": "-no-such-option-xyz"})");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("-no-such-option-xyz"));
  }
}

TEST_F(OpenclModule, ChecksArgumentsAgainstTheMetadata) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  Tensor a = upload({1, 2}), b = upload({3, 4}), out = upload({0, 0});
  const Any ta(a), tb(b), tout(out), alpha(1.0), n(int64_t{2});
  const uint32_t one[3] = {1, 1, 1}, block[3] = {2, 1, 1};
  {
    const KilnAny args[4] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi()};
    try {
      backend_->launch(k, args, 4, one, block, 0);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("kernel 'vector_add' takes 5 arguments, got 4"));
    }
  }
  {
    const KilnAny args[5] = {ta.to_abi(), alpha.to_abi(), tout.to_abi(), alpha.to_abi(),
                             n.to_abi()};
    try {
      backend_->launch(k, args, 5, one, block, 0);
      FAIL() << "expected TypeError";
    } catch (const TypeError& e) {
      EXPECT_THAT(e.what(), HasSubstr("kernel 'vector_add' argument 1 expects tensor, got float"));
    }
  }
  {
    const Any huge(int64_t{1} << 40);
    const KilnAny args[5] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi(),
                             huge.to_abi()};
    EXPECT_THROW(backend_->launch(k, args, 5, one, block, 0), ValueError) << "n is int32";
  }
  {
    // A host tensor is not device memory.
    Tensor host = Tensor::empty({2}, DataType::Float(32));
    const Any th(host);
    const KilnAny args[5] = {th.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi(), n.to_abi()};
    try {
      backend_->launch(k, args, 5, one, block, 0);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("argument 0 is a tensor on device type 1"));
    }
  }
  {
    // A tensor whose data the backend never allocated.
    DLTensor fake = *a.dl();
    int not_a_buffer = 0;
    fake.data = &not_a_buffer;
    KilnAny args[5] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi(), n.to_abi()};
    args[0].value.v_tensor = &fake;
    try {
      backend_->launch(k, args, 5, one, block, 0);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is not a live buffer of opencl:0"));
    }
  }
  {
    // Launch extents: zero, and a block past the kernel's work-group limit.
    const KilnAny args[5] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi(), n.to_abi()};
    const uint32_t zero[3] = {0, 1, 1};
    EXPECT_THROW(backend_->launch(k, args, 5, zero, block, 0), ValueError);
    const uint32_t wide[3] = {1u << 20, 1, 1};
    try {
      backend_->launch(k, args, 5, one, wide, 0);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("exceeds the maximum work-item sizes"));
    }
    EXPECT_THROW(backend_->launch(k, args, 5, one, block, 64), ValueError)
        << "dynamic_shared_bytes without a tag for it";
  }
  backend_->synchronize(0);
  backend_->module_unload(mod);
}

TEST_F(OpenclModule, MissingKernelsAreNotFound) {
  void* mod = load(kGroupSumSource, kGroupSumMetadata);
  try {
    backend_->module_get_kernel(mod, "nope");
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no kernel 'nope' in the module's metadata (kernels: fill, "
                                    "group_sum, not_in_the_program)"));
  }
  try {
    backend_->module_get_kernel(mod, "not_in_the_program");
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("defines no such kernel"));
    EXPECT_THAT(e.what(), HasSubstr("group_sum"));
  }
  backend_->module_unload(mod);
  // The metadata must agree with the kernel's parameter count.
  void* m2 =
      load(vector_add_.source,
           R"({"kernels": {"vector_add": {"args": ["tensor", "tensor", "tensor", "float32"]}}})");
  try {
    backend_->module_get_kernel(m2, "vector_add");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel 'vector_add' has 5 parameters in the program, but its "
                                    "metadata lists 4 arguments"));
  }
  backend_->module_unload(m2);
}

TEST_F(OpenclModule, DynamicLocalMemoryAndMetadataBuildOptions) {
  void* mod = load(kGroupSumSource, kGroupSumMetadata);
  void* sum = backend_->module_get_kernel(mod, "group_sum");
  constexpr int64_t n = 1000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7);
  Tensor in = upload(host), out = upload(std::vector<float>(16, -1.0f));
  const Any tin(in), tout(out), len(n);
  const KilnAny args[3] = {tin.to_abi(), tout.to_abi(), len.to_abi()};
  const uint32_t grid[3] = {16, 1, 1}, block[3] = {64, 1, 1};
  backend_->launch(sum, args, 3, grid, block, 64 * sizeof(float));
  backend_->synchronize(0);
  const std::vector<float> got = download(out);
  for (int64_t g = 0; g < 16; ++g) {
    float expected = 0;
    for (int64_t i = g * 64; i < std::min<int64_t>(n, (g + 1) * 64); ++i) expected += host[i];
    EXPECT_EQ(got[g], expected) << "group " << g;
  }
  EXPECT_THROW(backend_->launch(sum, args, 3, grid, block, 0), ValueError)
      << "the __local parameter needs bytes";

  // "build_options": "-DSCALE=3" reached the compiler; int64 and float32 scalars are packed.
  void* fill = backend_->module_get_kernel(mod, "fill");
  const Any value(2.5), count(int64_t{16});
  const KilnAny fill_args[3] = {tout.to_abi(), value.to_abi(), count.to_abi()};
  const uint32_t one[3] = {1, 1, 1}, sixteen[3] = {16, 1, 1};
  backend_->launch(fill, fill_args, 3, one, sixteen, 0);
  backend_->synchronize(0);
  EXPECT_EQ(download(out), std::vector<float>(16, 7.5f));
  backend_->module_unload(mod);
}

TEST_F(OpenclModule, PluginBuildOptionsComeAfterTheMetadatas) {
  TempDir dir;
  Runtime rt(options_for(opencl_plugin_set(dir.path(), "{build_options: \"-DSCALE=5\"}")));
  Ref<DeviceBackend> b = rt.backend(kDLOpenCL);
  // The metadata says -DSCALE=3; the plugin's -DSCALE=5 comes later on the command line
  // and wins (the compiler warns about the redefinition).
  const std::string source = kGroupSumSource;
  void* mod = b->module_load(0, source.data(), source.size(), "opencl_c", kGroupSumMetadata);
  void* fill = b->module_get_kernel(mod, "fill");
  Tensor out = Tensor::empty({4}, DataType::Float(32), device_, rt);
  const Any tout(out), value(1.0), count(int64_t{4});
  const KilnAny args[3] = {tout.to_abi(), value.to_abi(), count.to_abi()};
  const uint32_t one[3] = {1, 1, 1}, four[3] = {4, 1, 1};
  b->launch(fill, args, 3, one, four, 0);
  std::vector<float> got(4);
  out.copy_to(got.data(), 16);
  EXPECT_EQ(got, std::vector<float>(4, 5.0f));
  b->module_unload(mod);
}

TEST_F(OpenclModule, TensorsWithAByteOffsetBecomeSubBuffers) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  const auto attrs = backend_->attributes(0);
  int64_t align = 0;
  for (const auto& [key, v] : attrs) {
    if (key == "base_address_align_bytes") align = v.cast<int64_t>();
  }
  ASSERT_GT(align, 0);
  const int64_t skip = align / 4;  // floats before the aligned view
  constexpr int64_t n = 300;
  std::vector<float> ha(n + skip), hb(n + skip);
  for (int64_t i = 0; i < n + skip; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = 1.0f;
  }
  Tensor a = upload(ha), b = upload(hb), out = upload(std::vector<float>(n + skip, 0.0f));
  // Views of the last n elements of each buffer.
  int64_t shape[1] = {n};
  DLTensor va = *a.dl(), vb = *b.dl(), vout = *out.dl();
  for (DLTensor* v : {&va, &vb, &vout}) {
    v->shape = shape;
    v->byte_offset = static_cast<uint64_t>(align);
  }
  const Any s(10.0), len(n);
  KilnAny args[5] = {{}, {}, {}, s.to_abi(), len.to_abi()};
  args[0].type_code = args[1].type_code = args[2].type_code = KILN_TYPE_TENSOR;
  args[0].value.v_tensor = &va;
  args[1].value.v_tensor = &vb;
  args[2].value.v_tensor = &vout;
  const uint32_t grid[3] = {3, 1, 1}, block[3] = {100, 1, 1};
  backend_->launch(k, args, 5, grid, block, 0);
  backend_->synchronize(0);
  const std::vector<float> got = download(out);
  for (int64_t i = 0; i < skip; ++i) ASSERT_EQ(got[i], 0.0f) << "before the view, at " << i;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[skip + i], ha[skip + i] + 10.0f) << "at " << i;

  // An offset OpenCL cannot make a sub-buffer at is refused with the reason.
  vout.byte_offset = 4;
  try {
    backend_->launch(k, args, 5, grid, block, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("byte_offset 4 is not a multiple of " + std::to_string(align)));
  }
  // A view past the end of its buffer is refused.
  vout.byte_offset = static_cast<uint64_t>(align) * 4;
  EXPECT_THROW(backend_->launch(k, args, 5, grid, block, 0), ValueError);
  backend_->module_unload(mod);
}

TEST_F(OpenclModule, LoadsProgramBinariesAndRejectsBadOnes) {
  RawOpenCL raw;
  ASSERT_TRUE(raw.loaded());
  const std::vector<unsigned char> binary =
      raw.build_binary(raw.devices().at(0), vector_add_.source);
  ASSERT_FALSE(binary.empty());
  const std::string bytes(binary.begin(), binary.end());
  void* mod = load(bytes, vector_add_.metadata, "opencl_binary");
  Tensor a = upload({1, 2, 3}), b = upload({1, 1, 1}), out = upload({0, 0, 0});
  vector_add(backend_->module_get_kernel(mod, "vector_add"), a, b, out, -1.0, 3);
  backend_->synchronize(0);
  EXPECT_EQ(download(out), (std::vector<float>{0, 1, 2}));
  backend_->module_unload(mod);

  try {
    load("definitely not a program binary", vector_add_.metadata, "opencl_binary");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("OpenCL program binary"));
  }
}

TEST_F(OpenclModule, RejectsUnknownFormatsEmptyCodeAndBadMetadata) {
  try {
    load(vector_add_.source, vector_add_.metadata, "ptx");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot load format 'ptx' (it loads opencl_c, opencl_binary "
                                    "and spirv)"));
  }
  EXPECT_THROW(load("", vector_add_.metadata), ValueError);
  try {
    load(vector_add_.source, R"({"kernels": {"vector_add": {"args": ["tensor", "quaternion"]}}})");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown argument kind 'quaternion'"));
  }
  EXPECT_THROW(load(vector_add_.source, "{not json"), ValueError);
}

TEST_F(OpenclModule, SpirvNeedsADeviceThatTakesIl) {
  try {
    load("not spir-v at all", "{}", "spirv");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a SPIR-V module"));
  }
  bool has_il = false;
  for (const auto& [key, v] : backend_->attributes(0)) has_il |= key == "il_version";
  if (has_il) GTEST_SKIP() << "device 0 takes IL programs: the refusal cannot be shown here";
  // A SPIR-V header (magic, version 1.0, generator, bound, schema) on a device without IL.
  const uint32_t words[5] = {0x07230203u, 0x00010000u, 0u, 1u, 0u};
  const std::string header(reinterpret_cast<const char*>(words), sizeof(words));
  try {
    load(header, "{}", "spirv");
    FAIL() << "expected UnimplementedError";
  } catch (const UnimplementedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("reports no IL version"));
    EXPECT_THAT(e.what(), HasSubstr("format opencl_c"));
  }
}

TEST_F(OpenclModule, ConcurrentLaunchesOfOneKernelKeepTheirArguments) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  constexpr int kThreads = 4;
  constexpr int64_t n = 512;
  std::vector<Tensor> outs;
  Tensor a = upload(std::vector<float>(n, 1.0f)), b = upload(std::vector<float>(n, 1.0f));
  for (int t = 0; t < kThreads; ++t) outs.push_back(upload(std::vector<float>(n, 0.0f)));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread has its own stream; clSetKernelArg + enqueue are serialised per kernel.
      void* stream = backend_->stream_create(0);
      for (int i = 0; i < 50; ++i) vector_add(k, a, b, outs[t], t, n, stream);
      backend_->synchronize(0, stream);
      backend_->stream_destroy(0, stream);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(download(outs[t]), std::vector<float>(n, 1.0f + static_cast<float>(t)))
        << "thread " << t;
  }
  backend_->module_unload(mod);
}

// The launch skips clSetKernelArg for values the cl_kernel already holds and the registry
// lookups for the kernel, stream and buffers it validated last; each of these must still see
// every change.
TEST_F(OpenclModule, RepeatedLaunchesSeeEveryChangedArgument) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  constexpr int64_t n = 300;
  Tensor a = upload(std::vector<float>(n, 1.0f)), b = upload(std::vector<float>(n, 2.0f));
  Tensor out1 = upload(std::vector<float>(n, 0.0f)), out2 = upload(std::vector<float>(n, 0.0f));
  vector_add(k, a, b, out1, 1.0, n);
  vector_add(k, a, b, out1, 1.0, n);  // all arguments as set
  backend_->synchronize(0);
  EXPECT_EQ(download(out1), std::vector<float>(n, 3.0f));
  vector_add(k, a, b, out1, 3.0, n);  // a scalar changes
  backend_->synchronize(0);
  EXPECT_EQ(download(out1), std::vector<float>(n, 7.0f));
  vector_add(k, b, a, out2, 3.0, n);  // every tensor changes
  backend_->synchronize(0);
  EXPECT_EQ(download(out2), std::vector<float>(n, 5.0f));
  EXPECT_EQ(download(out1), std::vector<float>(n, 7.0f)) << "out1 no longer written";
  vector_add(k, b, a, out2, 3.0, 10);  // n changes
  vector_add(k, a, a, out2, 0.0, 10);
  backend_->synchronize(0);
  std::vector<float> want(n, 5.0f);
  std::fill(want.begin(), want.begin() + 10, 1.0f);
  EXPECT_EQ(download(out2), want);
  // A buffer freed and another allocated (the driver may hand out the same cl_mem value): the
  // new one is looked up and set, and the kernel writes into it.
  const DLTensor stale = *out1.dl();
  out1 = Tensor();
  Tensor out3 = upload(std::vector<float>(n, 0.0f));
  vector_add(k, b, a, out3, 1.0, n);
  backend_->synchronize(0);
  EXPECT_EQ(download(out3), std::vector<float>(n, 3.0f));
  if (stale.data != out3.dl()->data) {
    // The freed buffer is refused, though the kernel held it a moment ago.
    const Any ta(a), tb(b), alpha(1.0), len(n);
    DLTensor dangling = stale;
    KilnAny args[5] = {ta.to_abi(), tb.to_abi(), ta.to_abi(), alpha.to_abi(), len.to_abi()};
    args[2].value.v_tensor = &dangling;
    const uint32_t grid[3] = {2, 1, 1}, block[3] = {256, 1, 1};
    try {
      backend_->launch(k, args, 5, grid, block, 0);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is not a live buffer of opencl:0"));
    }
  }
  backend_->module_unload(mod);
}

TEST_F(OpenclModule, ALaunchOnADestroyedStreamOrAnUnloadedKernelIsRefused) {
  void* mod = load(vector_add_.source, vector_add_.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  Tensor a = upload({1, 2}), b = upload({3, 4}), out = upload({0, 0});
  void* stream = backend_->stream_create(0);
  vector_add(k, a, b, out, 1.0, 2, stream);
  vector_add(k, a, b, out, 1.0, 2, stream);  // the kernel and stream as validated last
  backend_->synchronize(0, stream);
  EXPECT_EQ(download(out), (std::vector<float>{4, 6}));
  backend_->stream_destroy(0, stream);
  try {
    vector_add(k, a, b, out, 1.0, 2, stream);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a live stream of the opencl backend"));
  }
  vector_add(k, a, b, out, 2.0, 2);
  vector_add(k, a, b, out, 2.0, 2);
  backend_->synchronize(0);
  EXPECT_EQ(download(out), (std::vector<float>{7, 10}));
  backend_->module_unload(mod);
  try {
    vector_add(k, a, b, out, 2.0, 2);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a live kernel of the opencl backend"));
  }
}

TEST_F(OpenclModule, LaunchesTheTiledMatmulExample) {
  const Example ex = example("matmul.cl");
  void* mod = load(ex.source, ex.metadata);
  void* k = backend_->module_get_kernel(mod, "matmul");
  constexpr int64_t m = 37, n = 21, kk = 50;  // not multiples of the 16 x 16 tile
  std::vector<float> ha(m * kk), hb(kk * n);
  for (size_t i = 0; i < ha.size(); ++i)
    ha[i] = static_cast<float>(static_cast<int64_t>(i % 11) - 5);
  for (size_t i = 0; i < hb.size(); ++i)
    hb[i] = static_cast<float>(static_cast<int64_t>(i % 7) - 3);
  Tensor a = upload(ha), b = upload(hb), c = upload(std::vector<float>(m * n, -1.0f));
  const Any ta(a), tb(b), tc(c), am(m), an(n), ak(kk);
  const KilnAny args[6] = {ta.to_abi(), tb.to_abi(), tc.to_abi(),
                           am.to_abi(), an.to_abi(), ak.to_abi()};
  const uint32_t grid[3] = {(n + 15) / 16, (m + 15) / 16, 1}, block[3] = {16, 16, 1};
  backend_->launch(k, args, 6, grid, block, 0);
  backend_->synchronize(0);
  const std::vector<float> got = download(c);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t x = 0; x < kk; ++x) s += ha[i * kk + x] * hb[x * n + j];
      ASSERT_EQ(got[i * n + j], s) << "c[" << i << ", " << j << "]";
    }
  }
  // The kernel requires 16 x 16 work-groups (reqd_work_group_size): another block is an error.
  const uint32_t small[3] = {8, 8, 1};
  EXPECT_THROW(backend_->launch(k, args, 6, grid, small, 0), ValueError);
  backend_->synchronize(0);
  backend_->module_unload(mod);
}

}  // namespace
}  // namespace kiln::opencl_test
