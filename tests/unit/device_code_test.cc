// SPDX-License-Identifier: Apache-2.0
// Device code modules (kiln/device_code.h): sidecar metadata, kernels as functions (argument
// and launch-extent checks), the tar round trip, and the L2 flush preprocessor. The CPU
// backend serves as the device: it loads `so` blobs through module_load and launches their
// kernels, so every host-side path runs for real without an accelerator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kVectorAddMetadata =
    R"({"format": "so", "target": "cpu",
        "kernels": {"vector_add": {"args": ["tensor", "tensor", "tensor", "float32"],
                                   "launch": ["blockIdx.x", "threadIdx.x"]}}})";

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// libvector_add.so copied to `dir`/vector_add.kcpu with the sidecar `metadata`: an extension
// no loader claims, so the host reads it as device code for the cpu backend.
fs::path cpu_device_code(const fs::path& dir, const std::string& metadata) {
  const fs::path path = dir / "vector_add.kcpu";
  fs::copy_file(fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so", path);
  write_text_file(path.string() + ".json", metadata);
  return path;
}

struct Vectors {
  Tensor a, b, out;
  explicit Vectors(int64_t n) {
    a = Tensor::empty({n}, DataType::Float(32));
    b = Tensor::empty({n}, DataType::Float(32));
    out = Tensor::empty({n}, DataType::Float(32));
    auto* pa = static_cast<float*>(a.dl()->data);
    auto* pb = static_cast<float*>(b.dl()->data);
    for (int64_t i = 0; i < n; ++i) {
      pa[i] = static_cast<float>(i);
      pb[i] = 1.0f;
    }
  }
  float out_at(int64_t i) const { return static_cast<const float*>(out.dl()->data)[i]; }
};

TEST(DeviceCode, FormatsOfExtensions) {
  EXPECT_EQ(device_code_format_of("cl"),
            std::make_pair(std::string("opencl_c"), std::string("opencl")));
  EXPECT_EQ(device_code_format_of("ptx"), std::make_pair(std::string("ptx"), std::string("cuda")));
  EXPECT_EQ(device_code_format_of("hsaco"),
            std::make_pair(std::string("hsaco"), std::string("rocm")));
  EXPECT_EQ(device_code_format_of("so"), std::nullopt);
}

TEST(DeviceCode, KernelsAreFunctionsOfTheModule) {
  TempDir dir;
  Module m = load_module(cpu_device_code(dir.path(), kVectorAddMetadata));
  EXPECT_EQ(m.kind(), kDeviceCodeKind);
  EXPECT_THAT(m.function_names(), ::testing::ElementsAre("vector_add"));
  Vectors v(1000);
  m["vector_add"](v.a, v.b, v.out, 0.5, 4, 256);
  EXPECT_FLOAT_EQ(v.out_at(10), 10.5f);
  EXPECT_FLOAT_EQ(v.out_at(999), 999.5f);
  // The artifacts carry the blob and its metadata with format and target filled in.
  ASSERT_EQ(m.artifacts().size(), 2u);
  EXPECT_EQ(m.artifacts()[0].role, "device_blob");
  EXPECT_EQ(m.artifacts()[1].name, "vector_add.kcpu.json");
  EXPECT_EQ(m.artifacts()[1].role, "metadata");
}

TEST(DeviceCode, ChecksArgumentsAndExtents) {
  TempDir dir;
  Module m = load_module(cpu_device_code(dir.path(), kVectorAddMetadata));
  Function f = m["vector_add"];
  Vectors v(8);
  try {
    f(v.a, v.b, v.out, 0.5);
    FAIL() << "missing extents accepted";
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("takes 4 arguments and then 2 launch extents "
                                    "(blockIdx.x, threadIdx.x), 6 in all; got 4"));
  }
  EXPECT_THROW(f(v.a, v.b, v.out, 0.5, 1.5, 8), TypeError);
  try {
    f(v.a, v.b, v.out, 0.5, 0, 8);
    FAIL() << "a zero grid accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("launch extent blockIdx.x (argument 4) must be in [1, "));
  }
  try {
    f(1, 2, 3, 0.5, 1, 8);
    FAIL() << "a launch without tensors accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("got no tensor argument"));
  }
}

TEST(DeviceCode, RefusesTensorsOnAnotherDeviceType) {
  TempDir dir;
  const std::string metadata =
      R"({"format": "opencl_c", "target": "opencl",
          "kernels": {"vector_add": {"args": ["tensor", "tensor", "tensor", "float32"]}}})";
  Module m = load_module(cpu_device_code(dir.path(), metadata));
  Vectors v(8);
  try {
    m["vector_add"](v.a, v.b, v.out, 0.5);
    FAIL() << "cpu tensors accepted by an opencl kernel";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("opencl_c code for 'opencl' devices, but its tensors are on cpu:0"));
  }
}

