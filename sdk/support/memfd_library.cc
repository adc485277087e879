// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/memfd_library.hpp"

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/memfd_load.h"

namespace kiln::sdk {

void* dlopen_bytes(const void* data, size_t size, const std::string& label) {
  char why[512];
  void* handle = nullptr;
  const int result = kiln_memfd_dlopen(data, size, label.c_str(), &handle, why, sizeof(why));
  if (result == KILN_MEMFD_OK) return handle;
  const int32_t code = result == KILN_MEMFD_SYSTEM_ERROR ? KILN_ERROR_RUNTIME : KILN_ERROR_VALUE;
  throw Error(code, "cannot load " + label + ": " + why);
}

}  // namespace kiln::sdk
