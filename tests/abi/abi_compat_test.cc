// SPDX-License-Identifier: Apache-2.0
// ABI 1.0 and an invented 1.1 loading in each other, as docs/plugin-abi.md §15.1 says they must:
//   - a 1.0 plugin in a 1.1 host: negotiates 1.0; the host reads its shorter tables with the
//     appended slots NULL (zero extension) and its components with their 1.0 stride;
//   - a 1.1 plugin that also serves 1.0, in this (1.0) host: its manifest of a newer format
//     loads, its longer components, tables and metrics are read as 1.0, an unknown metric kind
//     is skipped, and its kernel library loads through the cpu plugin;
//   - a 1.1 plugin that needs 1.1, in this host: refused with "upgrade Kiln", at the manifest
//     when it says so, else at negotiation (never as an undescribed success);
//   - a 1.1 plugin in a 1.1 host: negotiates 1.1 and sees the 1.1 fields and extension.
// The "1.1 host" is this test, driving a plugin's entry point with the 1.1 view of the structs
// (abi_1_1.h); the "1.1 plugins" are tests/abi/plugin_1_1.c.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "abi_1_1.h"
#include "kiln/kiln.h"
#include "kiln/profiling/collector.h"
#include "kiln/sdk/abi.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fake_dir(const std::string& name) { return fs::path(KILN_FAKE_PLUGIN_DIR) / name; }

std::unique_ptr<Runtime> isolated_runtime(std::vector<fs::path> dirs) {
  RuntimeOptions options;
  options.search_paths = std::move(dirs);
  options.read_environment = false;
  options.search_install_prefix = false;
  return std::make_unique<Runtime>(options);
}

const PluginStatus& status_of(const Runtime& rt, const std::string& name) {
  for (const auto& s : rt.plugins()) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("no status for " + name);
}

std::map<std::string, Any> attributes_of(const Runtime& rt, int32_t type) {
  std::map<std::string, Any> out;
  for (auto& [key, value] : rt.backend(type)->attributes(0)) out[key] = value;
  return out;
}

// ---- A fake 1.1 host: the offer, its services and an extension chain in their 1.1 layouts.

// What the fake host's KilnError handles point at.
struct FakeHostError {
  int32_t code;
  std::string message;
};
const FakeHostError& fake(const KilnError* error) {
  return *reinterpret_cast<const FakeHostError*>(error);
}

KilnError* host_error_new(void*, int32_t code, const char* message) {
  return reinterpret_cast<KilnError*>(new FakeHostError{code, message != nullptr ? message : ""});
}
int32_t host_error_code(void*, const KilnError* error) { return fake(error).code; }
const char* host_error_message(void*, const KilnError* error) {
  return fake(error).message.c_str();
}
void host_error_free(void*, KilnError* error) { delete reinterpret_cast<FakeHostError*>(error); }
void host_log(void*, int32_t, const char*, const char*) {}
int32_t host_log_enabled(void*, int32_t) { return 0; }
uint64_t host_clock_ns(void*) { return 1; }

// What the fake 1.1 host learnt from one negotiation.
struct Negotiation {
  void* library = nullptr;
  std::string error;  // empty on success
  KilnPluginInfo info{};
  std::vector<KilnComponent> components;  // read with the stride rule

  ~Negotiation() {
    if (error.empty() && info.shutdown != nullptr) info.shutdown(info.plugin_state);
    if (library != nullptr) dlclose(library);
  }
};

