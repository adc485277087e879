// SPDX-License-Identifier: Apache-2.0
// `kiln profile --isolation process`: the command again, in a child process that a crashing
// kernel or plugin takes down instead of the command the user ran (docs/isolation.md).
#ifndef KILN_TOOLS_KILN_SUPERVISED_H_
#define KILN_TOOLS_KILN_SUPERVISED_H_

#include <string>
#include <vector>

namespace kiln::tool {

// Runs this executable (/proc/self/exe) with `args` (argv[1:], to which the caller adds what
// makes the child run in-process) as a child with this process's standard streams, forwarding
// SIGINT, SIGTERM and SIGHUP to it, and returns its exit code. A child that dies of a signal
// this process did not forward is reported on stderr as "kiln: <what> died of <signal> in its
// worker process" and gives exit 3; one ended by a forwarded signal makes this process end of
// that signal too. Throws RuntimeError when the child cannot start.
int run_supervised(const std::vector<std::string>& args, const std::string& what);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_SUPERVISED_H_
