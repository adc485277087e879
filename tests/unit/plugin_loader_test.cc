// SPDX-License-Identifier: Apache-2.0
// Plugin discovery and loading against stub plugins built from tests/plugins/stub_plugin.c.
// Every misbehaving plugin must end with a precise status while the others keep working.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "plugin/copy_table.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path stub_dir(const std::string& name) { return fs::path(KILN_STUB_PLUGIN_DIR) / name; }

// A runtime that sees only `dirs` (no environment, no install prefix, no plugin set).
std::unique_ptr<Runtime> isolated_runtime(std::vector<fs::path> dirs,
                                          std::optional<fs::path> plugin_set = std::nullopt) {
  RuntimeOptions options;
  options.search_paths = std::move(dirs);
  options.read_environment = false;
  options.search_install_prefix = false;
  options.plugin_set = plugin_set;
  return std::make_unique<Runtime>(options);
}

const PluginStatus& status_of(const Runtime& rt, const std::string& name) {
  for (const auto& s : rt.plugins()) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("no status for " + name);
}

std::vector<fs::path> all_stub_dirs() {
  std::vector<fs::path> dirs;
  for (const char* n :
       {"stub_ok", "stub_no_entry", "stub_major2", "stub_manifest_major2", "stub_newer_minor",
        "stub_answers_newer_minor", "stub_null_optional", "stub_null_required", "stub_init_fail",
        "stub_small_struct", "stub_wrong_name"}) {
    dirs.push_back(stub_dir(n));
  }
  return dirs;
}

TEST(PluginLoader, GoodStubLoadsAndServesItsDevice) {
  auto rt = isolated_runtime({stub_dir("stub_ok")});
  const auto& s = status_of(*rt, "stub_ok");
  EXPECT_EQ(s.state, PluginStatus::State::kLoaded) << s.reason;
  EXPECT_EQ(s.version, "0.0.1");
  EXPECT_EQ(s.abi, "1.0");
  ASSERT_EQ(s.provides, std::vector<std::string>{"device:stub_ok"});
  auto backend = rt->backend(100);
  EXPECT_EQ(backend->name(), "stub_ok");
  EXPECT_EQ(backend->device_count(), 1);
  EXPECT_EQ(rt->parse_device("stub_ok:0").type, 100);
  // The name belongs to that runtime: the built-in table does not know it.
  EXPECT_THROW(Device::parse("stub_ok:0"), ValueError);
  // Memory made through the plugin works through the Tensor API.
  Tensor t = Tensor::empty({4}, DataType::Int(32), Device{100, 0}, *rt);
  std::vector<int32_t> v{1, 2, 3, 4}, back(4);
  t.copy_from(v.data(), 16);
  t.copy_to(back.data(), 16);
  EXPECT_EQ(v, back);
}

TEST(PluginLoader, EveryBrokenStubGetsAPreciseStatusAndTheGoodOneStillLoads) {
  auto rt = isolated_runtime(all_stub_dirs());
  EXPECT_EQ(status_of(*rt, "stub_ok").state, PluginStatus::State::kLoaded);
  EXPECT_TRUE(rt->find_backend(100));

  struct Expectation {
    const char* name;
    std::vector<const char*> reason_parts;
  };
  const Expectation expected[] = {
      {"stub_no_entry", {"does not export the entry symbol kiln_plugin_negotiate"}},
      {"stub_major2", {"plugin answered ABI 2.0", "this host speaks ABI 1.0"}},
      {"stub_manifest_major2", {"manifest says ABI 2.0", "major versions differ"}},
      {"stub_newer_minor", {"manifest says ABI 1.7", "newer than this host's ABI 1.0"}},
      {"stub_answers_newer_minor", {"plugin answered ABI 1.7"}},
      {"stub_null_required", {"lacks the required slot 'alloc'"}},
      {"stub_init_fail", {"negotiation refused", "init failed: device firmware missing"}},
      {"stub_small_struct",
       {"KilnDeviceBackend 'stub_small_struct' has struct_size 24", "smaller than the 1.0 layout"}},
      {"stub_wrong_name",
       {"calls itself 'not_stub_wrong_name'", "manifest says 'stub_wrong_name'"}},
  };
  for (const auto& e : expected) {
    const auto& s = status_of(*rt, e.name);
    EXPECT_EQ(s.state, PluginStatus::State::kFailed) << e.name;
    for (const char* part : e.reason_parts) {
      EXPECT_THAT(s.reason, HasSubstr(part)) << e.name;
    }
  }
}

