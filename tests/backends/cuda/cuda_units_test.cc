// SPDX-License-Identifier: Apache-2.0
// The cuda plugin's units that need no GPU and no driver: option parsing, error naming, the
// checks on device code before the driver sees it, kernel metadata and argument packing on
// the conformance kernel's metadata, and NVRTC compiles for an explicit architecture.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "abi_values.h"
#include "cuda_test_util.h"
#include "driver_api.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_args.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "module_image.h"
#include "nvrtc_compiler.h"
#include "plugin_options.h"

namespace kiln::cuda {
namespace {

using test::float_arg;
using test::int_arg;
using test::tensor_arg;

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kExamples = std::string(KILN_EXAMPLE_KERNEL_DIR) + "/cuda";
// The sources and metadata of the example kernels, which exist without nvcc.
const std::string kSources = cuda_test::example_sources();

using cuda_test::read_bytes;
using cuda_test::read_text;

// Runs `body`, expecting a kiln::sdk::Error with `code` whose message contains `part`.
template <typename Body>
void expect_error(Body&& body, int32_t code, const std::string& part) {
  try {
    body();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

// ---- options ----

TEST(CudaOptions, DefaultsWithoutOptions) {
  for (const char* json : {static_cast<const char*>(nullptr), "", "{}"}) {
    const PluginOptions o = parse_options(json);
    EXPECT_EQ(o.driver_library, "libcuda.so.1");
    EXPECT_TRUE(o.nvrtc_libraries.empty());
    EXPECT_EQ(o.build_options, "");
    EXPECT_TRUE(o.unknown.empty());
  }
}

TEST(CudaOptions, ReadsEveryOption) {
  const PluginOptions o = parse_options(
      R"({"driver_library": "/opt/x/libcuda.so", "nvrtc_library": ["a.so", "b.so"],
          "build_options": "-DX=1 '-DY=two words'", "colour": "blue"})");
  EXPECT_EQ(o.driver_library, "/opt/x/libcuda.so");
  EXPECT_EQ(o.nvrtc_libraries, (std::vector<std::string>{"a.so", "b.so"}));
  EXPECT_EQ(o.build_options, "-DX=1 '-DY=two words'");
  EXPECT_EQ(o.unknown, std::vector<std::string>{"colour"});
  EXPECT_EQ(parse_options(R"({"nvrtc_library": "libnvrtc.so.12"})").nvrtc_libraries,
            std::vector<std::string>{"libnvrtc.so.12"});
}

TEST(CudaOptions, RejectsBadValuesNamingThem) {
  expect_error([] { parse_options("{nope"); }, KILN_ERROR_VALUE, "not valid JSON");
  expect_error([] { parse_options("[1]"); }, KILN_ERROR_VALUE, "must be a JSON object");
  expect_error([] { parse_options(R"({"driver_library": 5})"); }, KILN_ERROR_VALUE,
               "option driver_library = 5 is invalid");
  expect_error([] { parse_options(R"({"driver_library": ""})"); }, KILN_ERROR_VALUE,
               "non-empty string");
  expect_error([] { parse_options(R"({"nvrtc_library": []})"); }, KILN_ERROR_VALUE,
               "nvrtc_library = []");
  expect_error([] { parse_options(R"({"nvrtc_library": [1]})"); }, KILN_ERROR_VALUE,
               "option nvrtc_library = 1");
  expect_error([] { parse_options(R"({"build_options": ["-O3"]})"); }, KILN_ERROR_VALUE,
               "option build_options");
  expect_error([] { parse_options(R"({"build_options": "-DX='open"})"); }, KILN_ERROR_VALUE,
               "unterminated single quote");
}

TEST(CudaOptions, SplitsCommandLines) {
  EXPECT_EQ(split_options("", "x"), std::vector<std::string>{});
  EXPECT_EQ(split_options("  -O3   -DX=1\t-lineinfo ", "x"),
            (std::vector<std::string>{"-O3", "-DX=1", "-lineinfo"}));
  EXPECT_EQ(split_options(R"(-I"/a b/c" '-DQ="x y"' -DZ=a\ b)", "x"),
            (std::vector<std::string>{"-I/a b/c", "-DQ=\"x y\"", "-DZ=a b"}));
  EXPECT_EQ(split_options(R"("say \"hi\"" '')", "x"), (std::vector<std::string>{"say \"hi\"", ""}));
  expect_error([] { split_options("\"open", "metadata build_options"); }, KILN_ERROR_VALUE,
               "metadata build_options: unterminated double quote");
  expect_error([] { split_options("-DX\\", "x"); }, KILN_ERROR_VALUE, "trailing backslash");
}

TEST(CudaArch, FromComputeCapability) {
  EXPECT_EQ(sm_arch(8, 0), "sm_80");
  EXPECT_EQ(sm_arch(9, 0), "sm_90");
  EXPECT_EQ(sm_arch(12, 1), "sm_121");
}

// ---- driver errors ----

TEST(CudaDriverApi, NamesResultsWithoutADriver) {
  EXPECT_STREQ(result_name(CUDA_ERROR_STUB_LIBRARY), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(result_name(static_cast<CUresult>(12345)), nullptr);
  EXPECT_THAT(describe_result(nullptr, CUDA_ERROR_STUB_LIBRARY),
              HasSubstr("CUDA_ERROR_STUB_LIBRARY (34): the library is the CUDA toolkit's"));
  EXPECT_EQ(describe_result(nullptr, CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY (2)");
  EXPECT_EQ(describe_result(nullptr, static_cast<CUresult>(12345)), "CUDA error (12345)");
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_OUT_OF_MEMORY), KILN_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_INVALID_PTX), KILN_ERROR_VALUE);
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_NOT_FOUND), KILN_ERROR_NOT_FOUND);
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_NO_DEVICE), KILN_ERROR_UNAVAILABLE);
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_STUB_LIBRARY), KILN_ERROR_UNAVAILABLE);
  EXPECT_EQ(kiln_code_of(CUDA_ERROR_ILLEGAL_ADDRESS), KILN_ERROR_RUNTIME);
}

