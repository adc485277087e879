// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/library_claims.hpp"

#include <dlfcn.h>

#include <mutex>
#include <new>
#include <set>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

// The claimed handles and their lock. Never destroyed (libraries may be closed from static
// destructors of other units at exit), and held in static storage rather than on the heap: a
// plugin that links this library is unloaded at exit with no claim left, and a node-based set
// holds no memory when empty, so nothing is left for a leak checker to report.
struct Claims {
  std::mutex mutex;
  std::set<void*> handles;
};

Claims& claims() {
  alignas(Claims) static unsigned char storage[sizeof(Claims)];
  static Claims* instance = new (storage) Claims();
  return *instance;
}

}  // namespace

bool claim_library(void* handle) {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.handles.insert(handle).second;
}

void claim_library_or_close(void* handle, const std::string& label) {
  if (claim_library(handle)) return;
  ::dlclose(handle);
  throw Error(KILN_ERROR_RUNTIME,
              "cannot load " + label +
                  ": the dynamic loader returned an object that is loaded already (another "
                  "library under the same name or file) instead of a new one; Kiln refuses to "
                  "run one library's code for another");
}

void close_claimed_library(void* handle) {
  if (handle == nullptr) return;
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  ::dlclose(handle);
  c.handles.erase(handle);
}

}  // namespace kiln::sdk