TEST(PluginLoader, NullOptionalSlotsLoadWithFallbacks) {
  auto rt = isolated_runtime({stub_dir("stub_null_optional")});
  const auto& s = status_of(*rt, "stub_null_optional");
  ASSERT_EQ(s.state, PluginStatus::State::kLoaded) << s.reason;
  auto backend = rt->backend(106);
  EXPECT_FALSE(backend->has_timer());
  EXPECT_FALSE(backend->has_streams());
  EXPECT_FALSE(backend->has_modules());
  EXPECT_THROW(backend->timer_create(0), UnimplementedError);
  try {
    backend->stream_create(0);
    FAIL() << "expected UnimplementedError";
  } catch (const UnimplementedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not implement 'stream_create'"));
  }
}

TEST(PluginLoader, OlderOrEqualMinorLoadsAndSeesOnlyItsSlots) {
  // stub_table_1_0 answers 1.0 with a device table of the 1.0 layout (the oldest a 1.x host
  // accepts) followed by 0xA5 junk, and no timer slots.
  auto rt = isolated_runtime({stub_dir("stub_table_1_0")});
  const PluginStatus& s = status_of(*rt, "stub_table_1_0");
  ASSERT_EQ(s.state, PluginStatus::State::kLoaded) << s.reason;
  auto backend = rt->backend(113);
  const KilnDeviceBackend& table = backend->table();
  EXPECT_EQ(table.struct_size, sizeof(KilnDeviceBackend)) << "the host's copy, of its own size";
  // Past the plugin's table the host's copy is zero, not the junk. (No bytes today, while the
  // 1.0 layout is the whole table; the slots a later minor appends land here.)
  const auto* bytes = reinterpret_cast<const unsigned char*>(&table);
  for (size_t i = KILN_DEVICE_BACKEND_SIZE_1_0; i < sizeof(KilnDeviceBackend); ++i) {
    EXPECT_EQ(bytes[i], 0) << "byte " << i << " of the host's copy";
  }
  EXPECT_TRUE(backend->has_streams());
  EXPECT_FALSE(backend->has_timer());
  // The documented fallback for a backend without timer slots: sync + the host's clock.
  TimeEvaluatorOptions o;
  o.number = 1;
  o.repeat = 1;
  Function nop = Function::from_packed("test.nop", [](const Any*, int32_t) { return Any(); });
  const BenchmarkResult r = TimeEvaluator(nop, Device{113, 0}, o, *rt)({});
  EXPECT_EQ(r.timer, "wall");
}

// Two minors of one function table: V2 appends two slots to V1.
struct TableV1 {
  size_t struct_size;
  void (*a)();
  void (*b)();
};
struct TableV2 {
  size_t struct_size;
  void (*a)();
  void (*b)();
  void (*c)();
  void (*d)();
};
void slot_a() {}
void slot_b() {}

TEST(PluginLoader, TheHostZeroExtendsAnOlderMinorsTable) {
  // A V1 plugin's table with junk after it, as a V2 host copies it.
  union {
    TableV1 v1;
    unsigned char bytes[sizeof(TableV2) + 16];
  } plugin_memory;
  std::memset(&plugin_memory, 0xA5, sizeof(plugin_memory));
  plugin_memory.v1 = TableV1{sizeof(TableV1), slot_a, slot_b};
  const auto host = plugin::copy_table<TableV2>(&plugin_memory);
  EXPECT_EQ(host->struct_size, sizeof(TableV2));
  EXPECT_EQ(host->a, &slot_a);
  EXPECT_EQ(host->b, &slot_b);
  EXPECT_EQ(host->c, nullptr) << "a slot the older minor lacks reads NULL, not what follows it";
  EXPECT_EQ(host->d, nullptr);
}

