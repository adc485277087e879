// SPDX-License-Identifier: Apache-2.0
// Runtime::declared_device_types lists device types from manifests without loading a plugin, and
// RuntimeOptions::only_device_types loads only the plugins that serve the types asked for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path stub_dir(const std::string& name) { return fs::path(KILN_STUB_PLUGIN_DIR) / name; }

// Options that see only the stub plugins `names` (no environment, no prefix, no plugin set).
RuntimeOptions stubs(const std::vector<std::string>& names) {
  RuntimeOptions options;
  for (const std::string& n : names) options.search_paths.push_back(stub_dir(n));
  options.read_environment = false;
  options.search_install_prefix = false;
  options.plugin_set = fs::path();
  return options;
}

bool library_loaded(const std::string& stub) {
  const fs::path library = stub_dir(stub) / ("libkiln_" + stub + ".so");
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

const PluginStatus& status_of(const Runtime& rt, const std::string& name) {
  for (const auto& s : rt.plugins()) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("no status for " + name);
}

TEST(DeclaredDeviceTypes, ComeFromTheManifestsAloneSortedWithWhyNot) {
  // stub_init_fail would fail in its negotiation: listing never gets that far, so it counts as
  // selected. stub_manifest_major2's manifest already rules it out.
  const std::vector<DeclaredDeviceType> types =
      Runtime::declared_device_types(stubs({"stub_ok", "stub_init_fail", "stub_manifest_major2"}));
  ASSERT_EQ(types.size(), 3u);
  EXPECT_EQ(types[0].type_name, "stub_init_fail");
  EXPECT_TRUE(types[0].selected);
  EXPECT_EQ(types[1].type_name, "stub_manifest_major2");
  EXPECT_EQ(types[1].plugin, "stub_manifest_major2");
  EXPECT_FALSE(types[1].selected);
  EXPECT_THAT(types[1].why_not, HasSubstr("manifest says ABI 2.0"));
  EXPECT_EQ(types[2].type_name, "stub_ok");
  EXPECT_TRUE(types[2].selected);
  EXPECT_TRUE(types[2].why_not.empty());
  EXPECT_FALSE(library_loaded("stub_ok")) << "listing loaded a plugin";
  EXPECT_FALSE(library_loaded("stub_init_fail")) << "listing loaded a plugin";
}

TEST(DeclaredDeviceTypes, OnlyDeviceTypesLoadsOnlyThePluginsThatServeThem) {
  RuntimeOptions options = stubs({"stub_ok", "stub_null_optional"});
  options.only_device_types = std::vector<std::string>{"stub_ok"};
  Runtime rt(options);
  EXPECT_EQ(status_of(rt, "stub_ok").state, PluginStatus::State::kLoaded);
  const PluginStatus& other = status_of(rt, "stub_null_optional");
  EXPECT_EQ(other.state, PluginStatus::State::kDisabled);
  EXPECT_THAT(other.reason,
              HasSubstr("not loaded: it serves none of the device types asked for (stub_ok)"));
  EXPECT_FALSE(library_loaded("stub_null_optional"));
  // Asking for a type the runtime did not load says why.
  try {
    (void)rt.device_types().parse("stub_null_optional");
    ADD_FAILURE() << "parsed a device type whose plugin is not loaded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not loaded: it serves none of the device types"));
  }
}

}  // namespace
}  // namespace kiln