TEST(DeviceCode, ALaunchOnAnotherDeviceIsCheckedAfterACachedOne) {
  // A function keeps the kernel of its last launch; a launch elsewhere must not reuse it.
  TempDir dir;
  Module m = load_module(cpu_device_code(dir.path(), kVectorAddMetadata));
  Function f = m["vector_add"];
  Vectors v(8);
  f(v.a, v.b, v.out, 0.5, 1, 8);
  EXPECT_FLOAT_EQ(v.out_at(3), 3.5f);
  // The same kernel on tensors of an RPC session's CPU: another device type, refused.
  rpc::RPCSession session = rpc::local_session(Runtime::global());
  Tensor remote = Tensor::empty({8}, DataType::Float(32), session.cpu());
  try {
    f(remote, remote, remote, 0.5, 1, 8);
    FAIL() << "the cached cpu:0 kernel was used for a remote device";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("so code for 'cpu' devices, but its tensors are on remote"));
  }
  // And back on cpu:0, the launch still runs with new values.
  f(v.a, v.b, v.out, 2.0, 1, 8);
  EXPECT_FLOAT_EQ(v.out_at(3), 5.0f);
}

TEST(DeviceCode, SidecarErrorsNameTheFile) {
  TempDir dir;
  const fs::path code = dir.path() / "k.cl";
  write_text_file(code, "__kernel void k() {}");
  try {
    load_module(code);
    FAIL() << "device code without metadata accepted";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected the sidecar file " + code.string() + ".json"));
  }
  write_text_file(code.string() + ".json",
                  R"({"kernels": {"k": {"args": ["tensor", "complex"]}}})");
  try {
    load_module(code);
    FAIL() << "an unknown argument kind accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr(code.string() + ".json: kernel metadata: kernels.k.args[1]: "
                                                    "unknown argument kind 'complex'"));
  }
  write_text_file(code.string() + ".json", "{not json");
  EXPECT_THROW(load_module(code), ValueError);
  write_text_file(code.string() + ".json",
                  R"({"kernels": {"k": {"launch": ["threadIdx.x", "threadIdx.x"]}}})");
  try {
    load_module(code);
    FAIL() << "a repeated launch tag accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("appears twice"));
  }
  // An extension with no known format needs "format" and "target".
  const fs::path odd = dir.path() / "k.weird";
  write_text_file(odd, "bytes");
  write_text_file(odd.string() + ".json", R"({"kernels": {"k": {}}})");
  try {
    load_module(odd);
    FAIL() << "device code of unknown format accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("names no device code format"));
  }
  // No kernels at all.
  write_text_file(odd.string() + ".json", R"({"format": "so", "target": "cpu"})");
  try {
    load_module(odd);
    FAIL() << "metadata without kernels accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("describes no kernels"));
  }
}