TEST(PluginLoader, TheHostCutsANewerMinorsTableToItsOwnLayout) {
  const TableV2 newer{sizeof(TableV2), slot_a, slot_b, slot_b, slot_a};
  const auto host = plugin::copy_table<TableV1>(&newer);
  EXPECT_EQ(host->struct_size, sizeof(TableV1));
  EXPECT_EQ(host->a, &slot_a);
  EXPECT_EQ(host->b, &slot_b);
}

TEST(PluginLoader, TwoPluginsClaimingOneDeviceTypeAreRefusedUntilThePluginSetChooses) {
  auto rt = isolated_runtime({stub_dir("stub_dup_a"), stub_dir("stub_dup_b")});
  for (const char* name : {"stub_dup_a", "stub_dup_b"}) {
    const auto& s = status_of(*rt, name);
    EXPECT_EQ(s.state, PluginStatus::State::kFailed) << name;
    EXPECT_THAT(s.reason,
                HasSubstr("device type 'dupdev' is also claimed by stub_dup_a, stub_dup_b"));
    EXPECT_THAT(s.reason, HasSubstr("device_types:"));
  }
  EXPECT_FALSE(rt->find_backend(111));

  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "device_types:\n  dupdev: stub_dup_b\n";
  auto chosen = isolated_runtime({stub_dir("stub_dup_a"), stub_dir("stub_dup_b")}, set);
  EXPECT_EQ(status_of(*chosen, "stub_dup_b").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(*chosen, "stub_dup_a").state, PluginStatus::State::kLoaded);
  ASSERT_TRUE(chosen->find_backend(111));
  EXPECT_EQ(chosen->find_backend(111)->plugin_name(), "stub_dup_b");
}

TEST(PluginLoader, DeviceTypeCodesOutsideTheVendorRangeOrTakenAreRefusedNamingBoth) {
  auto rt = isolated_runtime({stub_dir("stub_ok"), stub_dir("stub_code_130")});
  const auto& remote_range = status_of(*rt, "stub_code_130");
  EXPECT_EQ(remote_range.state, PluginStatus::State::kFailed);
  EXPECT_THAT(remote_range.reason,
              HasSubstr("plugin 'stub_code_130' declares device type code 130 ('stub_code_130'), "
                        "outside the codes a plugin may serve"));
  EXPECT_THAT(remote_range.reason, HasSubstr("vendor codes 64 to 127"));
  EXPECT_FALSE(rt->find_backend(130));
  EXPECT_EQ(status_of(*rt, "stub_ok").state, PluginStatus::State::kLoaded);

  // Two plugins with one code under different names: the second is refused, naming both.
  auto clash = isolated_runtime({stub_dir("stub_ok"), stub_dir("stub_code_clash")});
  const PluginStatus& a = status_of(*clash, "stub_ok");
  const PluginStatus& b = status_of(*clash, "stub_code_clash");
  const PluginStatus& refused = a.state == PluginStatus::State::kFailed ? a : b;
  const PluginStatus& loaded = a.state == PluginStatus::State::kFailed ? b : a;
  EXPECT_EQ(loaded.state, PluginStatus::State::kLoaded);
  EXPECT_EQ(refused.state, PluginStatus::State::kFailed);
  EXPECT_THAT(refused.reason, HasSubstr("plugin '" + refused.name +
                                        "' declares device type code "
                                        "100"));
  EXPECT_THAT(refused.reason, HasSubstr("which plugin '" + loaded.name + "' already serves"));
}

