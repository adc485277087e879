// SPDX-License-Identifier: Apache-2.0
#include "tvm_objects.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/temp_dir.hpp"
#include "subprocess.h"

namespace kiln::package {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_tvm_object_archive(const std::vector<ArchiveFile>& files) {
  if (files.empty()) return false;
  for (const ArchiveFile& f : files) {
    if (!ends_with(f.name, ".o")) return false;
  }
  return true;
}

std::vector<uint8_t> link_tvm_objects(const std::vector<ArchiveFile>& files,
                                      const std::string& path) {
  sdk::TempDir scratch("kiln_tvm_tar_");
  std::vector<std::string> command =
      split_command(std::getenv("CXX") != nullptr ? std::getenv("CXX") : "");
  if (command.empty()) command.push_back("c++");
  const std::string compiler = command.front();
  const std::string output = (scratch.path() / "linked.so").string();
  for (const char* arg : {"-shared", "-fPIC", "-o"}) command.push_back(arg);
  command.push_back(output);
  for (const ArchiveFile& f : files) {
    const std::string file = (scratch.path() / f.name).string();
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(f.data.data()),
              static_cast<std::streamsize>(f.data.size()));
    if (!out) throw sdk::Error(KILN_ERROR_RUNTIME, path + ": cannot write " + file);
    command.push_back(file);
  }
  ProcessResult result;
  try {
    result = run_process(command);
  } catch (const sdk::Error& e) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE,
                     path +
                         " holds TVM object files, which are linked into a shared library "
                         "with the host C++ compiler (set CXX), and that failed: " +
                         e.what());
  }
  if (!result.ok()) {
    throw sdk::Error(KILN_ERROR_VALUE, path + ": linking its TVM object files with " + compiler +
                                           " failed (" + result.describe() + "):\n" +
                                           result.output);
  }
  std::ifstream in(output, std::ios::binary);
  if (!in) throw sdk::Error(KILN_ERROR_RUNTIME, path + ": " + compiler + " wrote no " + output);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace kiln::package