TEST(CudaDriverApi, MissingLibraryIsReportedWithDlerror) {
  DriverApi api;
  std::string why;
  EXPECT_FALSE(api.open("libkiln_no_such_cuda_driver.so.1", &why));
  EXPECT_FALSE(api.is_open());
  EXPECT_THAT(why, HasSubstr("dlopen(\"libkiln_no_such_cuda_driver.so.1\") failed"));
  EXPECT_THAT(why, HasSubstr("cannot open shared object file"));
}

TEST(CudaDriverApi, LibraryWithoutTheEntryPointsIsReported) {
  DriverApi api;
  std::string why;
  EXPECT_FALSE(api.open("libm.so.6", &why));
  EXPECT_FALSE(api.is_open());
  EXPECT_THAT(why, HasSubstr("libm.so.6 lacks the entry point cuGetErrorName (which drivers have "
                             "exported since CUDA 6.0"));
}

// ---- device code checks ----

TEST(CudaImage, FormatsAreNamed) {
  EXPECT_EQ(parse_image_format("ptx"), ImageFormat::kPtx);
  EXPECT_EQ(parse_image_format("cubin"), ImageFormat::kCubin);
  EXPECT_EQ(parse_image_format("fatbin"), ImageFormat::kFatbin);
  EXPECT_EQ(parse_image_format("cuda_source"), ImageFormat::kCudaSource);
  expect_error([] { parse_image_format("opencl_c"); }, KILN_ERROR_VALUE,
               "cannot load format 'opencl_c' (it loads ptx, cubin, fatbin and cuda_source)");
}