TEST(PluginLoader, ManifestWhoseLibraryIsMissing) {
  TempDir dir;
  std::ofstream(dir.path() / "ghost.yaml") << "name: ghost\nversion: 1.0.0\nkind: device\n"
                                              "library: libghost.so\nabi: \"1.0\"\n"
                                              "provides:\n  devices: [ghost]\n";
  auto rt = isolated_runtime({dir.path(), stub_dir("stub_ok")});
  const auto& s = status_of(*rt, "ghost");
  EXPECT_EQ(s.state, PluginStatus::State::kFailed);
  EXPECT_THAT(s.reason, HasSubstr("libghost.so named by the manifest does not exist"));
  EXPECT_EQ(status_of(*rt, "stub_ok").state, PluginStatus::State::kLoaded);
}

TEST(PluginLoader, BadManifestIsReportedWithItsPosition) {
  TempDir dir;
  std::ofstream(dir.path() / "broken.yaml") << "name: broken\nverison: 1.0.0\n";
  auto rt = isolated_runtime({dir.path()});
  const auto& s = status_of(*rt, "broken");
  EXPECT_EQ(s.state, PluginStatus::State::kFailed);
  EXPECT_THAT(s.reason, HasSubstr("broken.yaml:2:1"));
  EXPECT_THAT(s.reason, HasSubstr("did you mean 'version'"));
}

TEST(PluginLoader, LibraryThatIsNotASharedObject) {
  TempDir dir;
  std::ofstream(dir.path() / "junk.yaml") << "name: junk\nversion: 1.0.0\nkind: device\n"
                                             "library: libjunk.so\nabi: \"1.0\"\n"
                                             "provides:\n  devices: [junk]\n";
  std::ofstream(dir.path() / "libjunk.so") << "not an ELF file";
  auto rt = isolated_runtime({dir.path()});
  const auto& s = status_of(*rt, "junk");
  EXPECT_EQ(s.state, PluginStatus::State::kFailed);
  EXPECT_THAT(s.reason, HasSubstr("cannot load library"));
  EXPECT_THAT(s.reason, HasSubstr("libjunk.so"));
}

TEST(PluginLoader, FirstManifestOfANameWinsAndTheRestAreShadowed) {
  auto rt = isolated_runtime({stub_dir("stub_ok"), stub_dir("stub_ok")});
  // The same directory twice is searched once.
  EXPECT_EQ(rt->search_paths().size(), 1u);
  TempDir dir;
  fs::copy(stub_dir("stub_ok"), dir.path(), fs::copy_options::recursive);
  auto rt2 = isolated_runtime({stub_dir("stub_ok"), dir.path()});
  ASSERT_EQ(rt2->plugins().size(), 2u);
  EXPECT_EQ(rt2->plugins()[0].state, PluginStatus::State::kLoaded);
  EXPECT_EQ(rt2->plugins()[1].state, PluginStatus::State::kDisabled);
  EXPECT_THAT(rt2->plugins()[1].reason, HasSubstr("shadowed by"));
}

TEST(PluginLoader, PluginSetSelectsDisablesAndReportsMissingEntries) {
  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  // The folders come from the set's own search_paths: plugins in folders the caller adds join
  // unlisted (PluginsInAddedFoldersJoinAPluginSetThatDoesNotListThem).
  std::ofstream(set) << "search_paths:\n  - " << stub_dir("stub_ok").string() << "\n  - "
                     << stub_dir("stub_null_optional").string() << "\n  - "
                     << stub_dir("stub_init_fail").string() << "\n"
                     << "plugins:\n  - stub_ok\n  - name: stub_null_optional\n    enabled: false\n"
                        "  - not_installed\n";
  auto rt = isolated_runtime({}, set);
  EXPECT_EQ(status_of(*rt, "stub_ok").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(*rt, "stub_null_optional").state, PluginStatus::State::kDisabled);
  EXPECT_THAT(status_of(*rt, "stub_null_optional").reason, HasSubstr("disabled in plugin set"));
  EXPECT_EQ(status_of(*rt, "stub_init_fail").state, PluginStatus::State::kDisabled);
  EXPECT_THAT(status_of(*rt, "stub_init_fail").reason, HasSubstr("not listed in plugin set"));
  EXPECT_EQ(status_of(*rt, "not_installed").state, PluginStatus::State::kFailed);
  EXPECT_THAT(status_of(*rt, "not_installed").reason,
              HasSubstr("plugins.yaml:9 but no manifest of that name was found"));
}

