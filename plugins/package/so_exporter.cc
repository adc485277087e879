// SPDX-License-Identifier: Apache-2.0
#include "so_exporter.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "embedded_headers.h"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/sdk/support/temp_dir.hpp"
#include "package_manifest.h"
#include "subprocess.h"
#include "wrapper_source.h"

namespace kiln::package {
namespace {

// What distinguishes the "so" and "ndk" components: their name, for messages, and how they
// find their compiler. Static; a table's `self` points to one.
struct Flavor {
  const char* name;
  // The compiler command, split into words; throws kiln::sdk::Error when there is none.
  std::vector<std::string> (*compiler)();
};

// The value of environment variable `name`, or "" when unset.
std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// The "so" compiler: $CC, else cc.
std::vector<std::string> host_compiler() {
  std::vector<std::string> words = split_command(env("CC"));
  if (words.empty()) words.push_back("cc");
  return words;
}

// The "ndk" compiler: $KILN_NDK_CC, else $TVM_NDK_CC, else an error.
std::vector<std::string> ndk_compiler() {
  for (const char* variable : {"KILN_NDK_CC", "TVM_NDK_CC"}) {
    std::vector<std::string> words = split_command(env(variable));
    if (!words.empty()) return words;
  }
  throw sdk::Error(KILN_ERROR_UNAVAILABLE,
                   "the ndk exporter needs a cross compiler: set KILN_NDK_CC (or TVM_NDK_CC) to "
                   "the NDK's standalone clang");
}

constexpr Flavor kSo{"so", &host_compiler};
constexpr Flavor kNdk{"ndk", &ndk_compiler};

// Writes `size` bytes at `data` (borrowed) to the new file `file`; throws KILN_ERROR_RUNTIME.
void write_file(const std::string& file, const void* data, size_t size) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (size > 0) out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) throw sdk::Error(KILN_ERROR_RUNTIME, "cannot write " + file);
}

// The index of the one host_library artifact of `manifest`; throws KILN_ERROR_VALUE unless
// there is exactly one (the combined library forwards to it).
size_t host_library_index(const PackageManifest& manifest, const char* exporter) {
  size_t count = 0, index = 0;
  for (size_t i = 0; i < manifest.artifacts.size(); ++i) {
    if (manifest.artifacts[i].role == kHostLibraryRole) {
      ++count;
      index = i;
    }
  }
  if (count != 1) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string("the ") + exporter +
                                           " exporter needs exactly one " + kHostLibraryRole +
                                           " artifact to forward to; the module has " +
                                           std::to_string(count));
  }
  return index;
}

// Throws KILN_ERROR_RUNTIME "Compilation error:\n<output>", followed by `note` on a line of its
// own when `note` is not empty.
[[noreturn]] void compilation_error(const std::string& output, const std::string& note) {
  std::string message = "Compilation error:\n" + output;
  if (!note.empty()) {
    if (!message.ends_with('\n')) message += '\n';
    message += note;
  }
  throw sdk::Error(KILN_ERROR_RUNTIME, message);
}

// KilnExporter::export_module; see make_so_exporter.
KilnError* export_so(void* self, const KilnExportRequest* request, const char* path) {
  const auto& flavor = *static_cast<const Flavor*>(self);
  const std::string context = std::string(flavor.name) + " exporter";
  return sdk::guard(context.c_str(), [&] {
    if (path == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "the output path is NULL");
    // The cheap checks first, so that a missing compiler or a bad module fails before any
    // file is written.
    std::vector<std::string> command = flavor.compiler();
    const PackageManifest manifest = manifest_for(request);
    const size_t host = host_library_index(manifest, flavor.name);

    const sdk::TempDir scratch("kiln_so_export_");
    std::vector<EmbeddedArtifact> embedded;
    for (size_t i = 0; i < manifest.artifacts.size(); ++i) {
      const ManifestArtifact& m = manifest.artifacts[i];
      // Numbered files: artifact names need no escaping or checking as paths here.
      const std::string file =
          (scratch.path() / ("artifact_" + std::to_string(i) + ".bin")).string();
      write_file(file, request->artifacts[i].data, request->artifacts[i].size);
      embedded.push_back(EmbeddedArtifact{m.name, m.role, m.size, file});
    }
    // The SDK headers the wrapper includes, from the copies compiled into this plugin.
    const std::filesystem::path include_dir = scratch.path() / "include";
    for (const EmbeddedHeader& header : wrapper_headers()) {
      const std::filesystem::path file = include_dir / header.include_path;
      std::filesystem::create_directories(file.parent_path());
      write_file(file.string(), header.text.data(), header.text.size());
    }
    const std::string source_file = (scratch.path() / "kiln_package.c").string();
    const std::string source = wrapper_source(to_json(manifest), embedded, host);
    write_file(source_file, source.data(), source.size());

    sdk::AtomicFile out(path);
    const std::string temp = out.temp_path().string();
    const std::string compiler = command.front();
    for (const char* arg : {"-shared", "-fPIC", "-O1", "-o"}) command.push_back(arg);
    command.push_back(temp);
    command.push_back("-I" + include_dir.string());
    command.push_back(source_file);
    command.push_back("-ldl");
    const auto start = std::chrono::steady_clock::now();
    const ProcessResult result = run_process(command);
    if (!result.ok()) {
      // A compiler killed by a signal, or one that failed silently, would otherwise leave a
      // message that says nothing.
      const bool says_why = result.exited && !result.output.empty();
      compilation_error(result.output,
                        says_why ? "" : compiler + " ended with " + result.describe());
    }
    // Otherwise commit() would fail with a puzzling "cannot open <temporary file>".
    if (::access(temp.c_str(), F_OK) != 0) {
      compilation_error(result.output, compiler + " reported success but wrote no " + temp);
    }
    out.commit();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    sdk::log(KILN_LOG_DEBUG, "%s: linked %s with %s in %lld ms%s%s", flavor.name, path,
             compiler.c_str(), static_cast<long long>(ms),
             result.output.empty() ? "" : "; compiler output:\n", result.output.c_str());
  });
}

// The table of a component of `flavor` (static).
KilnExporter make_exporter(const Flavor* flavor) {
  KilnExporter exporter = sdk::make_table<KilnExporter>();
  exporter.self = const_cast<Flavor*>(flavor);
  exporter.output_format = "so";
  exporter.export_module = &export_so;
  return exporter;
}

}  // namespace

KilnExporter make_so_exporter() { return make_exporter(&kSo); }
KilnExporter make_ndk_exporter() { return make_exporter(&kNdk); }

}  // namespace kiln::package
