// SPDX-License-Identifier: Apache-2.0
// `kiln vm asm|disasm|stats`: the VM executable's text form (.kvmt) and binary form (.kvm)
// (docs/vm.md, docs/cli.md).
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm/executable.h"
#include "kiln/vm/virtual_machine.h"
#include "output_file.h"

namespace kiln::tool {
namespace {

// The whole file; a missing or unreadable input is a usage error (exit 2).
std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError(fmt::format("cannot read {}: it is a directory", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError(fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw UsageError(fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  }
  return data;
}

// Loads a binary executable; a malformed file is a runtime error naming the file (exit 3).
// Other files that are not Kiln's binary form (TVM's Relax libraries and VMExecutable files) are
// loaded as modules by a Runtime made from `global`, which must give an executable.
vm::Executable load_executable(const std::filesystem::path& path, const GlobalOptions& global) {
  const std::string data = read_file(path);
  if (path.extension() != ".kvm" &&
      !vm::Executable::has_binary_magic(
          std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()))) {
    Runtime runtime(runtime_options(global));
    const Module m = runtime.load_module(path);
    const vm::Executable* exec = vm::executable_of(m);
    if (exec == nullptr) {
      throw ValueError(
          fmt::format("{}: a module of kind '{}', not a VM executable", path.string(), m.kind()));
    }
    return *exec;
  }
  try {
    return vm::Executable::load_from_bytes(
        std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

int run_asm(const VmOptions& options) {
  const std::string text = read_file(options.input);
  vm::Executable exec;
  try {
    exec = vm::Executable::from_text(text, options.input.string());
  } catch (const ValueError& e) {
    // A malformed source file, like a malformed config, is the user's to fix (exit 2).
    throw UsageError(e.what());
  }
  const std::vector<uint8_t> bytes = exec.save_to_bytes();
  write_output_file(options.output,
                    std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  // The summary goes to stderr when the executable itself goes to stdout.
  (options.output == "-" ? std::cerr : std::cout) << fmt::format(
      "wrote {}: {} bytes, {} functions, {} constants, {} instructions\n", options.output.string(),
      bytes.size(), exec.func_table.size(), exec.constants.size(), exec.num_instructions());
  return kExitOk;
}

int run_disasm(const VmOptions& options, const GlobalOptions& global) {
  const std::string text = load_executable(options.input, global).as_text();
  if (options.output.empty() || options.output == "-") {
    std::cout << text;
  } else {
    write_output_file(options.output, text);
  }
  return kExitOk;
}

int run_stats(const VmOptions& options, const GlobalOptions& global) {
  std::cout << load_executable(options.input, global).stats();
  return kExitOk;
}

}  // namespace

int run_vm(const VmOptions& options, const GlobalOptions& global) {
  if (options.command == "asm") return run_asm(options);
  if (options.command == "disasm") return run_disasm(options, global);
  if (options.command == "stats") return run_stats(options, global);
  throw UsageError(fmt::format("unknown vm command '{}' (asm, disasm, stats)", options.command));
}

}  // namespace kiln::tool
