// SPDX-License-Identifier: Apache-2.0
// The "so" and "ndk" exporters: link a module into one shared library with a C compiler.
#ifndef KILN_PLUGINS_PACKAGE_SO_EXPORTER_H_
#define KILN_PLUGINS_PACKAGE_SO_EXPORTER_H_

#include "kiln/c/module.h"

namespace kiln::package {

// The KilnExporter table of the "so" component (output_format "so"; `self` points to static
// data). export_module writes a combined library (see wrapper_source.h): a genuine Kiln kernel
// library that the cpu plugin's "so" loader loads like any other, embedding every artifact of
// the module and forwarding to its host library. The compiler is $CC when set and not blank,
// else `cc`, split at blanks (split_command()); it runs without a shell as
// `<cc...> -shared -fPIC -O1 -o <path>.tmp.<pid> <source.c> -ldl` in a private temporary
// folder that is removed afterwards, and its output is renamed over `path` only on success.
// Errors: those of manifest_for(); KILN_ERROR_VALUE when the module does not have exactly one
// host_library artifact; KILN_ERROR_UNAVAILABLE when the compiler cannot be started;
// KILN_ERROR_RUNTIME "Compilation error:\n<compiler output>" when it fails; KILN_ERROR_NOT_FOUND
// or KILN_ERROR_RUNTIME when the temporary files or `path` cannot be written.
KilnExporter make_so_exporter();

// The KilnExporter table of the "ndk" component (output_format "so"): as "so", for Android.
// The compiler is $KILN_NDK_CC, else $TVM_NDK_CC (the variable TVM users already set), each
// when set and not blank; neither is KILN_ERROR_UNAVAILABLE "the ndk exporter needs a cross
// compiler: set KILN_NDK_CC (or TVM_NDK_CC) to the NDK's standalone clang".
KilnExporter make_ndk_exporter();

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_SO_EXPORTER_H_