TEST(DeviceCode, TarRoundTripKeepsKernelsAndMetadata) {
  TempDir dir;
  Module m = load_module(cpu_device_code(dir.path(), kVectorAddMetadata));
  const fs::path tar = dir.path() / "device.tar";
  m.export_library(tar, "tar");
  Module back = load_module(tar);
  EXPECT_EQ(back.kind(), kDeviceCodeKind);
  Vectors v(300);
  back["vector_add"](v.a, v.b, v.out, 2.0, 2, 256);
  EXPECT_FLOAT_EQ(v.out_at(299), 301.0f);
  ASSERT_EQ(back.artifacts().size(), 2u);
  EXPECT_EQ(back.artifacts()[1].data, m.artifacts()[1].data);
  // Exporting the loaded module again gives the same package contents.
  const fs::path again = dir.path() / "again.tar";
  back.export_library(again, "tar");
  EXPECT_EQ(load_module(again).artifacts()[0].data, m.artifacts()[0].data);
}

TEST(DeviceCode, ModulesRejectDuplicateKernelsAndMissingNames) {
  DeviceCode code;
  code.name = "a.kcpu";
  code.format = "so";
  code.target = "cpu";
  code.metadata_json = R"({"kernels": {"vector_add": {}}})";
  std::vector<DeviceCode> two = {code, code};
  two[1].name = "b.kcpu";
  try {
    make_device_code_module(two, Runtime::global());
    FAIL() << "two blobs defining one kernel accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel 'vector_add' is defined by two device code blobs"));
  }
  code.name = "dir/a.kcpu";
  EXPECT_THROW(make_device_code_module({code}, Runtime::global()), ValueError);
}

TEST(DeviceCode, BackendErrorsReachTheCaller) {
  // The metadata names a kernel the code lacks: the backend's NotFoundError surfaces at the
  // first call, naming the kernel.
  TempDir dir;
  Module m = load_module(cpu_device_code(
      dir.path(),
      R"({"format": "so", "target": "cpu", "kernels": {"no_such_kernel": {"args": ["tensor"]}}})"));
  Vectors v(4);
  try {
    m["no_such_kernel"](v.a);
    FAIL() << "a missing kernel launched";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no_such_kernel"));
  }
}

TEST(KernelMetadata, ParsesKindsTagsAndOptions) {
  const auto meta = sdk::parse_module_metadata(
      R"({"build_options": "-O3", "kernels": {"k": {"args": ["handle", "int32", "uint64", "float64"],
          "launch": ["blockIdx.y", "threadIdx.z", "tir.use_dyn_shared_memory"], "vendor_key": 1}}})");
  EXPECT_EQ(meta.build_options, "-O3");
  const auto& k = sdk::find_kernel(meta, "k");
  ASSERT_EQ(k.args.size(), 4u);
  EXPECT_EQ(k.args[0], sdk::ArgKind::kTensor);
  EXPECT_EQ(sdk::arg_size(k.args[1]), 4u);
  ASSERT_EQ(k.launch.size(), 3u);
  EXPECT_EQ(k.launch[2], sdk::LaunchTag::kDynamicSharedBytes);
  EXPECT_THROW(sdk::find_kernel(meta, "other"), sdk::Error);
  EXPECT_THROW(sdk::parse_module_metadata(R"({"kernels": []})"), sdk::Error);
  EXPECT_THROW(sdk::parse_module_metadata(R"({"kernels": {"k": {"args": "tensor"}}})"), sdk::Error);
  EXPECT_THROW(sdk::parse_module_metadata(R"({"build_options": 3})"), sdk::Error);
  EXPECT_TRUE(sdk::parse_module_metadata("").kernels.empty());
}

TEST(CacheFlushDeviceL2, WritesTheL2OfTheArgumentsDevice) {
  Function flush = registry::require("cache_flush_device_l2");
  Vectors v(16);
  bool cpu_reports_l2 = false;
  for (const auto& [key, value] : Runtime::global().backend(kDLCPU)->attributes(0)) {
    if (key == "l2_cache_bytes") cpu_reports_l2 = true;
  }
  if (!cpu_reports_l2) GTEST_SKIP() << "this CPU reports no L2 cache size in sysfs";
  EXPECT_NO_THROW(flush(v.a, v.b));
  try {
    flush(1, 2.0);
    FAIL() << "a flush without tensors accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no tensor argument"));
  }
}

}  // namespace
}  // namespace kiln
