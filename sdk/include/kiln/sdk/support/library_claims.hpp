// SPDX-License-Identifier: Apache-2.0
// Claims on dynamic-loader objects. A Kiln loader that must own the object it loads alone (a
// TVM library's private copy, an SDK kernel library) claims the handle dlopen() returned. The
// dynamic loader hands back the object it already has when a name or a file is one it knows
// (glibc compares the name first, then the device and inode), so a handle that is claimed
// already means that two loads would share one object, its code and its static state: that is
// refused with an error instead of running one library's code for another.
//
// Claims are process-wide within one copy of the support library (it is linked statically into
// libkiln and into each plugin), which is the scope of every loader that uses them.
#ifndef KILN_SDK_SUPPORT_LIBRARY_CLAIMS_HPP_
#define KILN_SDK_SUPPORT_LIBRARY_CLAIMS_HPP_

#include <string>

namespace kiln::sdk {

// Claims `handle` (a dlopen() handle, not NULL) for the caller, who keeps owning it. Returns
// false, claiming nothing, when a claim on the same handle is held already. Thread-safe.
bool claim_library(void* handle);

// Claims `handle` as claim_library() does; when it is claimed already, dlclose()s it (dropping
// the reference this load took) and throws kiln::sdk::Error(KILN_ERROR_RUNTIME) saying that the
// dynamic loader returned an object already loaded for `label` (the file, in messages).
void claim_library_or_close(void* handle, const std::string& label);

// dlclose()s a claimed `handle` and drops its claim, as one step under the claims' lock, so that
// a new object the loader places at the same address after the dlclose() is never refused as
// this one. Does nothing for NULL.
void close_claimed_library(void* handle);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_LIBRARY_CLAIMS_HPP_
