// SPDX-License-Identifier: Apache-2.0
// How a process ended, in words: for the RPC server's session workers, the measurement worker
// (kiln/measurement_worker.h), `kiln profile --isolation process` and kiln-conformance's workers.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for its own processes and its tools; no API or ABI promise.
#ifndef KILN_DETAIL_WAIT_STATUS_H_
#define KILN_DETAIL_WAIT_STATUS_H_

#include <string>

namespace kiln::detail {

// "SIGSEGV" for 11 (the C library's abbreviation, not strsignal's localised text); "signal N"
// for a number it has no name for.
std::string signal_name(int sig);

// `status` as waitpid(2) returns it, in words: "died of SIGSEGV (signal 11)", "exited with
// code 3", "ended with wait status N" for anything else.
std::string describe_wait_status(int status);

}  // namespace kiln::detail

#endif  // KILN_DETAIL_WAIT_STATUS_H_
