// Words for how a process ended, for the messages of a crashed test (worker_supervisor.h) and
// for the report of an interrupted run.
#ifndef KILN_TOOLS_CONFORMANCE_WAIT_STATUS_H_
#define KILN_TOOLS_CONFORMANCE_WAIT_STATUS_H_

#include <string>

namespace kiln::conformance {

// "SIGSEGV" for 11; "signal N" for a number the C library has no name for.
std::string signal_name(int sig);

// `status` as waitpid(2) returns it, in words: "died of SIGSEGV (signal 11)", "exited with
// code 3".
std::string describe_wait_status(int status);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_WAIT_STATUS_H_
