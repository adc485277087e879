// SPDX-License-Identifier: Apache-2.0
// Module loading through the registry of format loaders: the order loaders are asked in, import
// cycles and depth, the path policy every nested file goes through, and a Runtime that knows
// only its own device-type names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kiln/kiln.h"
#include "kiln/module_loader.h"
#include "kiln/vm/virtual_machine.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A text VM program that imports `imports` and has one function.
std::string program_importing(const std::vector<std::string>& imports) {
  std::string text = "kiln_vm 1\n";
  for (const auto& i : imports) text += "import \"" + i + "\"\n";
  text += "func @main(x) regs=1 {\n  ret %0\n}\n";
  return text;
}

// A runtime without plugins: the host's own loaders only (VM executables, device code).
Runtime& bare_runtime() {
  static Runtime runtime([] {
    RuntimeOptions o;
    o.plugin_set = std::filesystem::path();
    o.read_environment = false;
    o.search_install_prefix = false;
    return o;
  }());
  return runtime;
}

TEST(ModuleLoader, AProgramWithoutImportsLoads) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "main.kvmt", program_importing({}));
  Module m = bare_runtime().load_module(dir.path() / "main.kvmt");
  EXPECT_EQ(m.kind(), vm::kExecutableModuleKind);
}

TEST(ModuleLoader, AModuleThatImportsItselfIsAnErrorNotAStackOverflow) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "self.kvmt", program_importing({"self.kvmt"}));
  try {
    bare_runtime().load_module(dir.path() / "self.kvmt");
    FAIL() << "a self-import loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("self.kvmt imports itself (self.kvmt -> self.kvmt)"));
  }
}

TEST(ModuleLoader, AnIndirectCycleNamesTheChain) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "a.kvmt", program_importing({"b.kvmt"}));
  write_text(dir.path() / "b.kvmt", program_importing({"c.kvmt"}));
  write_text(dir.path() / "c.kvmt", program_importing({"a.kvmt"}));
  try {
    bare_runtime().load_module(dir.path() / "a.kvmt");
    FAIL() << "a cycle loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("a.kvmt imports itself (a.kvmt -> b.kvmt -> c.kvmt -> a.kvmt)"));
  }
}

TEST(ModuleLoader, ASymlinkToItselfIsStillACycle) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "a.kvmt", program_importing({"link.kvmt"}));
  fs::create_symlink(dir.path() / "a.kvmt", dir.path() / "link.kvmt");
  EXPECT_THROW(bare_runtime().load_module(dir.path() / "a.kvmt"), ValueError);
}

TEST(ModuleLoader, NestingIsBoundedAndTheBoundIsAnOption) {
  const TemporaryDirectory dir("kiln_loader_test_");
  // m0 -> m1 -> ... -> m5, no cycle.
  for (int i = 0; i < 6; ++i) {
    write_text(
        dir.path() / ("m" + std::to_string(i) + ".kvmt"),
        program_importing(i < 5 ? std::vector<std::string>{"m" + std::to_string(i + 1) + ".kvmt"}
                                : std::vector<std::string>{}));
  }
  EXPECT_NO_THROW(bare_runtime().load_module(dir.path() / "m0.kvmt"));
  ModuleLoadOptions shallow;
  shallow.max_depth = 3;
  try {
    bare_runtime().load_module(dir.path() / "m0.kvmt", shallow);
    FAIL() << "nesting beyond max_depth loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("imports nest deeper than 3 modules"));
  }
}

TEST(ModuleLoader, ThePathPolicySeesEveryImportBeforeItIsOpened) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "main.kvmt", program_importing({"/nonexistent/outside.kvmt"}));
  std::vector<fs::path> seen;
  ModuleLoadOptions options;
  options.check_path = [&](const fs::path& p) {
    seen.push_back(p);
    if (p.parent_path() != fs::absolute(dir.path()).lexically_normal()) {
      throw ValueError("outside: " + p.string());
    }
  };
  try {
    bare_runtime().load_module(dir.path() / "main.kvmt", options);
    FAIL() << "the import outside the folder was opened";
  } catch (const ValueError& e) {
    // The policy's error, not "cannot find": nothing was looked up outside the folder.
    EXPECT_THAT(e.what(), HasSubstr("outside: /nonexistent/outside.kvmt"));
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].filename(), "main.kvmt");
  EXPECT_EQ(seen[1], fs::path("/nonexistent/outside.kvmt"));
}

TEST(ModuleLoader, ThePathPolicyAlsoSeesDeviceCodeSidecars) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "k.cl", "__kernel void k(__global float* x) {}\n");
  write_text(dir.path() / "k.cl.json", R"({"kernels": {"k": {"args": ["tensor"]}}})");
  std::vector<std::string> seen;
  ModuleLoadOptions options;
  options.check_path = [&](const fs::path& p) { seen.push_back(p.filename().string()); };
  Module m = bare_runtime().load_module(dir.path() / "k.cl", options);
  EXPECT_EQ(m.kind(), kDeviceCodeKind);
  EXPECT_THAT(seen, ::testing::ElementsAre("k.cl", "k.cl.json"));
}

