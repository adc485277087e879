// SPDX-License-Identifier: Apache-2.0
// Launch-argument checking of the rocm backend without a device: pack_kernel_args on the rocm
// conformance metadata with the backend's tensor conversion, the launch-extent checks, and the
// plugin's options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "abi_values.h"
#include "kernel_launch.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_args.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "plugin_options.h"
#include "rocm_test_util.h"

namespace kiln::rocm {
namespace {

using test::float_arg;
using test::int_arg;
using test::string_arg;
using test::tensor_arg;

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs `body`, expecting a kiln::sdk::Error of `code`; returns its message.
template <typename Body>
std::string error_of(int32_t code, Body&& body) {
  try {
    body();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was raised";
  return "";
}

sdk::ModuleMetadata conformance_metadata() {
  const auto path =
      std::filesystem::path(KILN_SOURCE_DIR) / "examples/kernels/rocm/vector_add.hsaco.json";
  return sdk::parse_module_metadata(rocm_test::read_text(path));
}

// A 1-D float32 tensor header on `device` with a fake device address.
DLTensor fake_tensor(DLDevice device, uintptr_t address, uint64_t byte_offset = 0) {
  static int64_t shape[1] = {1024};
  DLTensor t{};
  t.data = reinterpret_cast<void*>(address);
  t.device = device;
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  t.byte_offset = byte_offset;
  return t;
}

// Packs as the launch path does (PackedArgs is not movable, so the test keeps it on the heap).
std::unique_ptr<sdk::PackedArgs> pack(const sdk::KernelInfo& kernel, const KilnAny* args, int32_t n,
                                      int32_t device_id = 0) {
  auto packed = std::make_unique<sdk::PackedArgs>();
  sdk::pack_kernel_args(
      kernel, args, n,
      [device_id](const DLTensor& t, size_t index) { return tensor_handle(t, index, device_id); },
      *packed);
  return packed;
}

constexpr DLDevice kRocm0{kDLROCM, 0};

TEST(RocmKernelArgsTest, ConformanceMetadataDescribesVectorAdd) {
  const sdk::ModuleMetadata meta = conformance_metadata();
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  using sdk::ArgKind;
  using sdk::LaunchTag;
  EXPECT_THAT(k.args, ElementsAre(ArgKind::kTensor, ArgKind::kTensor, ArgKind::kTensor,
                                  ArgKind::kFloat32, ArgKind::kInt32));
  EXPECT_THAT(k.launch, ElementsAre(LaunchTag::kGridX, LaunchTag::kBlockX));
  EXPECT_THAT(error_of(KILN_ERROR_NOT_FOUND, [&] { sdk::find_kernel(meta, "relu"); }),
              HasSubstr("kernels: vector_add"));
}

TEST(RocmKernelArgsTest, PacksDevicePointersAndScalars) {
  const sdk::ModuleMetadata meta = conformance_metadata();
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  DLTensor a = fake_tensor(kRocm0, 0x10000);
  DLTensor b = fake_tensor(kRocm0, 0x20000, 64);
  DLTensor out = fake_tensor(kRocm0, 0x30000, 4096);
  const KilnAny args[5] = {tensor_arg(&a), tensor_arg(&b), tensor_arg(&out), float_arg(0.5),
                           int_arg(10000)};
  const auto packed_storage = pack(k, args, 5);
  const sdk::PackedArgs& packed = *packed_storage;
  ASSERT_EQ(packed.count, 5u);
  EXPECT_THAT(std::vector<uint32_t>(packed.sizes.begin(), packed.sizes.begin() + 5),
              ElementsAre(8u, 8u, 8u, 4u, 4u));
  uint64_t p = 0;
  std::memcpy(&p, packed.values[0].data(), 8);
  EXPECT_EQ(p, 0x10000u);
  std::memcpy(&p, packed.values[1].data(), 8);
  EXPECT_EQ(p, 0x20000u + 64);  // data + byte_offset
  std::memcpy(&p, packed.values[2].data(), 8);
  EXPECT_EQ(p, 0x30000u + 4096);
  float alpha = 0;
  std::memcpy(&alpha, packed.values[3].data(), 4);
  EXPECT_EQ(alpha, 0.5f);
  int32_t n = 0;
  std::memcpy(&n, packed.values[4].data(), 4);
  EXPECT_EQ(n, 10000);
  // hipModuleLaunchKernel's kernelParams: one pointer per argument, at its value.
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(packed.pointers[i], packed.values[i].data());
  // An integer alpha is converted to float32.
  const KilnAny int_alpha[5] = {tensor_arg(&a), tensor_arg(&b), tensor_arg(&out), int_arg(2),
                                int_arg(1)};
  std::memcpy(&alpha, pack(k, int_alpha, 5)->values[3].data(), 4);
  EXPECT_EQ(alpha, 2.0f);
}

TEST(RocmKernelArgsTest, RejectsWrongCountsKindsAndRanges) {
  const sdk::ModuleMetadata meta = conformance_metadata();
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  DLTensor t = fake_tensor(kRocm0, 0x10000);
  const KilnAny four[4] = {tensor_arg(&t), tensor_arg(&t), tensor_arg(&t), float_arg(1)};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { pack(k, four, 4); }),
              HasSubstr("takes 5 arguments, got 4"));
  // The conformance suite's "bad arguments": one int where five arguments are expected.
  const KilnAny one[1] = {int_arg(3)};
  EXPECT_THROW(pack(k, one, 1), sdk::Error);
  const KilnAny scalar_for_tensor[5] = {int_arg(1), tensor_arg(&t), tensor_arg(&t), float_arg(1),
                                        int_arg(1)};
  EXPECT_THAT(error_of(KILN_ERROR_TYPE, [&] { pack(k, scalar_for_tensor, 5); }),
              HasSubstr("argument 0 expects tensor, got int"));
  const KilnAny string_alpha[5] = {tensor_arg(&t), tensor_arg(&t), tensor_arg(&t),
                                   string_arg("0.5"), int_arg(1)};
  EXPECT_THAT(error_of(KILN_ERROR_TYPE, [&] { pack(k, string_alpha, 5); }),
              HasSubstr("argument 3 expects float32, got string"));
  const KilnAny float_n[5] = {tensor_arg(&t), tensor_arg(&t), tensor_arg(&t), float_arg(1),
                              float_arg(3.5)};
  EXPECT_THAT(error_of(KILN_ERROR_TYPE, [&] { pack(k, float_n, 5); }),
              HasSubstr("argument 4 expects int32, got float"));
  const KilnAny huge_n[5] = {tensor_arg(&t), tensor_arg(&t), tensor_arg(&t), float_arg(1),
                             int_arg(int64_t{1} << 40)};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { pack(k, huge_n, 5); }),
              HasSubstr("does not fit in int32"));
}