// Runs `library`'s entry point as a 1.1 host offering 1.0..1.1, with a vendor extension and
// an extension of a type nobody knows in the offer's chain.
std::unique_ptr<Negotiation> negotiate_as_1_1_host(const fs::path& library) {
  static KilnHostServices_1_1 services = [] {
    KilnHostServices_1_1 s{};
    s.base.struct_size = sizeof(s);
    s.base.error_new = host_error_new;
    s.base.error_code = host_error_code;
    s.base.error_message = host_error_message;
    s.base.error_free = host_error_free;
    s.base.log = host_log;
    s.base.log_enabled = host_log_enabled;
    s.host_clock_ns = host_clock_ns;
    return s;
  }();
  static const FakeVendorExtension vendor = [] {
    FakeVendorExtension e{};
    e.header.struct_size = sizeof(e);
    e.header.type = FAKE_EXTENSION_TYPE;
    e.magic = FAKE_EXTENSION_MAGIC;
    return e;
  }();
  static const KilnExtension unknown = {sizeof(KilnExtension), 7, 0, &vendor.header};

  auto n = std::make_unique<Negotiation>();
  n->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n->library == nullptr) throw std::runtime_error(dlerror());
  auto entry = reinterpret_cast<KilnPluginEntryFn>(dlsym(n->library, KILN_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) throw std::runtime_error("no entry point in " + library.string());

  KilnNegotiateIn_1_1 in{};
  in.base.struct_size = sizeof(in);
  in.base.next = &unknown;
  in.base.abi_major = 1;
  in.base.abi_minor = 1;
  in.base.host = &services.base;
  in.base.options_json = "{}";
  in.host_label = "fake host 1.1";
  n->info.struct_size = sizeof(n->info);
  if (KilnError* err = entry(&in.base, &n->info)) {
    n->error = fake(err).message;
    host_error_free(nullptr, err);
    return n;
  }
  if (n->info.name == nullptr) {
    n->error = "success without describing the plugin";
    return n;
  }
  const sdk::StridedArray<KilnComponent> components(n->info.components, n->info.num_components);
  EXPECT_EQ(components.check("KilnComponent"), "");
  for (size_t i = 0; i < components.size(); ++i) n->components.push_back(components[i]);
  return n;
}

// The device table of a negotiation as the 1.1 host reads it (zero-extended to 1.1).
KilnDeviceBackend_1_1 device_table_1_1(const Negotiation& n) {
  for (const KilnComponent& c : n.components) {
    if (c.kind != KILN_COMPONENT_DEVICE) continue;
    EXPECT_EQ(sdk::check_struct<KilnDeviceBackend>(c.table, "KilnDeviceBackend"), "");
    KilnDeviceBackend_1_1 table;
    std::memset(&table, 0, sizeof(table));
    std::memcpy(&table, c.table, std::min(sdk::struct_size_of(c.table), sizeof(table)));
    return table;
  }
  throw std::runtime_error("no device component");
}

TEST(AbiCompat, APluginBuiltWithTheSdkNegotiates1_0WithA1_1Host) {
  auto n = negotiate_as_1_1_host(fs::path(KILN_PLUGIN_DIR) / "libkiln_cpu.so");
  ASSERT_EQ(n->error, "");
  EXPECT_EQ(n->info.abi_major, 1);
  EXPECT_EQ(n->info.abi_minor, 0) << "a 1.0 plugin answers its own version";
  ASSERT_FALSE(n->components.empty());
  const KilnDeviceBackend_1_1 table = device_table_1_1(*n);
  EXPECT_EQ(table.device_reset, nullptr) << "a slot 1.0 lacks reads NULL";
  int32_t count = 0;
  const char* why = nullptr;
  ASSERT_EQ(table.base.device_count(table.base.self, &count, &why), nullptr);
  EXPECT_EQ(count, 1);
  void* memory = nullptr;
  ASSERT_EQ(table.base.alloc(table.base.self, 0, 64, 64, &memory), nullptr);
  EXPECT_EQ(table.base.free(table.base.self, 0, memory), nullptr);
}

TEST(AbiCompat, APlainC1_0PluginNegotiates1_0WithA1_1Host) {
  auto n = negotiate_as_1_1_host(fs::path(KILN_STUB_PLUGIN_DIR) / "stub_ok" / "libkiln_stub_ok.so");
  ASSERT_EQ(n->error, "");
  EXPECT_EQ(n->info.abi_minor, 0);
  EXPECT_EQ(device_table_1_1(*n).device_reset, nullptr);
}

