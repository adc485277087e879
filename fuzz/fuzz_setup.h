// SPDX-License-Identifier: Apache-2.0
// Shared by the fuzz targets that set up plumbing of their own (sockets to a loopback server):
// a failure of that plumbing is no finding, and must not look like one.
#ifndef KILN_FUZZ_FUZZ_SETUP_H_
#define KILN_FUZZ_FUZZ_SETUP_H_

#include <cstdio>
#include <cstdlib>

namespace kiln::fuzz {

// The exit status of a target whose harness could not set itself up (EX_TEMPFAIL): fuzz/run.sh
// reports it as a setup failure, not as a finding. libFuzzer's own statuses are 70 (timeout),
// 71 (out of memory), 72 (interrupted) and 77 (crash); sanitizers exit 1 or abort.
constexpr int kSetupFailedExit = 75;

// Ends the run because the harness's own plumbing failed (`what`, for `cause`) after its
// retries. std::_Exit, not exit(): libFuzzer's exit hook would call an exit during an input
// "fuzz target exited" and save that input as a crash.
[[noreturn]] inline void setup_failed(const char* what, const char* cause) {
  std::fprintf(stderr, "kiln fuzz: the harness could not set itself up (not a finding): %s: %s\n",
               what, cause);
  std::fflush(stderr);
  std::_Exit(kSetupFailedExit);
}

}  // namespace kiln::fuzz

#endif  // KILN_FUZZ_FUZZ_SETUP_H_