TEST(RocmKernelArgsTest, TensorsMustBeOnTheModulesDevice) {
  const sdk::ModuleMetadata meta = conformance_metadata();
  const sdk::KernelInfo& k = sdk::find_kernel(meta, "vector_add");
  DLTensor gpu = fake_tensor(kRocm0, 0x10000);
  DLTensor host = fake_tensor(DLDevice{kDLCPU, 0}, 0x10000);
  const KilnAny on_cpu[5] = {tensor_arg(&gpu), tensor_arg(&host), tensor_arg(&gpu), float_arg(1),
                             int_arg(1)};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { pack(k, on_cpu, 5); }),
              AllOf(HasSubstr("argument 1"), HasSubstr("cpu:0"), HasSubstr("rocm:0")));
  DLTensor other = fake_tensor(DLDevice{kDLROCM, 1}, 0x10000);
  const KilnAny on_other[5] = {tensor_arg(&other), tensor_arg(&gpu), tensor_arg(&gpu), float_arg(1),
                               int_arg(1)};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { pack(k, on_other, 5); }), HasSubstr("rocm:1"));
  DLTensor null_data = fake_tensor(kRocm0, 0);
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { tensor_handle(null_data, 2, 0); }),
              HasSubstr("argument 2 is a tensor without data"));
  DLTensor overflow = fake_tensor(kRocm0, 0x10000, ~uint64_t{0});
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { tensor_handle(overflow, 0, 0); }),
              HasSubstr("overflows"));
  // A NULL tensor pointer is a type error, not a crash.
  KilnAny null_tensor{};
  null_tensor.type_code = KILN_TYPE_TENSOR;
  const KilnAny with_null[5] = {null_tensor, tensor_arg(&gpu), tensor_arg(&gpu), float_arg(1),
                                int_arg(1)};
  EXPECT_THROW(pack(k, with_null, 5), sdk::Error);
}

