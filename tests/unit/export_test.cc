// SPDX-License-Identifier: Apache-2.0
// Exporting modules with the package plugin and loading the results back: the "tar" exporter
// and loader (module packages), the "so" and "ndk" exporters (combined libraries), failed
// exports that must leave no file behind, and the precise errors of malformed packages.
// Malformed archives are made with the system `tar`, so that the test needs no archive library.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ffi/error_object.h"
#include "kiln/kiln.h"
#include "kiln/module_loader.h"
#include "runtime/package_loader.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The example kernel library lib<name>.so.
fs::path kernel(const std::string& name) {
  return fs::path(KILN_EXAMPLE_KERNEL_DIR) / ("lib" + name + ".so");
}

// The whole file at `path`.
std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes `text` to `path` (replacing it), creating its folder.
void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Runs `command` with /bin/sh and returns its exit status (the test's paths need no quoting:
// TempDir names are plain).
int sh(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The names in `dir`, sorted: what a failed export must not have added to.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs `f`, which must throw an E, and returns the message ("" after recording a failure).
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a different error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// A float32 vector of `n` elements start, start + step, ...
Tensor filled(int64_t n, float start, float step) {
  Tensor t = Tensor::empty({n}, DataType::Float(32));
  float v = start;
  for (float& x : t.host_span<float>()) {
    x = v;
    v += step;
  }
  return t;
}

// Checks that `m` is vector_add: its entry computes out = a + 0.5 * b correctly.
void expect_vector_add_works(const Module& m) {
  ASSERT_EQ(m.entry_name(), "vector_add");
  const int64_t n = 5000;
  Tensor a = filled(n, 0, 1), b = filled(n, 1000, -1);
  Tensor out = Tensor::empty({n}, DataType::Float(32));
  m.entry()(a, b, out, 0.5);
  auto o = out.host_span<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FLOAT_EQ(o[i], static_cast<float>(i) + 0.5f * (1000.0f - static_cast<float>(i)))
        << "at " << i;
  }
}

// Checks that two artifact lists are equal: names, roles and bytes.
void expect_same_artifacts(const std::vector<Artifact>& actual,
                           const std::vector<Artifact>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].name, expected[i].name) << "artifact " << i;
    EXPECT_EQ(actual[i].role, expected[i].role) << "artifact " << i;
    EXPECT_TRUE(actual[i].data == expected[i].data) << "artifact " << i << " differs in its bytes";
  }
}

// A kiln-package.json listing `artifacts` as (name, size) host libraries, without digests.
std::string manifest_text(const std::vector<std::pair<std::string, size_t>>& artifacts,
                          int version = 1) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, size] : artifacts) {
    list.push_back({{"name", name}, {"role", "host_library"}, {"size", size}});
  }
  return nlohmann::json{{"format", "kiln.package"},
                        {"version", version},
                        {"module_kind", "kernel_library"},
                        {"entry_name", nullptr},
                        {"artifacts", list}}
      .dump();
}