TEST(CudaImage, AcceptsTheBuiltExamples) {
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  for (const char* kernel : {"vector_add", "relu", "matmul"}) {
    SCOPED_TRACE(kernel);
    const std::string base = kExamples + "/" + kernel;
    const std::vector<uint8_t> ptx = read_bytes(base + ".ptx");
    ASSERT_FALSE(ptx.empty()) << "build kiln_cuda_example_kernels first";
    const std::vector<uint8_t> image = prepare_image(ptx.data(), ptx.size(), ImageFormat::kPtx);
    EXPECT_EQ(image.back(), 0) << "PTX is handed over NUL-terminated";
    for (const char* sm : {"sm_80", "sm_90"}) {
      const std::vector<uint8_t> cubin = read_bytes(base + "." + sm + ".cubin");
      ASSERT_FALSE(cubin.empty());
      EXPECT_EQ(prepare_image(cubin.data(), cubin.size(), ImageFormat::kCubin), cubin);
    }
    const std::vector<uint8_t> fatbin = read_bytes(base + ".fatbin");
    ASSERT_FALSE(fatbin.empty());
    EXPECT_EQ(prepare_image(fatbin.data(), fatbin.size(), ImageFormat::kFatbin), fatbin);
    const std::vector<uint8_t> source = read_bytes(base + ".cu");
    ASSERT_FALSE(source.empty());
    EXPECT_EQ(prepare_image(source.data(), source.size(), ImageFormat::kCudaSource).size(),
              source.size() + 1);
  }
}

TEST(CudaImage, RejectsBadBytesWithoutReadingPastThem) {
  const std::string garbage = "this is not device code";
  expect_error([&] { prepare_image(garbage.data(), garbage.size(), ImageFormat::kCubin); },
               KILN_ERROR_VALUE, "not a cubin: it does not start with the ELF magic");
  expect_error([&] { prepare_image(garbage.data(), garbage.size(), ImageFormat::kFatbin); },
               KILN_ERROR_VALUE, "not a fat binary");
  expect_error([&] { prepare_image(garbage.data(), 0, ImageFormat::kPtx); }, KILN_ERROR_VALUE,
               "empty ptx image");
  expect_error([&] { prepare_image(nullptr, 10, ImageFormat::kPtx); }, KILN_ERROR_VALUE,
               "pointer is NULL");

  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<uint8_t> cubin = read_bytes(kExamples + "/vector_add.sm_90.cubin");
  const std::vector<uint8_t> fatbin = read_bytes(kExamples + "/vector_add.fatbin");
  ASSERT_GT(cubin.size(), 200u);
  ASSERT_GT(fatbin.size(), 200u);
  // Every truncation is caught: the header tables or sections then lie past the end.
  for (size_t cut :
       {size_t{4}, size_t{40}, size_t{64}, size_t{200}, cubin.size() / 2, cubin.size() - 1}) {
    SCOPED_TRACE(cut);
    EXPECT_THROW(prepare_image(cubin.data(), cut, ImageFormat::kCubin), sdk::Error);
  }
  for (size_t cut : {size_t{4}, size_t{15}, size_t{16}, size_t{100}, fatbin.size() - 1}) {
    SCOPED_TRACE(cut);
    EXPECT_THROW(prepare_image(fatbin.data(), cut, ImageFormat::kFatbin), sdk::Error);
  }
  expect_error([&] { prepare_image(fatbin.data(), fatbin.size(), ImageFormat::kCubin); },
               KILN_ERROR_VALUE, "pass it as format 'fatbin'");
  expect_error([&] { prepare_image(cubin.data(), cubin.size(), ImageFormat::kFatbin); },
               KILN_ERROR_VALUE, "pass a cubin as format 'cubin'");
  expect_error([&] { prepare_image(cubin.data(), cubin.size(), ImageFormat::kPtx); },
               KILN_ERROR_VALUE, "PTX text starts with the ELF magic");
  expect_error([&] { prepare_image(fatbin.data(), fatbin.size(), ImageFormat::kPtx); },
               KILN_ERROR_VALUE, "starts with the fat binary magic");

  // An ELF file for another machine (this process's own libm) is not a cubin.
  std::vector<uint8_t> host_elf;
  for (const char* path : {"/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                           "/lib64/libm.so.6", "/usr/lib64/libm.so.6"}) {
    host_elf = read_bytes(path);
    if (!host_elf.empty()) break;
  }
  if (!host_elf.empty()) {
    expect_error([&] { prepare_image(host_elf.data(), host_elf.size(), ImageFormat::kCubin); },
                 KILN_ERROR_VALUE, "not a CUDA cubin (EM_CUDA = 190)");
  }

  // A corrupted fat binary entry size is caught.
  std::vector<uint8_t> bad_fatbin = fatbin;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bad_fatbin.data() + 16 + 8, &huge, sizeof(huge));
  expect_error([&] { prepare_image(bad_fatbin.data(), bad_fatbin.size(), ImageFormat::kFatbin); },
               KILN_ERROR_VALUE, "entry 0 lies outside");
}