TEST(RocmLaunchExtentsTest, ChecksExtentsAgainstTheDeviceLimits) {
  const LaunchLimits limits;  // 1024 threads per block, 64 KiB of shared memory
  const uint32_t grid[3] = {40, 1, 1};
  const uint32_t block[3] = {256, 1, 1};
  EXPECT_NO_THROW(check_launch_extents("k", grid, block, 0, limits));
  EXPECT_NO_THROW(check_launch_extents("k", grid, block, 65536, limits));
  const uint32_t zero[3] = {0, 1, 1};
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [&] { check_launch_extents("k", zero, block, 0, limits); }),
      HasSubstr("grid.x = 0"));
  const uint32_t wide[3] = {2048, 1, 1};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { check_launch_extents("k", grid, wide, 0, limits); }),
              HasSubstr("block.x = 2048 exceeds"));
  const uint32_t cube[3] = {32, 32, 2};
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { check_launch_extents("k", grid, cube, 0, limits); }),
              HasSubstr("2048 threads exceeds the device's limit of 1024"));
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [&] { check_launch_extents("k", grid, block, 65537, limits); }),
      HasSubstr("65537 bytes of dynamic shared memory"));
  const uint32_t tall[3] = {1, 70000, 1};
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [&] { check_launch_extents("k", tall, block, 0, limits); }),
      HasSubstr("grid.y = 70000 exceeds"));
  EXPECT_THROW(check_launch_extents("k", nullptr, block, 0, limits), sdk::Error);
}

TEST(RocmPluginOptionsTest, ParsesOptions) {
  const PluginOptions none = parse_plugin_options("{}");
  EXPECT_TRUE(none.hip_library.empty());
  EXPECT_TRUE(none.compile_options.empty());
  EXPECT_TRUE(parse_plugin_options(nullptr).unknown.empty());
  const PluginOptions all = parse_plugin_options(
      R"({"hip_library": "/opt/rocm/lib/libamdhip64.so", "hiprtc_library": "libhiprtc.so.6",
          "compile_options": ["-O3", "-ffast-math"], "typo": 1})");
  EXPECT_EQ(all.hip_library, "/opt/rocm/lib/libamdhip64.so");
  EXPECT_EQ(all.hiprtc_library, "libhiprtc.so.6");
  EXPECT_THAT(all.compile_options, ElementsAre("-O3", "-ffast-math"));
  EXPECT_THAT(all.unknown, ElementsAre("typo"));
}

TEST(RocmPluginOptionsTest, RejectsBadValues) {
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [] { parse_plugin_options(R"({"hip_library": 5})"); }),
              AllOf(HasSubstr("hip_library = 5"), HasSubstr("expected a string")));
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [] { parse_plugin_options(R"({"compile_options": "-O3"})"); }),
      HasSubstr("expected a list of strings"));
  EXPECT_THAT(error_of(KILN_ERROR_VALUE,
                       [] { parse_plugin_options(R"({"compile_options": ["-O3", 1]})"); }),
              HasSubstr("1 is not a string"));
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE,
               [] { parse_plugin_options(R"({"compile_options": ["--offload-arch=gfx90a"]})"); }),
      HasSubstr("not allowed"));
  EXPECT_THROW(parse_plugin_options("{not json"), sdk::Error);
  EXPECT_THROW(parse_plugin_options("[1, 2]"), sdk::Error);
}

}  // namespace
}  // namespace kiln::rocm
