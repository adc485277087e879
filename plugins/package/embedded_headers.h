// SPDX-License-Identifier: Apache-2.0
// The SDK headers the generated wrapper source (wrapper_source.cc) includes, compiled into this
// plugin from the very files it was built with.
#ifndef KILN_PLUGINS_PACKAGE_EMBEDDED_HEADERS_H_
#define KILN_PLUGINS_PACKAGE_EMBEDDED_HEADERS_H_

#include <span>
#include <string_view>

namespace kiln::package {

// One header: the path it is included by (e.g. "kiln/c/kernel.h") and its text. Static.
struct EmbeddedHeader {
  std::string_view include_path;
  std::string_view text;
};

// kiln/c/abi.h, kiln/c/module.h, kiln/c/kernel.h, dlpack/dlpack.h (which abi.h includes) and
// kiln/sdk/support/memfd_load.h, as read at configure time (plugins/package/CMakeLists.txt
// re-runs the configuration when one of them changes). Static storage.
std::span<const EmbeddedHeader> wrapper_headers();

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_EMBEDDED_HEADERS_H_
