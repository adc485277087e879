// SPDX-License-Identifier: Apache-2.0
// Running a program (a compiler) without a shell and capturing what it prints.
#ifndef KILN_PLUGINS_PACKAGE_SUBPROCESS_H_
#define KILN_PLUGINS_PACKAGE_SUBPROCESS_H_

#include <string>
#include <vector>

namespace kiln::package {

// How a program ended and what it printed.
struct ProcessResult {
  // True when it exited (then `exit_code` is its status); false when a signal killed it (then
  // `signal` is the signal number).
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  // Its standard output and standard error, interleaved as written, cut after kMaxOutput
  // bytes (with a note saying so).
  std::string output;

  // True for a normal exit with status 0.
  bool ok() const { return exited && exit_code == 0; }
  // "exit status 1" or "killed by signal 9 (Killed)", for messages.
  std::string describe() const;
};

// How much of a program's output run_process() keeps: enough for any compiler diagnostic a
// person reads, bounded so a runaway program cannot exhaust memory.
inline constexpr size_t kMaxOutput = 256 * 1024;

// Runs `argv` (argv[0] is looked up in PATH when it has no '/') with posix_spawnp, the
// caller's environment and working directory, standard input from /dev/null and standard
// output and error captured together; waits for it to end. Not a shell: no quoting, globbing
// or redirection happens. Throws kiln::sdk::Error: KILN_ERROR_VALUE for an empty `argv`,
// KILN_ERROR_UNAVAILABLE when the program cannot be started (naming it and the reason, e.g.
// not found), KILN_ERROR_RUNTIME when the pipe or the wait fails.
ProcessResult run_process(const std::vector<std::string>& argv);

// Splits a command given in an environment variable ("ccache cc", "clang --target=x") at
// runs of blanks, the way make's $(CC) is used. No quoting: a program path containing spaces
// cannot be expressed (put it in a wrapper script). Empty for a blank `text`.
std::vector<std::string> split_command(const std::string& text);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_SUBPROCESS_H_