TEST(CudaImage, TextMustNotHoldNulBytes) {
  const std::string with_nul("// ptx\0 more", 12);
  expect_error([&] { prepare_image(with_nul.data(), with_nul.size(), ImageFormat::kPtx); },
               KILN_ERROR_VALUE, "NUL byte at offset 6");
  const std::string terminated("// ptx\0\0", 8);
  const std::vector<uint8_t> image =
      prepare_image(terminated.data(), terminated.size(), ImageFormat::kPtx);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(image.data())), "// ptx");
  EXPECT_EQ(image.size(), 7u);
}

TEST(CudaImage, FindsPtxEntries) {
  EXPECT_EQ(ptx_entry_names("// .entry commented(\n/* .entry hidden( */\n"
                            ".visible .entry _Z5scalePff(\n.entry\tsecond (\n.func notakernel(\n"),
            (std::set<std::string>{"_Z5scalePff", "second"}));
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(ptx_entry_names(read_text(kExamples + "/vector_add.ptx")),
            std::set<std::string>{"vector_add"});
  EXPECT_EQ(ptx_entry_names(read_text(kExamples + "/matmul.ptx")), std::set<std::string>{"matmul"});
}

// ---- metadata ----

TEST(CudaMetadata, ConformanceSidecarParses) {
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string json = read_text(kExamples + "/vector_add.ptx.json");
  ASSERT_FALSE(json.empty());
  const sdk::ModuleMetadata meta = sdk::parse_module_metadata(json);
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  using sdk::ArgKind;
  using sdk::LaunchTag;
  EXPECT_EQ(k.args, (std::vector<ArgKind>{ArgKind::kTensor, ArgKind::kTensor, ArgKind::kTensor,
                                          ArgKind::kFloat32, ArgKind::kInt32}));
  EXPECT_EQ(k.launch, (std::vector<LaunchTag>{LaunchTag::kGridX, LaunchTag::kBlockX}));
  const sdk::ModuleMetadata matmul =
      sdk::parse_module_metadata(read_text(kExamples + "/matmul.cu.json"));
  const sdk::KernelInfo& m = sdk::find_kernel(matmul, "matmul");
  EXPECT_EQ(m.launch.back(), LaunchTag::kDynamicSharedBytes);
  // Every variant's sidecar names its own format and the cuda target.
  for (const char* file :
       {"vector_add.ptx", "vector_add.sm_80.cubin", "vector_add.fatbin", "vector_add.cu"}) {
    EXPECT_THAT(read_text(kExamples + "/" + file + ".json"), HasSubstr("\"target\" : \"cuda\""));
  }
  EXPECT_THAT(read_text(kExamples + "/vector_add.cu.json"),
              HasSubstr("\"format\" : \"cuda_source\""));
}