TEST(PluginLoader, EnvironmentSelectsAndDisablesWithGlobs) {
  ScopedEnv select("KILN_PLUGINS", "stub_*");
  ScopedEnv disable("KILN_PLUGINS_DISABLE", "stub_null*");
  ScopedEnv path("KILN_PLUGIN_PATH",
                 stub_dir("stub_ok").string() + ":" + stub_dir("stub_null_optional").string());
  RuntimeOptions options;
  options.search_install_prefix = false;
  Runtime rt(options);
  EXPECT_EQ(status_of(rt, "stub_ok").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(rt, "stub_null_optional").state, PluginStatus::State::kDisabled);
  EXPECT_THAT(status_of(rt, "stub_null_optional").reason,
              HasSubstr("disabled by KILN_PLUGINS_DISABLE=stub_null*"));
}

TEST(PluginLoader, ObjectsKeepTheirPluginLoadedAfterTheRuntimeIsGone) {
  const std::string library = (stub_dir("stub_ok") / "libkiln_stub_ok.so").string();
  Tensor t;
  {
    auto rt = isolated_runtime({stub_dir("stub_ok")});
    t = Tensor::empty({16}, DataType::Float(32), Device{100, 0}, *rt);
  }
  // The runtime is gone, the tensor is not: the plugin must still be loaded and not shut down.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr) << "the plugin was unloaded while a tensor it allocated lives";
  auto shutdown_calls = reinterpret_cast<int (*)()>(dlsym(handle, "stub_shutdown_calls"));
  ASSERT_NE(shutdown_calls, nullptr);
  const int before = shutdown_calls();
  std::vector<float> v(16, 1.0f);
  t.copy_from(v.data(), 64);
  t = Tensor();  // the last object made through the plugin: now it shuts down
  EXPECT_EQ(shutdown_calls(), before + 1);
  dlclose(handle);
}

TEST(PluginLoader, MalformedPluginSetIsAConfigError) {
  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "plugins:\n  - name: cpu\n    optoins: {}\n";
  try {
    isolated_runtime({}, set);
    FAIL() << "expected a ConfigError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("plugins.yaml:3:5"));
    EXPECT_THAT(e.what(), HasSubstr("did you mean 'options'"));
  }
}

TEST(PluginLoader, PluginsInAddedFoldersJoinAPluginSetThatDoesNotListThem) {
  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  // The set's own folder holds stub_ok (listed) and stub_null_optional (not listed); the
  // caller adds stub_zero_timer's folder (not listed: joins) and stub_init_fail's (disabled by
  // the set: stays out).
  std::ofstream(set) << "search_paths:\n  - " << stub_dir("stub_ok").string() << "\n  - "
                     << stub_dir("stub_null_optional").string() << "\n"
                     << "plugins:\n  - stub_ok\n  - name: stub_init_fail\n    enabled: false\n";
  auto rt = isolated_runtime({stub_dir("stub_zero_timer"), stub_dir("stub_init_fail")}, set);
  EXPECT_EQ(status_of(*rt, "stub_ok").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(*rt, "stub_zero_timer").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(*rt, "stub_null_optional").state, PluginStatus::State::kDisabled);
  EXPECT_THAT(status_of(*rt, "stub_null_optional").reason, HasSubstr("not listed in plugin set"));
  EXPECT_EQ(status_of(*rt, "stub_init_fail").state, PluginStatus::State::kDisabled);
  EXPECT_THAT(status_of(*rt, "stub_init_fail").reason, HasSubstr("disabled in plugin set"));
}