// Calls exporter `name` of the global runtime directly with `artifacts` (name, role, bytes),
// which a Module cannot produce (loaders give valid names), and returns the error message
// ("" on success). The error's code must be `code`.
std::string raw_export_error(const std::string& name,
                             const std::vector<std::array<std::string, 3>>& artifacts,
                             const fs::path& path, int32_t code) {
  auto [table, plugin] = Runtime::global().exporter(name);
  std::vector<KilnArtifact> list;
  for (const auto& [artifact_name, role, data] : artifacts) {
    list.push_back(KilnArtifact{sizeof(KilnArtifact), artifact_name.c_str(), role.c_str(),
                                reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  }
  KilnExportRequest request{};
  request.struct_size = sizeof(request);
  request.module_kind = "kernel_library";
  request.num_artifacts = static_cast<int32_t>(list.size());
  request.artifacts = list.data();
  KilnError* error = table->export_module(table->self, &request, path.c_str());
  if (error == nullptr) return "";
  EXPECT_EQ(error->code, code) << error->message;
  std::string message = error->message;
  delete error;
  return message;
}

// Every test needs the package plugin, which is built with the tests (tests/CMakeLists.txt):
// without it they fail.
class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto exporters = Runtime::global().exporter_names();
    ASSERT_NE(std::find(exporters.begin(), exporters.end(), "tar"), exporters.end())
        << "the package plugin is not loaded (no 'tar' exporter); it is built with the tests "
           "and listed in configs/plugins.yaml";
  }

  // `name` inside this test's temporary folder.
  fs::path path(const std::string& name) const { return dir_.path() / name; }

  // A folder `name` holding `files` (name -> content), for hand-made archives.
  fs::path stage(const std::string& name, const std::map<std::string, std::string>& files) {
    const fs::path folder = path(name);
    fs::create_directories(folder);
    for (const auto& [file, content] : files) write_file(folder / file, content);
    return folder;
  }

  // Loads `archive`, which must fail with a kiln::Error naming the archive; returns the message.
  std::string load_error(const fs::path& archive) {
    const std::string message = message_of<Error>([&] { load_module(archive); });
    EXPECT_THAT(message, HasSubstr(archive.string()));
    return message;
  }

  TempDir dir_;
};

// ----- "tar": module packages -----

TEST_F(ExportTest, TarRoundTripRunsVectorAdd) {
  Module m = load_module(kernel("vector_add"));
  const fs::path tar = path("vector_add.tar");
  m.export_library(tar, "tar");
  ASSERT_TRUE(fs::is_regular_file(tar));
  const std::string bytes = read_file(tar);
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f) << "gzip magic";
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b) << "gzip magic";

  Module back = load_module(tar);
  EXPECT_EQ(back.kind(), "kernel_library");
  expect_vector_add_works(back);
  expect_same_artifacts(back.artifacts(), m.artifacts());
  EXPECT_EQ(listing(dir_.path()), std::vector<std::string>{"vector_add.tar"})
      << "no temporary file is left behind";
}

TEST_F(ExportTest, TarIsAFlatGzipTarWithAManifest) {
  Module m = load_module(kernel("vector_add"));
  const fs::path tar = path("p.tar");
  m.export_library(tar, "tar");
  ASSERT_EQ(sh("tar -tzf " + tar.string() + " > " + path("list.txt").string()), 0);
  EXPECT_EQ(read_file(path("list.txt")), "kiln-package.json\nlibvector_add.so\n");
  ASSERT_EQ(sh("tar -xzOf " + tar.string() + " kiln-package.json > " + path("m.json").string()), 0);
  const auto manifest = nlohmann::json::parse(read_file(path("m.json")));
  EXPECT_EQ(manifest["format"], "kiln.package");
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(manifest["module_kind"], "kernel_library");
  EXPECT_EQ(manifest["entry_name"], "vector_add");
  ASSERT_EQ(manifest["artifacts"].size(), 1u);
  const auto& artifact = manifest["artifacts"][0];
  EXPECT_EQ(artifact["name"], "libvector_add.so");
  EXPECT_EQ(artifact["role"], "host_library");
  EXPECT_EQ(artifact["size"], fs::file_size(kernel("vector_add")));
  // The digest agrees with the system's sha256sum.
  ASSERT_EQ(sh("sha256sum " + kernel("vector_add").string() + " > " + path("sum.txt").string()), 0);
  EXPECT_EQ(artifact["sha256"], read_file(path("sum.txt")).substr(0, 64));
}

TEST_F(ExportTest, TarRoundTripKeepsANullEntryAndTheFunctions) {
  Module m = load_module(kernel("calls"));
  ASSERT_EQ(m.entry_name(), "");
  const fs::path tar = path("calls.tar");
  m.export_library(tar);  // "tar" is the default
  Module back = load_module(tar);
  EXPECT_EQ(back.entry_name(), "");
  EXPECT_EQ(back["add3"](1, 2, 3).cast<int64_t>(), 6);
  EXPECT_THAT(message_of<ValueError>([&] { back["fail_value"](); }),
              HasSubstr("deliberate failure"));
  expect_same_artifacts(back.artifacts(), m.artifacts());
}

