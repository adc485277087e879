// SHA-256 (FIPS 180-4), for the integrity check of package artifacts.
#ifndef KILN_PLUGINS_PACKAGE_SHA256_H_
#define KILN_PLUGINS_PACKAGE_SHA256_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::package {

// The SHA-256 digest of `size` bytes at `data` (borrowed; may be NULL when `size` is 0) as 64
// lowercase hexadecimal digits, as sha256sum prints it. A local implementation: the plugin's
// only other dependency, libarchive, does not offer one publicly, and a crypto library for one
// checksum is not worth the extra dependency.
std::string sha256_hex(const uint8_t* data, size_t size);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_SHA256_H_
