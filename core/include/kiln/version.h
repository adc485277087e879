// SPDX-License-Identifier: Apache-2.0
// Library version.
#ifndef KILN_VERSION_H_
#define KILN_VERSION_H_

namespace kiln {
// The version of libkiln, e.g. "0.1.0".
const char* version();
// The plugin ABI this libkiln speaks, e.g. "1.0".
const char* abi_version();
}  // namespace kiln

#endif  // KILN_VERSION_H_