TEST_F(ExportTest, TarOfALoadedPackageHasTheSameArtifacts) {
  Module m = load_module(kernel("vector_add"));
  m.export_library(path("first.tar"), "tar");
  Module first = load_module(path("first.tar"));
  first.export_library(path("second.tar"), "tar");
  Module second = load_module(path("second.tar"));
  expect_same_artifacts(second.artifacts(), first.artifacts());
  expect_same_artifacts(second.artifacts(), m.artifacts());
  expect_vector_add_works(second);
}

TEST_F(ExportTest, TarReplacesAnExistingFile) {
  write_file(path("p.tar"), "old content");
  load_module(kernel("vector_add")).export_library(path("p.tar"), "tar");
  expect_vector_add_works(load_module(path("p.tar")));
}

TEST_F(ExportTest, TarMadeByHandWithTheSystemTarLoads) {
  // Uncompressed, with "./" names and a "./" folder entry, as `tar -C dir .` writes them.
  load_module(kernel("vector_add")).export_library(path("p.tar"), "tar");
  fs::create_directories(path("unpacked"));
  ASSERT_EQ(sh("tar -xzf " + path("p.tar").string() + " -C " + path("unpacked").string()), 0);
  ASSERT_EQ(sh("tar -cf " + path("hand.tar").string() + " -C " + path("unpacked").string() + " ."),
            0);
  expect_vector_add_works(load_module(path("hand.tar")));
}

TEST_F(ExportTest, TarIntoAMissingFolderFailsAndCreatesNothing) {
  Module m = load_module(kernel("vector_add"));
  const fs::path target = path("missing") / "p.tar";
  const std::string message = message_of<NotFoundError>([&] { m.export_library(target, "tar"); });
  EXPECT_THAT(message, HasSubstr(target.string()));
  EXPECT_FALSE(fs::exists(path("missing")));
}

TEST_F(ExportTest, TarOverAFolderFailsAndLeavesItAlone) {
  Module m = load_module(kernel("vector_add"));
  fs::create_directories(path("taken"));
  const std::string message =
      message_of<RuntimeError>([&] { m.export_library(path("taken"), "tar"); });
  EXPECT_THAT(message, HasSubstr("cannot rename"));
  EXPECT_TRUE(fs::is_directory(path("taken")));
  EXPECT_EQ(listing(dir_.path()), std::vector<std::string>{"taken"}) << "temporary file removed";
}