TEST(CudaMetadata, KernelsMissingFromTheModuleAreNamed) {
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::set<std::string> entries = ptx_entry_names(read_text(kExamples + "/vector_add.ptx"));
  const auto meta = sdk::parse_module_metadata(
      R"({"kernels": {"vector_add": {"args": []}, "scale": {"args": []}, "zap": {}}})");
  auto present = [&](const std::string& name) { return entries.count(name) != 0; };
  expect_error([&] { check_kernels_present(meta, present, "the ptx module", &entries); },
               KILN_ERROR_NOT_FOUND,
               "the ptx module lacks kernels the metadata describes: scale, zap (the module has: "
               "vector_add)");
  const auto good = sdk::parse_module_metadata(R"({"kernels": {"vector_add": {}}})");
  EXPECT_NO_THROW(check_kernels_present(good, present, "m", nullptr));
}

// A DLTensor on cuda:`id` at `data` + `offset` (only the fields packing reads).
DLTensor cuda_tensor(uintptr_t data, uint64_t offset, int32_t id = 0, int type = kDLCUDA) {
  DLTensor t{};
  t.data = reinterpret_cast<void*>(data);
  t.byte_offset = offset;
  t.device.device_type = static_cast<DLDeviceType>(type);
  t.device.device_id = id;
  return t;
}

// Packs as launch_kernel does (PackedArgs is not movable, so the test keeps it on the heap).
std::unique_ptr<sdk::PackedArgs> pack(const sdk::KernelInfo& k, const KilnAny* args, int32_t n,
                                      int32_t device_id = 0) {
  auto packed = std::make_unique<sdk::PackedArgs>();
  sdk::pack_kernel_args(
      k, args, n,
      [&](const DLTensor& t, size_t index) {
        return tensor_device_address(t, device_id, k.name, index);
      },
      *packed);
  return packed;
}

TEST(CudaArguments, PacksTheConformanceKernel) {
  const auto meta = sdk::parse_module_metadata(read_text(kSources + "/vector_add.json"));
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  DLTensor a = cuda_tensor(0x7f0000000000, 0);
  DLTensor b = cuda_tensor(0x7f0000100000, 64);
  DLTensor out = cuda_tensor(0x7f0000200000, 4096);
  const KilnAny args[] = {tensor_arg(&a), tensor_arg(&b), tensor_arg(&out), float_arg(0.5),
                          int_arg(10000)};
  const auto packed_storage = pack(k, args, 5);
  const sdk::PackedArgs& packed = *packed_storage;
  ASSERT_EQ(packed.count, 5u);
  EXPECT_EQ(std::vector<uint32_t>(packed.sizes.begin(), packed.sizes.begin() + 5),
            (std::vector<uint32_t>{8, 8, 8, 4, 4}));
  uint64_t address = 0;
  std::memcpy(&address, packed.pointers[1], 8);
  EXPECT_EQ(address, 0x7f0000100040u) << "data + byte_offset";
  std::memcpy(&address, packed.pointers[2], 8);
  EXPECT_EQ(address, 0x7f0000201000u);
  float alpha = 0;
  std::memcpy(&alpha, packed.pointers[3], 4);
  EXPECT_EQ(alpha, 0.5f);
  int32_t n = 0;
  std::memcpy(&n, packed.pointers[4], 4);
  EXPECT_EQ(n, 10000);
  // An integer passes as a float32 scalar too.
  const KilnAny int_alpha[] = {tensor_arg(&a), tensor_arg(&b), tensor_arg(&out), int_arg(2),
                               int_arg(1)};
  std::memcpy(&alpha, pack(k, int_alpha, 5)->pointers[3], 4);
  EXPECT_EQ(alpha, 2.0f);
}

