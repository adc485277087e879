// SPDX-License-Identifier: Apache-2.0
// The conformance report a vendor attaches to a release (docs/conformance.md): what was tested
// (Kiln, the plugins with their library hashes, the devices and their attributes, the modules)
// and every test's result with its reason, in Markdown or JSON.
#ifndef KILN_TOOLS_CONFORMANCE_REPORT_H_
#define KILN_TOOLS_CONFORMANCE_REPORT_H_

#include <string>
#include <vector>

#include "suite.h"

namespace kiln::conformance {

// The counts and the verdict of a run.
struct Summary {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  int crashed = 0;
  // Of the skipped tests, those that skipped for lack of a required input (missing_input()).
  int incomplete = 0;
  // "fail" (any failure or crash), else "incomplete" (a test skipped for lack of a required
  // input), else "pass" (at least one test passed), else "nothing ran" (every test skipped or
  // filtered out). summarize_run adds "interrupted".
  std::string verdict;
};
// The summary of `outcomes`, tests of `targets` (which say what each skipped test lacked).
Summary summarize(const std::vector<TestOutcome>& outcomes, const std::vector<Target>& targets);

// An input the run lacked (missing_input()), with the tests of one target that skipped for it.
struct MissingInputEntry {
  std::string target;  // the device type
  MissingInput input;
  std::vector<std::string> tests;  // "ComputesCorrectResults", in the order they ran
};
// Every input whose absence made a test of `outcomes` skip, required ones first, one entry per
// target and flag.
std::vector<MissingInputEntry> missing_inputs(const std::vector<TestOutcome>& outcomes,
                                              const std::vector<Target>& targets);

// Everything a report says besides the targets and the outcomes.
struct ReportContext {
  std::string command_line;  // as invoked, for reproducing the run
  std::string gtest_filter;  // "*" unless --gtest_filter narrowed the run
  std::vector<std::string> search_paths;
  std::string plugin_set;  // empty: none
  std::string isolation;   // "process" or "none" (--isolation)
  // What went wrong outside any test, e.g. a worker process that died while starting up; any
  // makes the run's verdict "fail" (the run may have left tests unrun).
  std::vector<std::string> run_errors;
  // The signal (SIGINT, SIGTERM) that stopped the run before every test ran; 0: none. The
  // verdict is then "interrupted" unless a test failed or crashed.
  int interrupted_by = 0;
};

// summarize(outcomes, targets) with the verdict of the whole run: also "fail" on a run error and
// "interrupted" when the run was stopped (see ReportContext).
Summary summarize_run(const ReportContext& context, const std::vector<TestOutcome>& outcomes,
                      const std::vector<Target>& targets);

// The report as Markdown / as a JSON document (2-space indented). Pure functions of their
// arguments plus the clock and uname(2).
std::string markdown_report(const ReportContext& context, const std::vector<Target>& targets,
                            const std::vector<TestOutcome>& outcomes);
std::string json_report(const ReportContext& context, const std::vector<Target>& targets,
                        const std::vector<TestOutcome>& outcomes);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_REPORT_H_