TEST_F(ExportTest, TarRefusesDuplicateAndUnsafeArtifactNames) {
  const fs::path out = path("p.tar");
  EXPECT_THAT(
      raw_export_error("tar", {{"libx.so", "host_library", "a"}, {"libx.so", "metadata", "b"}}, out,
                       KILN_ERROR_VALUE),
      HasSubstr("duplicate file name libx.so"));
  EXPECT_THAT(raw_export_error("tar", {{"lib/x.so", "host_library", "a"}}, out, KILN_ERROR_VALUE),
              HasSubstr("artifact name 'lib/x.so' contains '/'"));
  EXPECT_THAT(raw_export_error("tar", {{"..", "host_library", "a"}}, out, KILN_ERROR_VALUE),
              HasSubstr("artifact name '..' is not a file name"));
  EXPECT_THAT(
      raw_export_error("tar", {{"kiln-package.json", "metadata", "{}"}}, out, KILN_ERROR_VALUE),
      HasSubstr("is reserved for the package manifest"));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

// A module whose artifacts share a name (a VM executable importing two libraries of one file
// name from two folders) cannot be a package, which keys its files by name: with different
// bytes it is a ValueError naming the file before the exporter runs; the same artifact twice (a
// library two imports name) is written once and loads back.
TEST_F(ExportTest, ArtifactsOfOneNameAreOneContentOrTheExportIsRefused) {
  const Module vector_add = load_module(kernel("vector_add"));
  const Artifact& library = vector_add.artifacts().at(0);
  auto module_of = [&](std::vector<Artifact> artifacts) {
    auto obj = make_object<ModuleObj>("kernel_library", "vector_add");
    obj->artifacts = std::move(artifacts);
    return Module(std::move(obj));
  };
  Artifact other = library;
  other.data.push_back(0);  // one byte more: another content under the same name
  const Module clash = module_of({library, other});
  for (const std::string exporter : {"tar", "so"}) {
    const fs::path out = path("clash." + std::string(exporter == "tar" ? "tar" : "so"));
    const std::string message =
        message_of<ValueError>([&] { clash.export_library(out, exporter); });
    EXPECT_THAT(message, HasSubstr("two of its artifacts are named '" + library.name + "'"));
    EXPECT_THAT(message, HasSubstr("different bytes"));
    EXPECT_FALSE(fs::exists(out)) << exporter;
  }
  const Module twice = module_of({library, library});
  twice.export_library(path("twice.tar"), "tar");
  const Module back = load_module(path("twice.tar"));
  expect_same_artifacts(back.artifacts(), {library});
  expect_vector_add_works(back);
}

// The host turns a loader's artifacts into a module by their names (a blob's "<name>.json"
// metadata, a VM executable's imports), so a package with two artifacts of one name is refused
// whatever loader read it; the tar loader refuses it itself, this checks the host does too.
TEST_F(ExportTest, APackageWithTwoArtifactsOfOneNameIsRefusedByTheHost) {
  const std::string blob = "__kernel void k(__global float* x) { x[0] = 1.0f; }";
  auto bytes = [](const std::string& text) {
    return std::vector<uint8_t>(text.begin(), text.end());
  };
  auto package = make_object<ModuleObj>(kPackageKind, "");
  package->artifacts = {
      Artifact{"k.cl", "device_blob", bytes(blob)},
      Artifact{
          "k.cl.json", "metadata",
          bytes(
              R"({"format": "opencl_c", "target": "opencl", "kernels": {"k": {"args": ["tensor"]}}})")},
      Artifact{
          "k.cl.json", "metadata",
          bytes(
              R"({"format": "opencl_c", "target": "opencl", "kernels": {"j": {"args": ["tensor"]}}})")}};
  ModuleLoaderRegistry registry;
  const ModuleLoadOptions options;
  ModuleLoadContext context(registry, Runtime::global(), options);
  const std::string message =
      message_of<ValueError>([&] { load_package(package, path("two.tar"), context); });
  EXPECT_THAT(message, HasSubstr("two artifacts are named 'k.cl.json'"));
  EXPECT_THAT(message, HasSubstr(path("two.tar").string()));
}

TEST_F(ExportTest, SoNeedsExactlyOneHostLibrary) {
  const fs::path out = path("x.so");
  EXPECT_THAT(raw_export_error("so", {{"meta.json", "metadata", "{}"}}, out, KILN_ERROR_VALUE),
              HasSubstr("the so exporter needs exactly one host_library artifact to forward to; "
                        "the module has 0"));
  EXPECT_THAT(raw_export_error("so", {{"a.so", "host_library", "a"}, {"b.so", "host_library", "b"}},
                               out, KILN_ERROR_VALUE),
              HasSubstr("the module has 2"));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

TEST_F(ExportTest, SoCombinedLibraryEmbedsEveryArtifact) {
  // A metadata file travels with the host library and comes back through
  // kiln_package_artifact; bytes with NULs and quotes survive the embedding.
  const std::string library = read_file(kernel("vector_add"));
  const char raw[] = "{\"x\": \"a\\\"b\"}\0tail";
  const std::string metadata(raw, sizeof(raw) - 1);
  ASSERT_EQ(raw_export_error("so",
                             {{"libvector_add.so", "host_library", library},
                              {"notes \"quoted\".json", "metadata", metadata}},
                             path("combined.so"), 0),
            "");
  void* dl = ::dlopen(path("combined.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(dl, nullptr) << ::dlerror();
  using ArtifactFn = int32_t (*)(int32_t, const char**, const char**, const uint8_t**, size_t*);
  auto artifact_fn = reinterpret_cast<ArtifactFn>(::dlsym(dl, "kiln_package_artifact"));
  ASSERT_NE(artifact_fn, nullptr);
  const char* name = nullptr;
  const char* role = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  ASSERT_EQ(artifact_fn(1, &name, &role, &data, &size), 0);
  EXPECT_STREQ(name, "notes \"quoted\".json");
  EXPECT_STREQ(role, "metadata");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data), size), metadata);
  ::dlclose(dl);
  Module back = load_module(path("combined.so"));
  expect_vector_add_works(back);
}

// ----- "so" and "ndk": combined libraries -----

TEST_F(ExportTest, SoCombinedLibraryRunsVectorAdd) {
  Module m = load_module(kernel("vector_add"));
  const fs::path so = path("combined.so");
  m.export_library(so, "so");
  Module back = load_module(so);
  EXPECT_EQ(back.kind(), "kernel_library");
  expect_vector_add_works(back);
  // The cpu loader reports the file it loaded: the combined library itself.
  ASSERT_EQ(back.artifacts().size(), 1u);
  EXPECT_EQ(back.artifacts()[0].name, "combined.so");
  EXPECT_EQ(back.artifacts()[0].role, "host_library");
  EXPECT_EQ(listing(dir_.path()), std::vector<std::string>{"combined.so"});
}

TEST_F(ExportTest, SoCombinedLibraryCarriesThePackage) {
  Module m = load_module(kernel("vector_add"));
  const fs::path so = path("combined.so");
  m.export_library(so, "so");
  void* dl = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(dl, nullptr) << ::dlerror();
  using ManifestFn = const char* (*)();
  using ArtifactFn = int32_t (*)(int32_t, const char**, const char**, const uint8_t**, size_t*);
  auto manifest_fn = reinterpret_cast<ManifestFn>(::dlsym(dl, "kiln_package_manifest"));
  auto artifact_fn = reinterpret_cast<ArtifactFn>(::dlsym(dl, "kiln_package_artifact"));
  ASSERT_NE(manifest_fn, nullptr);
  ASSERT_NE(artifact_fn, nullptr);
  const auto manifest = nlohmann::json::parse(manifest_fn());
  EXPECT_EQ(manifest["format"], "kiln.package");
  EXPECT_EQ(manifest["entry_name"], "vector_add");
  EXPECT_EQ(manifest["artifacts"][0]["name"], "libvector_add.so");
  const char* name = nullptr;
  const char* role = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  ASSERT_EQ(artifact_fn(0, &name, &role, &data, &size), 0);
  EXPECT_STREQ(name, "libvector_add.so");
  EXPECT_STREQ(role, "host_library");
  EXPECT_TRUE(std::vector<uint8_t>(data, data + size) == m.artifacts()[0].data);
  EXPECT_EQ(artifact_fn(1, &name, &role, &data, &size), -1);
  EXPECT_EQ(artifact_fn(-1, &name, &role, &data, &size), -1);
  ::dlclose(dl);
}

TEST_F(ExportTest, SoCombinedLibraryOfCallsKeepsItsFunctionsAndErrors) {
  load_module(kernel("calls")).export_library(path("calls.so"), "so");
  Module back = load_module(path("calls.so"));
  EXPECT_EQ(back.entry_name(), "");
  EXPECT_EQ(back["add3"](40, 1, 1).cast<int64_t>(), 42);
  EXPECT_THAT(message_of<ValueError>([&] { back["fail_value"](); }),
              HasSubstr("deliberate failure"));
}

TEST_F(ExportTest, SoCombinedLibraryLoadedTwiceKeepsWorking) {
  // Both modules share one dlopen handle and so one table; releasing the first must not
  // break the second.
  load_module(kernel("vector_add")).export_library(path("combined.so"), "so");
  std::optional<Module> first = load_module(path("combined.so"));
  Module second = load_module(path("combined.so"));
  expect_vector_add_works(*first);
  first.reset();
  expect_vector_add_works(second);
}

TEST_F(ExportTest, SoThenTarThenLoadRunsVectorAdd) {
  load_module(kernel("vector_add")).export_library(path("combined.so"), "so");
  load_module(path("combined.so")).export_library(path("combined.tar"), "tar");
  Module back = load_module(path("combined.tar"));
  expect_vector_add_works(back);
  ASSERT_EQ(back.artifacts().size(), 1u);
  EXPECT_EQ(back.artifacts()[0].name, "combined.so");
}

TEST_F(ExportTest, SoUsesCcWithTheDocumentedCommandLine) {
  // A wrapper that records its arguments, then compiles for real.
  const fs::path log = path("args.txt");
  const fs::path wrapper = path("my-cc");
  write_file(wrapper, "#!/bin/sh\necho \"$@\" > " + log.string() + "\nexec cc \"$@\"\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  ScopedEnv cc("CC", wrapper.string() + " -g0");
  load_module(kernel("vector_add")).export_library(path("combined.so"), "so");
  const std::string args = read_file(log);
  EXPECT_THAT(args, ::testing::StartsWith("-g0 -shared -fPIC -O1 -o " +
                                          path("combined.so").string() + ".tmp."));
  EXPECT_THAT(args, ::testing::EndsWith(".c -ldl\n"));
  expect_vector_add_works(load_module(path("combined.so")));
}

TEST_F(ExportTest, SoWithAFailingCompilerLeavesNoFile) {
  ScopedEnv cc("CC", "/bin/false");
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<RuntimeError>([&] { m.export_library(path("combined.so"), "so"); });
  EXPECT_THAT(message, HasSubstr("Compilation error:\n"));
  EXPECT_THAT(message, HasSubstr("/bin/false ended with exit status 1"));
  EXPECT_TRUE(listing(dir_.path()).empty()) << "neither the output nor a temporary file";
}

TEST_F(ExportTest, SoWithACompilerThatWritesNothingFails) {
  ScopedEnv cc("CC", "/bin/true");
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<RuntimeError>([&] { m.export_library(path("combined.so"), "so"); });
  EXPECT_THAT(message, HasSubstr("/bin/true reported success but wrote no"));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

TEST_F(ExportTest, SoWithAFailingCompilerKeepsAnExistingFile) {
  write_file(path("combined.so"), "precious");
  ScopedEnv cc("CC", "/bin/false");
  Module m = load_module(kernel("vector_add"));
  EXPECT_THROW(m.export_library(path("combined.so"), "so"), RuntimeError);
  EXPECT_EQ(read_file(path("combined.so")), "precious");
  EXPECT_EQ(listing(dir_.path()), std::vector<std::string>{"combined.so"});
}

TEST_F(ExportTest, SoReportsTheCompilersOutput) {
  const fs::path wrapper = path("bad-cc");
  write_file(wrapper, "#!/bin/sh\necho 'kiln.c:1: error: something is wrong' >&2\nexit 2\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  ScopedEnv cc("CC", wrapper.string());
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<RuntimeError>([&] { m.export_library(path("combined.so"), "so"); });
  EXPECT_THAT(message, HasSubstr("Compilation error:\nkiln.c:1: error: something is wrong\n"));
}

TEST_F(ExportTest, SoWithAMissingCompilerIsUnavailable) {
  ScopedEnv cc("CC", "/nonexistent/kiln-test-cc");
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<UnavailableError>([&] { m.export_library(path("combined.so"), "so"); });
  EXPECT_THAT(message, HasSubstr("/nonexistent/kiln-test-cc"));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

TEST_F(ExportTest, NdkWithoutACrossCompilerSaysWhatToSet) {
  ScopedEnv kiln_cc("KILN_NDK_CC", std::nullopt);
  ScopedEnv tvm_cc("TVM_NDK_CC", std::nullopt);
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<UnavailableError>([&] { m.export_library(path("android.so"), "ndk"); });
  EXPECT_THAT(message, HasSubstr("the ndk exporter needs a cross compiler: set KILN_NDK_CC (or "
                                 "TVM_NDK_CC) to the NDK's standalone clang"));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

TEST_F(ExportTest, NdkUsesKilnNdkCc) {
  ScopedEnv kiln_cc("KILN_NDK_CC", "cc");
  ScopedEnv tvm_cc("TVM_NDK_CC", "/nonexistent/not-this-one");
  load_module(kernel("vector_add")).export_library(path("android.so"), "ndk");
  expect_vector_add_works(load_module(path("android.so")));
}

TEST_F(ExportTest, NdkFallsBackToTvmNdkCc) {
  ScopedEnv kiln_cc("KILN_NDK_CC", std::nullopt);
  ScopedEnv tvm_cc("TVM_NDK_CC", "cc");
  load_module(kernel("vector_add")).export_library(path("android.so"), "ndk");
  expect_vector_add_works(load_module(path("android.so")));
}

TEST_F(ExportTest, UnknownExporterListsTheAvailableOnes) {
  Module m = load_module(kernel("vector_add"));
  const std::string message =
      message_of<NotFoundError>([&] { m.export_library(path("x.zip"), "zip"); });
  EXPECT_THAT(message, HasSubstr("no exporter 'zip'"));
  for (const char* name : {"ndk", "so", "tar"}) EXPECT_THAT(message, HasSubstr(name));
  EXPECT_TRUE(listing(dir_.path()).empty());
}

// ----- malformed packages: each refused with the archive and the entry named -----

TEST_F(ExportTest, MalformedNotAnArchive) {
  write_file(path("garbage.tar"), "this is not an archive, just some text\n");
  EXPECT_THAT(load_error(path("garbage.tar")), HasSubstr("not a readable tar archive"));
}

TEST_F(ExportTest, MalformedTruncatedArchive) {
  load_module(kernel("vector_add")).export_library(path("p.tar"), "tar");
  const std::string bytes = read_file(path("p.tar"));
  write_file(path("cut.tar"), bytes.substr(0, bytes.size() / 2));
  load_error(path("cut.tar"));
}

TEST_F(ExportTest, MalformedParentDirectoryEntry) {
  // -P keeps the name as given: "../evil".
  stage("outside", {{"evil", "x"}});
  const fs::path folder = stage("outside/pkg", {{"kiln-package.json", manifest_text({})}});
  ASSERT_EQ(sh("tar -czPf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json ../evil"),
            0);
  const std::string message = load_error(path("bad.tar"));
  EXPECT_THAT(message, HasSubstr("entry '../evil' has a '..' component"));
}

TEST_F(ExportTest, MalformedAbsolutePathEntry) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({})}});
  const fs::path evil = path("evil.so");
  write_file(evil, "x");
  ASSERT_EQ(sh("tar -czPf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json " + evil.string()),
            0);
  const std::string message = load_error(path("bad.tar"));
  EXPECT_THAT(message, HasSubstr("entry '" + evil.string() + "' has an absolute path"));
}

TEST_F(ExportTest, MalformedMissingManifest) {
  const fs::path folder = stage("pkg", {{"libx.so", "hello"}});
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() + " libx.so"), 0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("no entry 'kiln-package.json': not a Kiln module package"));
}

