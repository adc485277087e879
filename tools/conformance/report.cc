// SPDX-License-Identifier: Apache-2.0
#include "report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/detail/wait_status.h"
#include "kiln/version.h"

namespace kiln::conformance {
namespace {

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string host_description() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  return fmt::format("{} {} {} ({})", u.sysname, u.release, u.machine, u.nodename);
}

const char* disposition_text(Target::Disposition d) {
  switch (d) {
    case Target::Disposition::kRun:
      return "tested";
    case Target::Disposition::kSkip:
      return "skipped";
    case Target::Disposition::kFail:
      return "failed";
  }
  return "?";
}

// Markdown table cells: one line, no unescaped '|'.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += "<br>";
    } else {
      out += c;
    }
  }
  return out.empty() ? "-" : out;
}

// The summary of `target`'s tests.
Summary count(const std::vector<TestOutcome>& outcomes, const Target& target) {
  std::vector<TestOutcome> of_target;
  for (const auto& o : outcomes) {
    if (o.suite == target.suite()) of_target.push_back(o);
  }
  return summarize(of_target, {target});
}

// The target whose suite ran `o`, or null.
const Target* target_of(const TestOutcome& o, const std::vector<Target>& targets) {
  for (const Target& t : targets) {
    if (t.suite() == o.suite) return &t;
  }
  return nullptr;
}

// What `o` lacked, when it skipped for lack of an input.
std::optional<MissingInput> lacked(const TestOutcome& o, const std::vector<Target>& targets) {
  if (o.status != TestOutcome::Status::kSkipped) return std::nullopt;
  const Target* t = target_of(o, targets);
  return t != nullptr ? missing_input(*t, o.name) : std::nullopt;
}

// "Device type `cpu`" / "Collector `rusage`".
std::string title(const Target& t) {
  return fmt::format("{} `{}`", t.kind == Target::Kind::kDevice ? "Device type" : "Collector",
                     t.name);
}

}  // namespace

Summary summarize(const std::vector<TestOutcome>& outcomes, const std::vector<Target>& targets) {
  Summary s;
  for (const auto& o : outcomes) {
    const std::optional<MissingInput> input = lacked(o, targets);
    if (input && input->required) ++s.incomplete;
    switch (o.status) {
      case TestOutcome::Status::kPassed:
        ++s.passed;
        break;
      case TestOutcome::Status::kFailed:
        ++s.failed;
        break;
      case TestOutcome::Status::kSkipped:
        ++s.skipped;
        break;
      case TestOutcome::Status::kCrashed:
        ++s.crashed;
        break;
    }
  }
  s.verdict = s.failed > 0 || s.crashed > 0 ? "fail"
              : s.incomplete > 0            ? "incomplete"
              : s.passed > 0                ? "pass"
                                            : "nothing ran";
  return s;
}

std::vector<MissingInputEntry> missing_inputs(const std::vector<TestOutcome>& outcomes,
                                              const std::vector<Target>& targets) {
  std::vector<MissingInputEntry> entries;
  for (const TestOutcome& o : outcomes) {
    std::optional<MissingInput> input = lacked(o, targets);
    if (!input) continue;
    auto same = [&](const MissingInputEntry& e) {
      return e.target == o.target && e.input.flag == input->flag;
    };
    auto it = std::find_if(entries.begin(), entries.end(), same);
    if (it == entries.end()) {
      entries.push_back({o.target, std::move(*input), {}});
      it = std::prev(entries.end());
    }
    if (std::find(it->tests.begin(), it->tests.end(), o.name) == it->tests.end()) {
      it->tests.push_back(o.name);
    }
  }
  std::stable_partition(entries.begin(), entries.end(),
                        [](const MissingInputEntry& e) { return e.input.required; });
  return entries;
}

Summary summarize_run(const ReportContext& context, const std::vector<TestOutcome>& outcomes,
                      const std::vector<Target>& targets) {
  Summary s = summarize(outcomes, targets);
  if (s.verdict == "fail") return s;
  if (context.interrupted_by != 0) {
    s.verdict = "interrupted";
  } else if (!context.run_errors.empty()) {
    s.verdict = "fail";
  }
  return s;
}

