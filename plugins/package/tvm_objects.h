// SPDX-License-Identifier: Apache-2.0
// TVM's `.tar` exports (export_library("x.tar")): object files (lib0.o, devc.o) with no Kiln
// manifest. As TVM's own load_module does (SPEC.md §5.5), they are linked with the host
// compiler into one shared library, which the host then loads like any TVM library.
#ifndef KILN_PLUGINS_PACKAGE_TVM_OBJECTS_H_
#define KILN_PLUGINS_PACKAGE_TVM_OBJECTS_H_

#include <string>
#include <vector>

#include "archive_reader.h"

namespace kiln::package {

// Whether `files` (a tar archive without kiln-package.json) look like a TVM export: one or more
// files, each an object file ("*.o").
bool is_tvm_object_archive(const std::vector<ArchiveFile>& files);

// Links `files` into a shared library with $CXX (default c++) `-shared -fPIC` in a private
// temporary directory and returns its bytes. Throws kiln::sdk::Error naming `path`:
// KILN_ERROR_UNAVAILABLE when the compiler cannot be started (a .tar of object files needs a host
// C++ toolchain; TVM's own loader needs one too), KILN_ERROR_VALUE with the compiler's output
// when linking fails.
std::vector<uint8_t> link_tvm_objects(const std::vector<ArchiveFile>& files,
                                      const std::string& path);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_TVM_OBJECTS_H_