TEST_F(ExportTest, MalformedArtifactSizeMismatch) {
  const fs::path folder =
      stage("pkg", {{"kiln-package.json", manifest_text({{"libx.so", 10}})}, {"libx.so", "hello"}});
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json libx.so"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("entry 'libx.so' has 5 bytes but kiln-package.json says 10"));
}

TEST_F(ExportTest, MalformedArtifactDigestMismatch) {
  // The real package with one byte of the library changed and its size kept.
  load_module(kernel("vector_add")).export_library(path("p.tar"), "tar");
  fs::create_directories(path("pkg"));
  ASSERT_EQ(sh("tar -xzf " + path("p.tar").string() + " -C " + path("pkg").string()), 0);
  std::string library = read_file(path("pkg") / "libvector_add.so");
  library[100] = static_cast<char>(library[100] ^ 1);
  write_file(path("pkg") / "libvector_add.so", library);
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + path("pkg").string() +
               " kiln-package.json libvector_add.so"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")), HasSubstr("entry 'libvector_add.so' has SHA-256 "));
}

TEST_F(ExportTest, MalformedUnlistedFile) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({{"libx.so", 5}})},
                                        {"libx.so", "hello"},
                                        {"extra.txt", "surprise"}});
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json libx.so extra.txt"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("entry 'extra.txt' is not listed in kiln-package.json"));
}