std::string markdown_report(const ReportContext& context, const std::vector<Target>& targets,
                            const std::vector<TestOutcome>& outcomes) {
  const Summary total = summarize_run(context, outcomes, targets);
  std::string md;
  auto line = [&md](const std::string& text = "") { md += text + "\n"; };
  line("# Kiln device conformance report");
  line();
  line(fmt::format("**Verdict: {}** — {} passed, {} failed, {} skipped, {} crashed", total.verdict,
                   total.passed, total.failed, total.skipped, total.crashed));
  line();
  const std::vector<MissingInputEntry> inputs = missing_inputs(outcomes, targets);
  bool optional_heading = false;
  for (const MissingInputEntry& e : inputs) {
    if (e.input.required && &e == &inputs.front()) {
      line(fmt::format(
          "**Incomplete**: {} test(s) skipped for lack of input, so this run proves less than "
          "a pass. To run them, add to the command:",
          total.incomplete));
      line();
    }
    if (!e.input.required && !optional_heading) {
      if (&e != &inputs.front()) line();
      line("Optional inputs (their tests skipped; the run is complete without them):");
      line();
      optional_heading = true;
    }
    line(fmt::format("- `{}` ({}: {}): {}", e.input.add, e.target, fmt::join(e.tests, ", "),
                     e.input.what));
  }
  if (!inputs.empty()) line();
  if (context.interrupted_by != 0) {
    line(fmt::format("**Interrupted by {}**: the tests that had not ended are not listed.",
                     kiln::detail::signal_name(context.interrupted_by)));
    line();
  }
  for (const std::string& error : context.run_errors) {
    line(fmt::format("**Run error:** {}", error));
    line();
  }
  line(fmt::format("- Kiln: {} (plugin ABI {})", kiln::version(), kiln::abi_version()));
  line(fmt::format("- Date: {}", utc_now()));
  line(fmt::format("- Host: {}", host_description()));
  line(fmt::format("- Command: `{}`", context.command_line));
  line(fmt::format("- Test filter: `{}`", context.gtest_filter));
  line(fmt::format("- Isolation: {}", context.isolation));
  line(fmt::format("- Plugin set: {}", context.plugin_set.empty() ? "(none)" : context.plugin_set));
  line(fmt::format("- Search paths: {}",
                   context.search_paths.empty()
                       ? "(none)"
                       : fmt::format("{}", fmt::join(context.search_paths, ", "))));
  for (const Target& t : targets) {
    const Summary s = count(outcomes, t);
    line();
    line(fmt::format("## {}: {}", title(t), s.verdict));
    line();
    line(fmt::format("- Status: {}{}", disposition_text(t.disposition),
                     t.reason.empty() ? "" : " — " + t.reason));
    if (t.plugin) {
      const PluginStatus& p = *t.plugin;
      line(fmt::format("- Plugin: {} {} (ABI {}, {})", p.name, p.version.empty() ? "-" : p.version,
                       p.abi.empty() ? "-" : p.abi, to_string(p.state)));
      line(fmt::format("- Library: {}", p.library.string()));
      line(fmt::format("- Library SHA-256: {}",
                       t.library_sha256.empty() ? "(unreadable)" : t.library_sha256));
      line(fmt::format("- Manifest: {}", p.manifest.string()));
    } else {
      line("- Plugin: none found");
    }
    if (t.kind == Target::Kind::kCollector) {
      // Collectors have no devices or modules of their own.
    } else if (t.module) {
      line(fmt::format("- Module: {} (format {}, kernel {}, SHA-256 {})", t.module->path,
                       t.module->format, t.module->kernel,
                       t.module_sha256.empty() ? "(unreadable)" : t.module_sha256));
    } else {
      line("- Module: none given");
    }
    if (t.kind != Target::Kind::kDevice) {
      // Collectors run no kernels.
    } else if (t.timing_kernel) {
      line(fmt::format("- Timing kernel: {} (format {}, kernel {}, SHA-256 {})",
                       t.timing_kernel->path, t.timing_kernel->format, t.timing_kernel->kernel,
                       t.timing_kernel_sha256.empty() ? "(unreadable)" : t.timing_kernel_sha256));
    } else {
      line("- Timing kernel: none given");
    }
    if (t.kind == Target::Kind::kDevice) {
      line(fmt::format("- Devices: {}{}", t.device_count,
                       t.device_count == 0 && !t.why_none.empty() ? " — " + t.why_none : ""));
      for (size_t id = 0; id < t.devices.size(); ++id) {
        std::vector<std::string> attrs;
        for (const auto& [k, v] : t.devices[id]) attrs.push_back(fmt::format("{}={}", k, v));
        line(fmt::format("  - {}:{}: {}", t.name, id, fmt::join(attrs, ", ")));
      }
    }
    line();
    line("| Test | Result | Reason |");
    line("| --- | --- | --- |");
    for (const TestOutcome& o : outcomes) {
      if (o.suite != t.suite()) continue;
      line(fmt::format("| {} | {} | {} |", o.name, to_string(o.status), cell(o.message)));
    }
  }
  line();
  line("## Summary");
  line();
  line("| Tested | Passed | Failed | Skipped | Crashed | Verdict |");
  line("| --- | --- | --- | --- | --- | --- |");
  for (const Target& t : targets) {
    const Summary s = count(outcomes, t);
    line(fmt::format("| {} | {} | {} | {} | {} | {} |", title(t), s.passed, s.failed, s.skipped,
                     s.crashed, s.verdict));
  }
  line(fmt::format("| **all** | {} | {} | {} | {} | **{}** |", total.passed, total.failed,
                   total.skipped, total.crashed, total.verdict));
  return md;
}

