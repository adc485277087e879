// SPDX-License-Identifier: Apache-2.0
// The "tar" loader: reads a module package written by the "tar" exporter.
#ifndef KILN_PLUGINS_PACKAGE_TAR_LOADER_H_
#define KILN_PLUGINS_PACKAGE_TAR_LOADER_H_

#include "kiln/c/module.h"

namespace kiln::package {

// The KilnLoader table of the "tar" component (`self` unused). load_file reads the archive
// into memory (read_flat_archive(): nothing is extracted to disk), parses its
// kiln-package.json (parse_manifest()) and checks that every listed artifact is present with
// the listed size and SHA-256 digest (when given) and that nothing unlisted is there. It fills
// the KilnLoadedModule with kind "kiln.package" (the host then loads the host_library artifact
// with the loader for its format), the manifest's entry name, the artifacts in manifest order
// (name, role, bytes) and no functions; `release` frees it all. Errors name the archive and
// the entry: those of read_flat_archive() and parse_manifest(), and KILN_ERROR_VALUE for a
// missing manifest, a missing, resized, altered or unlisted artifact. `out` is untouched on
// error.
KilnLoader make_tar_loader();

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_TAR_LOADER_H_