TEST_F(ExportTest, MalformedMissingArtifact) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({{"libx.so", 5}})}});
  ASSERT_EQ(
      sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() + " kiln-package.json"),
      0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("entry 'libx.so', listed in kiln-package.json, is missing"));
}

TEST_F(ExportTest, MalformedSymbolicLink) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({{"libx.so", 5}})}});
  fs::create_symlink("/etc/passwd", folder / "libx.so");
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json libx.so"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("entry 'libx.so' is a symbolic link (to '/etc/passwd')"));
}

TEST_F(ExportTest, MalformedDuplicateEntry) {
  // `tar -r` appends a second regular entry of the same name.
  const fs::path one =
      stage("one", {{"kiln-package.json", manifest_text({{"libx.so", 5}})}, {"libx.so", "hello"}});
  const fs::path two = stage("two", {{"libx.so", "HELLO"}});
  ASSERT_EQ(sh("tar -cf " + path("bad.tar").string() + " -C " + one.string() +
               " kiln-package.json libx.so && tar -rf " + path("bad.tar").string() + " -C " +
               two.string() + " libx.so"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")), HasSubstr("entry 'libx.so' appears more than once"));
}

TEST_F(ExportTest, MalformedNestedFile) {
  const fs::path folder =
      stage("pkg", {{"kiln-package.json", manifest_text({})}, {"sub/libx.so", "hello"}});
  ASSERT_EQ(sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() +
               " kiln-package.json sub/libx.so"),
            0);
  EXPECT_THAT(load_error(path("bad.tar")),
              HasSubstr("entry 'sub/libx.so' is inside a folder; packages are flat"));
}

TEST_F(ExportTest, MalformedNewerFormatVersion) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({}, 2)}});
  ASSERT_EQ(
      sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() + " kiln-package.json"),
      0);
  const std::string message = load_error(path("bad.tar"));
  EXPECT_THAT(message, HasSubstr("entry 'kiln-package.json'"));
  EXPECT_THAT(message, HasSubstr("package format version 2 is not supported"));
}

TEST_F(ExportTest, MalformedManifestArtifactName) {
  const fs::path folder = stage("pkg", {{"kiln-package.json", manifest_text({{"..", 5}})}});
  ASSERT_EQ(
      sh("tar -czf " + path("bad.tar").string() + " -C " + folder.string() + " kiln-package.json"),
      0);
  EXPECT_THAT(load_error(path("bad.tar")), HasSubstr("artifact name '..' is not a file name"));
}

}  // namespace
}  // namespace kiln