std::string json_report(const ReportContext& context, const std::vector<Target>& targets,
                        const std::vector<TestOutcome>& outcomes) {
  using nlohmann::json;
  const Summary total = summarize_run(context, outcomes, targets);
  json doc;
  doc["kiln"] = {{"version", kiln::version()}, {"abi", kiln::abi_version()}};
  doc["date"] = utc_now();
  doc["host"] = host_description();
  doc["command"] = context.command_line;
  doc["gtest_filter"] = context.gtest_filter;
  doc["plugin_set"] = context.plugin_set;
  doc["search_paths"] = context.search_paths;
  doc["isolation"] = context.isolation;
  doc["run_errors"] = context.run_errors;
  doc["interrupted_by"] = context.interrupted_by != 0
                              ? json(kiln::detail::signal_name(context.interrupted_by))
                              : json(nullptr);
  doc["targets"] = json::array();
  for (const Target& t : targets) {
    const Summary s = count(outcomes, t);
    json jt{{"kind", t.kind == Target::Kind::kDevice ? "device" : "collector"},
            {"name", t.name},
            {"status", disposition_text(t.disposition)},
            {"reason", t.reason},
            {"device_count", t.device_count},
            {"why_none", t.why_none},
            {"verdict", s.verdict},
            {"passed", s.passed},
            {"failed", s.failed},
            {"skipped", s.skipped},
            {"crashed", s.crashed}};
    if (t.plugin) {
      const PluginStatus& p = *t.plugin;
      jt["plugin"] = {{"name", p.name},
                      {"version", p.version},
                      {"abi", p.abi},
                      {"state", to_string(p.state)},
                      {"reason", p.reason},
                      {"library", p.library.string()},
                      {"library_sha256", t.library_sha256},
                      {"manifest", p.manifest.string()}};
    } else {
      jt["plugin"] = nullptr;
    }
    if (t.module) {
      jt["module"] = {{"path", t.module->path},
                      {"format", t.module->format},
                      {"kernel", t.module->kernel},
                      {"sha256", t.module_sha256}};
    } else {
      jt["module"] = nullptr;
    }
    if (t.timing_kernel) {
      jt["timing_kernel"] = {{"path", t.timing_kernel->path},
                             {"format", t.timing_kernel->format},
                             {"kernel", t.timing_kernel->kernel},
                             {"sha256", t.timing_kernel_sha256}};
    } else {
      jt["timing_kernel"] = nullptr;
    }
    jt["devices"] = json::array();
    for (size_t id = 0; id < t.devices.size(); ++id) {
      json attrs = json::object();
      for (const auto& [k, v] : t.devices[id]) attrs[k] = v;
      jt["devices"].push_back(
          {{"device", fmt::format("{}:{}", t.name, id)}, {"attributes", attrs}});
    }
    jt["tests"] = json::array();
    for (const TestOutcome& o : outcomes) {
      if (o.suite != t.suite()) continue;
      jt["tests"].push_back({{"name", o.name},
                             {"result", to_string(o.status)},
                             {"reason", o.message},
                             {"elapsed_ms", o.elapsed_ms}});
    }
    doc["targets"].push_back(std::move(jt));
  }
  doc["missing_inputs"] = json::array();
  for (const MissingInputEntry& e : missing_inputs(outcomes, targets)) {
    doc["missing_inputs"].push_back({{"target", e.target},
                                     {"flag", e.input.flag},
                                     {"add", e.input.add},
                                     {"what", e.input.what},
                                     {"required", e.input.required},
                                     {"tests", e.tests}});
  }
  doc["summary"] = {{"passed", total.passed},         {"failed", total.failed},
                    {"skipped", total.skipped},       {"crashed", total.crashed},
                    {"incomplete", total.incomplete}, {"verdict", total.verdict}};
  return doc.dump(2) + "\n";
}

}  // namespace kiln::conformance
