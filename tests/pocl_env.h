// SPDX-License-Identifier: Apache-2.0
// Running PoCL (the OpenCL CPU driver) inside tests: its kernel cache goes into the build tree
// (unless POCL_CACHE_DIR says otherwise), and in sanitizer builds a process that loaded it skips
// LeakSanitizer's exit-time scan, which crashes now and then while PoCL's worker threads run
// ("Tracer caught signal 11"). AddressSanitizer itself stays on, without its alternate signal
// stacks (see __asan_default_options below). Include in exactly one source file of a test
// binary, and set kiln::test::pocl_loaded once PoCL may have been loaded.
#ifndef KILN_TESTS_POCL_ENV_H_
#define KILN_TESTS_POCL_ENV_H_

#include <atomic>
#include <cstdlib>

#ifndef KILN_BUILD_DIR
#error "KILN_BUILD_DIR must be defined by the build"
#endif

namespace kiln::test {

inline std::atomic<bool> pocl_loaded{false};

// Set before any test runs, so before PoCL reads it.
inline const bool pocl_cache_dir_set = [] {
  ::setenv("POCL_CACHE_DIR", KILN_BUILD_DIR "/pocl-cache", /*overwrite=*/0);
  return true;
}();

}  // namespace kiln::test

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer's hook: consulted once at exit.
extern "C" int __lsan_is_turned_off() { return kiln::test::pocl_loaded ? 1 : 0; }
// PoCL compiles kernels with LLVM on the calling thread, and LLVM replaces that thread's
// alternate signal stack with one from malloc. When such a thread exits (an RPC session's
// thread does), ASan would munmap that heap block as if it were its own stack and abort
// ("unable to unmap"). Without ASan's own alternate stacks it leaves them alone. Options
// given in ASAN_OPTIONS still apply on top of these defaults.
// intercept_tls_get_addr=0: the sanitizer runtime of GCC 12 (and LLVM before 17) mistakes a
// dynamic TLS block of a dlopened library whose address is 16 mod 4096 for a glibc-2.19 block
// with a header and reads a bogus range from before it; LeakSanitizer's exit-time scan then
// dies with "Tracer caught signal 11" (google/sanitizers#1322). tools/dev.sh sets it in
// ASAN_OPTIONS too, for the child processes tests start.
extern "C" const char* __asan_default_options() {
  return "use_sigaltstack=0:intercept_tls_get_addr=0";
}
#endif

#endif  // KILN_TESTS_POCL_ENV_H_