TEST(AbiCompat, A1_1PluginNegotiates1_1WithA1_1HostAndSeesItsAdditions) {
  auto n = negotiate_as_1_1_host(fake_dir("abi11_only") / "libkiln_abi11_only.so");
  ASSERT_EQ(n->error, "");
  EXPECT_EQ(n->info.abi_minor, 1);
  ASSERT_EQ(n->components.size(), 2u);
  const KilnDeviceBackend_1_1 table = device_table_1_1(*n);
  ASSERT_NE(table.device_reset, nullptr) << "the appended slot is visible to a 1.1 host";
  EXPECT_EQ(table.device_reset(table.base.self, 0), nullptr);
  std::map<std::string, KilnAny> attributes;
  table.base.device_attributes(
      table.base.self, 0,
      [](void* ctx, const char* key, const KilnAny* value) {
        (*static_cast<std::map<std::string, KilnAny>*>(ctx))[key] = *value;
      },
      &attributes);
  EXPECT_EQ(attributes["negotiated_minor"].value.v_int64, 1);
  EXPECT_STREQ(attributes["host_label"].value.v_str, "fake host 1.1");
  EXPECT_EQ(attributes["extension_seen"].value.v_int64, 1)
      << "found past an extension of unknown type";
  EXPECT_EQ(attributes["reset_calls"].value.v_int64, 1);
}

TEST(AbiCompat, A1_1PluginThatServes1_0LoadsInThisHost) {
  auto rt = isolated_runtime({fake_dir("abi11_serves10")});
  const PluginStatus& s = status_of(*rt, "abi11_serves10");
  ASSERT_EQ(s.state, PluginStatus::State::kLoaded) << s.reason;
  EXPECT_EQ(s.abi, "1.0") << "it answered this host's version";
  // Its 40-byte components were read with their stride: both the device and the collector.
  EXPECT_THAT(s.provides, ::testing::Contains("device:abi11_serves10"));
  auto attributes = attributes_of(*rt, 121);
  EXPECT_EQ(attributes["negotiated_minor"].cast<int64_t>(), 0);
  EXPECT_EQ(attributes["host_label"].cast<std::string>(), "") << "no 1.1 field from a 1.0 host";
  EXPECT_EQ(attributes["extension_seen"].cast<int64_t>(), 0);
  // Memory through its (longer) table.
  Tensor t = Tensor::empty({4}, DataType::Int(32), Device{121, 0}, *rt);
  std::vector<int32_t> v{1, 2, 3, 4}, back(4);
  t.copy_from(v.data(), 16);
  t.copy_to(back.data(), 16);
  EXPECT_EQ(v, back);

  // Its 1.1-sized metric is read; the metric of a kind 1.0 lacks is skipped, not mislabelled.
  auto collector = profiling::plugin_collector("abi11_serves10", *rt);
  collector->init({Device{121, 0}});
  auto state = collector->start(Device{121, 0});
  ASSERT_TRUE(state);
  profiling::MetricMap metrics = collector->stop(state);
  ASSERT_EQ(metrics.count("fake::calls"), 1u);
  EXPECT_EQ(std::get<profiling::Count>(metrics["fake::calls"]).value, 7);
  EXPECT_EQ(metrics.count("fake::histogram"), 0u);
}

TEST(AbiCompat, A1_1KernelLibraryLoadsWhenItServes1_0AndSaysUpgradeKilnOtherwise) {
  RuntimeOptions options;
  options.search_paths = {KILN_PLUGIN_DIR};
  options.read_environment = false;
  options.search_install_prefix = false;
  Runtime rt(options);
  Module m = rt.load_module(fake_dir("abi11_serves10") / "libkiln_abi11_serves10.so");
  EXPECT_EQ(m.entry()().cast<int64_t>(), 42);
  try {
    rt.load_module(fake_dir("abi11_only") / "libkiln_abi11_only.so");
    FAIL() << "a kernel library needing 1.1 loaded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs Kiln ABI 1.1"));
    EXPECT_THAT(e.what(), HasSubstr("upgrade Kiln"));
  }
}