TEST(CudaArguments, RejectsWrongArguments) {
  const auto meta = sdk::parse_module_metadata(read_text(kSources + "/vector_add.json"));
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  DLTensor a = cuda_tensor(0x1000, 0);
  DLTensor host = cuda_tensor(0x1000, 0, 0, kDLCPU);
  DLTensor other = cuda_tensor(0x1000, 0, 1);
  const KilnAny four[] = {tensor_arg(&a), tensor_arg(&a), tensor_arg(&a), float_arg(2.0)};
  expect_error([&] { pack(k, four, 4); }, KILN_ERROR_VALUE,
               "kernel 'vector_add' takes 5 arguments, got 4");
  const KilnAny swapped[] = {tensor_arg(&a), tensor_arg(&a), float_arg(2.0), tensor_arg(&a),
                             int_arg(1)};
  expect_error([&] { pack(k, swapped, 5); }, KILN_ERROR_TYPE,
               "kernel 'vector_add' argument 2 expects tensor, got float");
  const KilnAny float_n[] = {tensor_arg(&a), tensor_arg(&a), tensor_arg(&a), float_arg(2.0),
                             float_arg(3.5)};
  expect_error([&] { pack(k, float_n, 5); }, KILN_ERROR_TYPE, "argument 4 expects int32");
  const KilnAny big_n[] = {tensor_arg(&a), tensor_arg(&a), tensor_arg(&a), float_arg(2.0),
                           int_arg(int64_t{1} << 40)};
  expect_error([&] { pack(k, big_n, 5); }, KILN_ERROR_VALUE, "does not fit in int32");
  const KilnAny on_host[] = {tensor_arg(&host), tensor_arg(&a), tensor_arg(&a), float_arg(2.0),
                             int_arg(1)};
  expect_error([&] { pack(k, on_host, 5); }, KILN_ERROR_VALUE,
               "kernel 'vector_add' argument 0: the tensor is on device type 1 id 0, but the "
               "module is loaded on cuda:0");
  const KilnAny on_other[] = {tensor_arg(&a), tensor_arg(&other), tensor_arg(&a), float_arg(2.0),
                              int_arg(1)};
  expect_error([&] { pack(k, on_other, 5); }, KILN_ERROR_VALUE, "argument 1: the tensor is on");
}

// ---- NVRTC ----

class Nvrtc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!api_.open(NvrtcApi::default_libraries(), &why)) GTEST_SKIP() << why;
  }
  NvrtcApi api_;
};

TEST_F(Nvrtc, CompilesTheExamplesForAnExplicitArchitecture) {
  EXPECT_GE(api_.major_version(), 12);
  for (const char* kernel : {"vector_add", "relu", "matmul"}) {
    SCOPED_TRACE(kernel);
    const std::string source = read_text(kSources + "/" + kernel + ".cu");
    ASSERT_FALSE(source.empty());
    const NvrtcOutput out =
        nvrtc_compile(api_, source, std::string(kernel) + ".cu", "sm_80", {"-lineinfo"}, {kernel});
    EXPECT_THAT(out.ptx, HasSubstr(".target sm_80"));
    EXPECT_EQ(ptx_entry_names(out.ptx), std::set<std::string>{kernel});
    ASSERT_FALSE(out.cubin.empty()) << "sm_XY yields machine code";
    EXPECT_NO_THROW(prepare_image(out.cubin.data(), out.cubin.size(), ImageFormat::kCubin));
    EXPECT_EQ(out.lowered_names.at(kernel), kernel) << "extern \"C\" names stay as they are";
  }
  // A virtual architecture gives PTX only.
  const NvrtcOutput ptx_only =
      nvrtc_compile(api_, read_text(kSources + "/relu.cu"), "relu.cu", "compute_90", {}, {});
  EXPECT_THAT(ptx_only.ptx, HasSubstr(".target sm_90"));
  EXPECT_TRUE(ptx_only.cubin.empty());
  // An -arch among the options with no architecture argument.
  const NvrtcOutput own_arch = nvrtc_compile(api_, read_text(kSources + "/relu.cu"), "relu.cu", "",
                                             {"-arch=sm_90"}, {"relu"});
  EXPECT_THAT(own_arch.ptx, HasSubstr(".target sm_90"));
}

