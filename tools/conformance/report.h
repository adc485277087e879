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
  // "pass" (no failure and at least one test passed), "fail" (any failure), or "nothing ran"
  // (no failure, no pass: every test skipped or filtered out).
  std::string verdict;
};
Summary summarize(const std::vector<TestOutcome>& outcomes);

// Everything a report says besides the targets and the outcomes.
struct ReportContext {
  std::string command_line;  // as invoked, for reproducing the run
  std::string gtest_filter;  // "*" unless --gtest_filter narrowed the run
  std::vector<std::string> search_paths;
  std::string plugin_set;  // empty: none
};

// The report as Markdown / as a JSON document (2-space indented). Pure functions of their
// arguments plus the clock and uname(2).
std::string markdown_report(const ReportContext& context, const std::vector<Target>& targets,
                            const std::vector<TestOutcome>& outcomes);
std::string json_report(const ReportContext& context, const std::vector<Target>& targets,
                        const std::vector<TestOutcome>& outcomes);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_REPORT_H_