TEST(PluginLoader, TwoPluginsProvidingOneCollectorAreRefusedUntilThePluginSetChooses) {
  auto rt = isolated_runtime({stub_dir("stub_coll_a"), stub_dir("stub_coll_b")});
  for (const char* name : {"stub_coll_a", "stub_coll_b"}) {
    const auto& s = status_of(*rt, name);
    EXPECT_EQ(s.state, PluginStatus::State::kFailed) << name;
    EXPECT_THAT(s.reason,
                HasSubstr("collector 'dupcoll' is also claimed by stub_coll_a, stub_coll_b"));
    EXPECT_THAT(s.reason, HasSubstr("under collectors: in the plugin set"));
  }
  EXPECT_TRUE(rt->collector_names().empty());
  try {
    rt->collector("dupcoll");
    FAIL() << "expected a NotFoundError";
  } catch (const NotFoundError& e) {
    // The error names the plugins that would provide it and why they are not active.
    EXPECT_THAT(e.what(), HasSubstr("plugin 'stub_coll_a' would provide it but is failed: "
                                    "collector 'dupcoll' is also claimed"));
  }

  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "collectors:\n  dupcoll: stub_coll_b\n";
  auto chosen = isolated_runtime({stub_dir("stub_coll_a"), stub_dir("stub_coll_b")}, set);
  EXPECT_EQ(status_of(*chosen, "stub_coll_a").state, PluginStatus::State::kLoaded);
  EXPECT_EQ(status_of(*chosen, "stub_coll_b").state, PluginStatus::State::kLoaded);
  EXPECT_THAT(chosen->collector_names(), ::testing::ElementsAre("dupcoll"));
  // stub_coll_a keeps its own device type.
  EXPECT_TRUE(chosen->find_backend(114));
}

TEST(PluginLoader, NotFoundErrorsNameThePluginThatWouldProvideItAndWhyItIsNotActive) {
  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "plugins:\n  - stub_ok\n  - name: stub_zero_timer\n    enabled: false\n";
  auto rt = isolated_runtime({stub_dir("stub_ok"), stub_dir("stub_zero_timer")}, set);
  EXPECT_THAT(rt->not_active_hint("device:stub_zero_timer"),
              HasSubstr("; plugin 'stub_zero_timer' would provide it but is disabled: disabled in "
                        "plugin set"));
  EXPECT_EQ(rt->not_active_hint("device:stub_ok"), "");  // loaded
  EXPECT_EQ(rt->not_active_hint("device:nosuch"), "");
  // A module whose format only a disabled plugin loads.
  TempDir modules;
  const fs::path module = modules.path() / "kernels.nosuchfmt";
  std::ofstream(module) << "x";
  std::ofstream(modules.path() / "fmt_plugin.yaml")
      << "name: fmt_plugin\nversion: 1.0.0\nkind: loader\nlibrary: libfmt_plugin.so\n"
         "abi: \"1.0\"\nprovides:\n  loaders: [nosuchfmt]\n";
  auto no_loader = isolated_runtime({modules.path()});
  try {
    no_loader->load_module(module);
    FAIL() << "expected a NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no loader for '.nosuchfmt' files"));
    EXPECT_THAT(e.what(), HasSubstr("plugin 'fmt_plugin' would provide it but is failed: library"));
  }
  // A failed plugin names its failure.
  auto failed = isolated_runtime({stub_dir("stub_init_fail")});
  EXPECT_THAT(failed->not_active_hint("device:stub_init_fail"),
              HasSubstr("plugin 'stub_init_fail' would provide it but is failed: negotiation "
                        "refused"));
}