TEST_F(Nvrtc, LowersCppKernelNames) {
  const std::string source = R"(
    template <typename T> __global__ void scale(T* p, T a, int n) {
      const int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) p[i] *= a;
    }
    namespace ns { __global__ void plain(float* p) { p[0] = 1.0f; } }
  )";
  const NvrtcOutput out =
      nvrtc_compile(api_, source, "scale.cu", "sm_90", {}, {"scale<float>", "ns::plain"});
  const std::string scale = out.lowered_names.at("scale<float>");
  const std::string plain = out.lowered_names.at("ns::plain");
  EXPECT_EQ(scale.rfind("_Z", 0), 0u) << scale;
  EXPECT_EQ(plain.rfind("_Z", 0), 0u) << plain;
  const std::set<std::string> entries = ptx_entry_names(out.ptx);
  EXPECT_EQ(entries.count(scale), 1u);
  EXPECT_EQ(entries.count(plain), 1u);
}

// TVM's CUDA source includes <cuda/std/cstdint>, a CCCL header NVRTC does not bring: the
// toolkit's include folders (include/, include/cccl/) go on the command line by themselves.
TEST_F(Nvrtc, FindsTheToolkitsCcclHeaders) {
  bool cccl = false;
  for (const std::string& dir : api_.include_dirs()) {
    cccl |= std::filesystem::exists(dir + "/cuda/std/cstdint");
  }
  if (!cccl) GTEST_SKIP() << "no toolkit folder with cuda/std/cstdint beside " << api_.library();
  const std::string source = R"(
    #include <cuda/std/cstdint>
    extern "C" __global__ void fill(int32_t* p) { p[threadIdx.x] = static_cast<int32_t>(threadIdx.x); }
  )";
  const NvrtcOutput out = nvrtc_compile(api_, source, "fill.cu", "sm_80", {}, {"fill"});
  EXPECT_EQ(ptx_entry_names(out.ptx).count("fill"), 1u);
}

TEST_F(Nvrtc, CompileErrorsCarryTheLog) {
  const std::string bad = "extern \"C\" __global__ void k(float* p) { p[0] = undefined_thing; }\n";
  try {
    nvrtc_compile(api_, bad, "bad.cu", "sm_80", {}, {"k"});
    ADD_FAILURE() << "a compile error must throw";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("bad.cu: NVRTC compile failed: NVRTC_ERROR_COMPILATION"));
    EXPECT_THAT(message, HasSubstr("NVRTC log:"));
    EXPECT_THAT(message, HasSubstr("identifier \"undefined_thing\" is undefined"));
    EXPECT_THAT(message, HasSubstr("-arch=sm_80"));
  }
  expect_error(
      [&] {
        nvrtc_compile(api_, read_text(kSources + "/relu.cu"), "relu.cu", "sm_80",
                      {"--no-such-option"}, {});
      },
      KILN_ERROR_VALUE, "NVRTC_ERROR_INVALID_OPTION");
  expect_error([&] { nvrtc_compile(api_, "x", "nul.cu", "sm_80", {}, {}); }, KILN_ERROR_VALUE,
               "nul.cu: NVRTC compile failed");
  expect_error([&] { nvrtc_compile(api_, std::string("a\0b", 3), "nul.cu", "sm_80", {}, {}); },
               KILN_ERROR_VALUE, "contains a NUL byte at offset 1");
  // A kernel name the source does not define.
  EXPECT_THROW(nvrtc_compile(api_, read_text(kSources + "/relu.cu"), "relu.cu", "sm_80", {},
                             {"no_such_kernel"}),
               sdk::Error);
}

TEST(NvrtcLibrary, MissingLibrariesAreAllNamed) {
  NvrtcApi api;
  std::string why;
  EXPECT_FALSE(api.open({"libkiln_no_nvrtc.so.1", "libkiln_no_nvrtc.so.2"}, &why));
  EXPECT_THAT(why, HasSubstr("cannot load NVRTC"));
  EXPECT_THAT(why, HasSubstr("libkiln_no_nvrtc.so.1"));
  EXPECT_THAT(why, HasSubstr("libkiln_no_nvrtc.so.2"));
  EXPECT_FALSE(api.open({"libm.so.6"}, &why));
  EXPECT_THAT(why, HasSubstr("libm.so.6 lacks nvrtcVersion"));
}

}  // namespace
}  // namespace kiln::cuda