TEST(AbiCompat, A1_1PluginThatNeeds1_1SaysUpgradeKiln) {
  auto rt = isolated_runtime({fake_dir("abi11_only"), fake_dir("abi11_lie")});
  const PluginStatus& by_manifest = status_of(*rt, "abi11_only");
  EXPECT_EQ(by_manifest.state, PluginStatus::State::kFailed);
  EXPECT_THAT(by_manifest.reason, HasSubstr("manifest says ABI 1.1"));
  EXPECT_THAT(by_manifest.reason, HasSubstr("upgrade Kiln"));
  // A manifest claiming 1.0 over a binary that needs 1.1: the plugin itself refuses, with its
  // reason, because versions are checked before sizes.
  const PluginStatus& by_negotiation = status_of(*rt, "abi11_lie");
  EXPECT_EQ(by_negotiation.state, PluginStatus::State::kFailed);
  EXPECT_THAT(by_negotiation.reason, HasSubstr("negotiation refused"));
  EXPECT_THAT(by_negotiation.reason, HasSubstr("needs Kiln ABI 1.1"));
  EXPECT_THAT(by_negotiation.reason, HasSubstr("upgrade Kiln"));
}

TEST(AbiCompat, TheSdkChecksVersionsBeforeSizes) {
  // A host of another major whose offer is only 1.0-sized, and a too-small answer struct: the
  // SDK's negotiate() still answers with an error naming both versions, never a silent NULL.
  void* library = dlopen((fs::path(KILN_PLUGIN_DIR) / "libkiln_cpu.so").c_str(), RTLD_NOW);
  ASSERT_NE(library, nullptr) << dlerror();
  auto entry = reinterpret_cast<KilnPluginEntryFn>(dlsym(library, KILN_PLUGIN_ENTRY_SYMBOL));
  static KilnHostServices services{};  // the plugin keeps a pointer to it
  services.struct_size = KILN_HOST_SERVICES_SIZE_1_0;
  services.error_new = host_error_new;
  services.error_code = host_error_code;
  services.error_message = host_error_message;
  services.error_free = host_error_free;
  services.log = host_log;
  services.log_enabled = host_log_enabled;
  KilnNegotiateIn in{};
  in.struct_size = KILN_NEGOTIATE_IN_SIZE_1_0;
  in.abi_major = 2;
  in.host = &services;
  in.options_json = "{}";
  KilnPluginInfo info{};
  info.struct_size = 8;
  KilnError* err = entry(&in, &info);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(fake(err).code, KILN_ERROR_ABI);
  EXPECT_THAT(fake(err).message, HasSubstr("implements Kiln ABI 1.0 but the host offers 2.0"));
  host_error_free(nullptr, err);
  in.abi_major = 1;
  err = entry(&in, &info);
  ASSERT_NE(err, nullptr) << "the answer struct is below its 1.0 layout";
  EXPECT_THAT(fake(err).message, HasSubstr("KilnPluginInfo"));
  host_error_free(nullptr, err);
  dlclose(library);
}

TEST(AbiCompat, ExtensionChainsAreBoundedAndSkipUnknownTypes) {
  KilnExtension a{sizeof(KilnExtension), 5, 0, nullptr};
  KilnExtension b{sizeof(KilnExtension), 6, 0, &a};
  EXPECT_EQ(kiln_find_extension(&b, 5), &a);
  EXPECT_EQ(kiln_find_extension(&b, 9), nullptr);
  a.next = &b;  // a cycle ends after KILN_EXTENSION_CHAIN_MAX hops, not in a hang
  EXPECT_EQ(kiln_find_extension(&b, 9), nullptr);
}

TEST(AbiCompat, StridedArraysRefuseMixedOrUndersizedElements) {
  KilnComponent_1_1 components[2] = {};
  components[0].base.struct_size = sizeof(KilnComponent_1_1);
  components[1].base.struct_size = sizeof(KilnComponent_1_1);
  components[1].base.name = "second";
  sdk::StridedArray<KilnComponent> view(&components[0].base, 2);
  EXPECT_EQ(view.check("KilnComponent"), "");
  EXPECT_STREQ(view[1].name, "second") << "element 1 is found at the 1.1 stride";
  components[1].base.struct_size = sizeof(KilnComponent);
  EXPECT_THAT(view.check("KilnComponent"), HasSubstr("#1 has struct_size 32 but #0 has 40"));
  components[0].base.struct_size = 16;
  EXPECT_THAT(view.check("KilnComponent"), HasSubstr("smaller than the 1.0 layout (32 bytes)"));
  EXPECT_THAT(sdk::StridedArray<KilnComponent>(nullptr, 1).check("KilnComponent"),
              HasSubstr("NULL"));
}

}  // namespace
}  // namespace kiln
