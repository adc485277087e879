// SPDX-License-Identifier: Apache-2.0
// The "tar" exporter: a module package, i.e. a flat, gzip-compressed tar archive.
#ifndef KILN_PLUGINS_PACKAGE_TAR_EXPORTER_H_
#define KILN_PLUGINS_PACKAGE_TAR_EXPORTER_H_

#include "kiln/c/module.h"

namespace kiln::package {

// The KilnExporter table of the "tar" component (output_format "tar"; `self` unused).
// export_module writes, with libarchive, a gzip-compressed POSIX (pax) tar with one entry
// kiln-package.json (the manifest, see package_manifest.h) followed by one entry per artifact
// under its name, all regular files at the top level, mode 0644. The file is written as
// `<path>.tmp.<pid>` and renamed over `path` once complete, so `path` is either untouched or
// the whole package. Errors: those of manifest_for() (KILN_ERROR_VALUE for a bad or duplicate
// artifact name: "duplicate file name <name>"), KILN_ERROR_NOT_FOUND when the folder of `path`
// does not exist, KILN_ERROR_RUNTIME when writing fails (naming the file and the reason).
KilnExporter make_tar_exporter();

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_TAR_EXPORTER_H_
