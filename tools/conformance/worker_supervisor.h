// SPDX-License-Identifier: Apache-2.0
// Process isolation for kiln-conformance (docs/conformance.md, "Isolation"): the suite's tests
// run in a worker process, this same executable re-executed with the hidden `--worker` option,
// which streams each test's start and end (worker_events.h). A worker runs test after test
// until it dies; a test that kills it (a signal, an exit) or passes the per-test deadline is
// recorded as crashed, and a fresh worker goes on with the tests that have not ended.
#ifndef KILN_TOOLS_CONFORMANCE_WORKER_SUPERVISOR_H_
#define KILN_TOOLS_CONFORMANCE_WORKER_SUPERVISOR_H_

#include <string>
#include <vector>

#include "suite.h"

namespace kiln::conformance {

// How to start workers and how long a test may take.
struct WorkerOptions {
  // The worker's command line, argv[0] first: the tool's own arguments and GoogleTest's, less
  // any --gtest_filter. The supervisor appends the filter and `--worker <its pid>`; the
  // executable is /proc/self/exe whatever argv[0] says.
  std::vector<std::string> argv;
  // The run's GoogleTest filter ("*" by default); each worker gets it less the tests that ended.
  std::string gtest_filter = "*";
  // A test still running this many seconds after it started is killed (its worker's whole
  // process group, SIGKILL) and recorded as crashed; the same bound applies to a worker's
  // start-up and to the gap between two tests. 0: no deadline.
  double test_timeout_s = 60;
};

// What the workers did.
struct WorkerRun {
  // Every test that ended or crashed, in the order it did; a test reported twice
  // (--gtest_repeat) keeps its last outcome, as collect_outcomes() does.
  std::vector<TestOutcome> outcomes;
  // What went wrong outside any test: a worker that died or hung while starting up or after its
  // last test. A worker that fails so before its first test is not replaced (it would again).
  std::vector<std::string> run_errors;
  // SIGINT or SIGTERM when one stopped the run (the workers are killed first); else 0.
  int interrupted_by = 0;
};

// Runs the tests in workers until every test that `options.gtest_filter` selects has ended or
// crashed, or a worker cannot start, or SIGINT/SIGTERM arrives (caught only while this runs).
// `targets` (borrowed) name the plugin and device in a crashed test's message. Prints a line
// for each crash to stdout. Throws Error when a worker cannot be started at all (pipe,
// posix_spawn).
WorkerRun run_tests_in_workers(const WorkerOptions& options, const std::vector<Target>& targets);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_WORKER_SUPERVISOR_H_