// A format loader for ".probe" files, to check the registry's order and listing.
class ProbeLoader : public FormatLoader {
 public:
  explicit ProbeLoader(std::string tag) : tag_(std::move(tag)) {}
  std::string describe() const override { return "probe " + tag_; }
  std::vector<std::string> formats() const override { return {"probe"}; }
  bool accepts(const fs::path&, const std::string& format) const override {
    return format == "probe";
  }
  Module load(const fs::path&, ModuleLoadContext&) const override {
    return Module(make_object<ModuleObj>("probe." + tag_, ""));
  }

 private:
  std::string tag_;
};

TEST(ModuleLoader, TheRegistryAsksHigherPrioritiesFirstAndListsEveryFormat) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "x.probe", "");
  ModuleLoaderRegistry registry;
  registry.add(std::make_shared<ProbeLoader>("low"), 1);
  registry.add(std::make_shared<ProbeLoader>("high"), 5);
  registry.add(std::make_shared<ProbeLoader>("later-equal"), 5);
  EXPECT_EQ(registry.load(dir.path() / "x.probe", bare_runtime()).kind(), "probe.high");
  EXPECT_EQ(registry.formats(), std::vector<std::string>{"probe"});
  try {
    registry.load(dir.path() / "missing.probe", bare_runtime());
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot find module file"));
  }
  write_text(dir.path() / "x.other", "");
  try {
    registry.load(dir.path() / "x.other", bare_runtime());
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no loader for '.other' files"));
    EXPECT_THAT(e.what(), HasSubstr("loaders available: probe"));
  }
}

TEST(ModuleLoader, ABareRuntimeListsTheHostsOwnFormats) {
  const auto formats = bare_runtime().loader_formats();
  // "so": TVM-compiled libraries, which the host reads itself (docs/tvm-interop.md).
  EXPECT_THAT(formats, ::testing::IsSupersetOf({"kvm", "kvmt", "cl", "ptx", "hsaco", "so"}));
  EXPECT_THAT(formats, ::testing::Not(::testing::Contains("tar")));
}

TEST(RuntimeContext, RemoteSessionsAttachAndDetach) {
  Runtime& rt = bare_runtime();
  const int32_t a = rt.attach_remote_session([](int32_t) { return Ref<DeviceBackend>(); });
  const int32_t b = rt.attach_remote_session([](int32_t) { return Ref<DeviceBackend>(); });
  EXPECT_NE(a, b);
  const int32_t remote_cpu = kDLCPU + (b + 1) * kRemoteDeviceMask;
  EXPECT_FALSE(rt.find_backend(remote_cpu));  // the lookup answered null: session gone
  rt.detach_remote_session(b);
  try {
    rt.backend(remote_cpu);
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("closed or was never opened with this runtime"));
  }
  rt.detach_remote_session(a);
  // Indices are never reused by a runtime: a stale remote device cannot reach a new session.
  const int32_t c = rt.attach_remote_session([](int32_t) { return Ref<DeviceBackend>(); });
  EXPECT_GT(c, b);
  rt.detach_remote_session(c);
}

TEST(RuntimeContext, AVmAllocatesThroughTheRuntimeItsModuleWasLoadedWith) {
  const TemporaryDirectory dir("kiln_loader_test_");
  write_text(dir.path() / "main.kvmt", program_importing({}));
  // Loaded by a runtime without plugins, the program's VM finds no cpu backend there, even
  // though the process-wide default runtime has one.
  ASSERT_TRUE(Runtime::global().find_backend(kDLCPU));
  Module bare = bare_runtime().load_module(dir.path() / "main.kvmt");
  try {
    vm::VirtualMachine machine(bare, {Device::cpu()});
    FAIL() << "the VM allocated through another runtime";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("loaded backends: none"));
  }
  Module loaded = Runtime::global().load_module(dir.path() / "main.kvmt");
  vm::VirtualMachine machine(loaded, {Device::cpu()});
  EXPECT_EQ(machine.get_function("main")(int64_t{5}).cast<int64_t>(), 5);
}

TEST(RuntimeContext, AHostTensorNeedsNoRuntimeAndAViewWithoutBackendSaysSo) {
  Tensor host = Tensor::empty_host({4}, DataType::Float(32));
  EXPECT_EQ(host.device(), Device::cpu());
  EXPECT_FALSE(host.get()->backend);
  // A view of "device" memory Kiln did not allocate has no backend to copy through.
  DLTensor dl{};
  int64_t shape[] = {4};
  float data[4] = {};
  dl.data = data;
  dl.ndim = 1;
  dl.shape = shape;
  dl.dtype = DataType::Float(32);
  dl.device = Device{kDLOpenCL, 0}.to_dlpack();
  Tensor view = Tensor::view(&dl);
  try {
    view.to_host();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no device backend to copy through"));
  }
}

}  // namespace
}  // namespace kiln
