// SPDX-License-Identifier: Apache-2.0
// The host's own format loaders, registered by every Runtime (see kiln/module_loader.h).
#ifndef KILN_SRC_MODULE_FORMAT_LOADERS_H_
#define KILN_SRC_MODULE_FORMAT_LOADERS_H_

#include <memory>

#include "kiln/module_loader.h"

namespace kiln {

// Device code files (.cl, .ptx, .hsaco, ... or any file with a "<file>.json" metadata sidecar)
// as modules whose functions are their kernels.
std::shared_ptr<const FormatLoader> device_code_format_loader();

}  // namespace kiln

#endif  // KILN_SRC_MODULE_FORMAT_LOADERS_H_