TEST(PluginLoader, PluginSetChoicesForLoadersExportersAndCollectorsAreChecked) {
  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "loaders:\n  so: cpu\nexporters:\n  x: vendor_x\ncollectors:\n"
                        "  papi: Not A Plugin\n";
  try {
    isolated_runtime({}, set);
    FAIL() << "expected a ConfigError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("plugins.yaml:6"));
    EXPECT_THAT(e.what(), HasSubstr("expected a plugin name"));
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Every error a plugin's slot returns reaches the user naming the component, the slot and the
// plugin (docs/plugin-abi.md §7).
TEST(PluginErrors, NameTheSlotAndThePlugin) {
  RuntimeOptions options;
  options.search_paths = {fs::path(KILN_BUILD_DIR) / "lib" / "kiln" / "plugins"};
  options.read_environment = false;
  options.search_install_prefix = false;
  Runtime rt(options);
  try {
    rt.backend(kDLCPU)->alloc(7, 64, 64);  // the plugin refuses the device id
    FAIL() << "an allocation on cpu:7 succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cpu backend (alloc, plugin 'cpu'): "));
  }
  const fs::path not_a_library = fs::path(::testing::TempDir()) / "kiln_not_a_library.so";
  std::ofstream(not_a_library) << "not an ELF file";
  try {
    rt.load_module(not_a_library);
    FAIL() << "a text file loaded as a module";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("(load_file of plugin 'cpu' loader 'so'): "));
  }
  fs::remove(not_a_library);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A device type whose plugin did not load is "unknown" everywhere a device is parsed (run
// configs, --device, the C++ API), and the error says which plugin would provide it and why not.
TEST(PluginErrors, AnUnknownDeviceTypeNamesThePluginThatWouldProvideIt) {
  auto rt = isolated_runtime({stub_dir("stub_ok"), stub_dir("stub_init_fail")});
  EXPECT_EQ(rt->parse_device("stub_ok:0").type, 100);
  try {
    rt->parse_device("stub_init_fail:0");
    FAIL() << "a device type of a failed plugin parsed";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown device type 'stub_init_fail'"));
    EXPECT_THAT(e.what(), HasSubstr("plugin 'stub_init_fail' would provide it but is failed: "
                                    "negotiation refused"));
  }
  try {
    rt->parse_device("nosuchdev:0");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("would provide it")));
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Loader and exporter names are settled like device types: two plugins claiming one fail,
// naming each other, until the plugin set chooses (DESIGN §3 rule 11), and then the chosen
// plugin serves it, its errors naming it.
TEST(PluginLoader, LoaderAndExporterClashesAreRefusedUntilThePluginSetChooses) {
  const fs::path plugins = fs::path(KILN_BUILD_DIR) / "lib" / "kiln" / "plugins";
  auto clash = isolated_runtime({stub_dir("stub_load_a"), stub_dir("stub_load_b")});
  for (const char* name : {"stub_load_a", "stub_load_b"}) {
    const auto& s = status_of(*clash, name);
    EXPECT_EQ(s.state, PluginStatus::State::kFailed) << name;
    EXPECT_THAT(s.reason, ::testing::AnyOf(HasSubstr("loader 'dupfmt' is also claimed by "
                                                     "stub_load_a, stub_load_b"),
                                           HasSubstr("exporter 'dupexp' is also claimed by "
                                                     "stub_load_a, stub_load_b")))
        << name;
  }

  TempDir dir;
  const fs::path set = dir.path() / "plugins.yaml";
  std::ofstream(set) << "loaders:\n  dupfmt: stub_load_b\nexporters:\n  dupexp: stub_load_a\n";
  auto chosen = isolated_runtime({plugins, stub_dir("stub_load_a"), stub_dir("stub_load_b")}, set);
  ASSERT_EQ(status_of(*chosen, "stub_load_a").state, PluginStatus::State::kLoaded)
      << status_of(*chosen, "stub_load_a").reason;
  ASSERT_EQ(status_of(*chosen, "stub_load_b").state, PluginStatus::State::kLoaded);
  const fs::path file = dir.path() / "model.dupfmt";
  std::ofstream(file) << "x";
  try {
    chosen->load_module(file);
    FAIL() << "the stub loader loaded a file";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("(load_file of plugin 'stub_load_b' loader 'dupfmt'): the "
                                    "loader of stub_load_b loads nothing"));
  }
  Module m = chosen->load_module(fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so");
  try {
    m.export_library(dir.path() / "out.stub", "dupexp", *chosen);
    FAIL() << "the stub exporter wrote a file";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("(export_module of plugin 'stub_load_a'): the exporter of "
                                    "stub_load_a writes nothing"));
  }
}

}  // namespace
}  // namespace kiln
