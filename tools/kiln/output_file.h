// SPDX-License-Identifier: Apache-2.0
// Writing the files the kiln commands produce (reports, executables, disassembly).
#ifndef KILN_TOOLS_KILN_OUTPUT_FILE_H_
#define KILN_TOOLS_KILN_OUTPUT_FILE_H_

#include <filesystem>
#include <string_view>

namespace kiln::tool {

// Writes `data` to `path`. "-" is stdout. A regular file (or a new one, its folders created)
// is replaced atomically by kiln::sdk::AtomicFile (a temporary file beside it renamed into
// place), so a failed write leaves the old file intact and no temporary file. Anything else that
// exists (/dev/stdout, a pipe, a device) is written in place, never replaced. A directory is a
// UsageError; a failed write a RuntimeError naming the path.
void write_output_file(const std::filesystem::path& path, std::string_view data);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_OUTPUT_FILE_H_
