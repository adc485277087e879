// SPDX-License-Identifier: Apache-2.0
#include "kiln/version.h"

#include "kiln/c/abi.h"

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

namespace kiln {
const char* version() { return KILN_VERSION_STRING; }
const char* abi_version() {
  return KILN_STR(KILN_ABI_VERSION_MAJOR) "." KILN_STR(KILN_ABI_VERSION_MINOR);
}
}  // namespace kiln
