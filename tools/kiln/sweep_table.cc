// SPDX-License-Identifier: Apache-2.0
// The text report of a `kiln run` sweep: one row per point (what ran where, how fast, how noisy,
// and whether it held), and beneath the table what a row cannot hold.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "run_command.h"
#include "terminal_text.h"

namespace kiln::tool {
namespace {

// A column of the table: numbers are right-aligned, text left-aligned.
struct Column {
  std::string name;
  bool numeric;
};

const std::vector<Column>& columns() {
  static const std::vector<Column> kColumns = {
      {"#", true},       {"point", false}, {"benchmark", false}, {"median", true},
      {"CV", true},      {"RSE", true},    {"noise", false},     {"GB/s", true},
      {"GFLOP/s", true}, {"timer", false}, {"status", false}};
  return kColumns;
}

// The cells of a point's row.
std::vector<std::string> row_of(const PointRun& r) {
  // Names and errors may come from a module or a server: control characters written out.
  std::vector<std::string> row = {std::to_string(r.point->index + 1), printable(r.point->label),
                                  printable(r.name)};
  if (r.outcome) {
    const Outcome& o = *r.outcome;
    const stats::Summary& sum = o.verdict.summary;
    row.push_back(format_time_ns(o.result.profile.median() * 1e9));
    row.push_back(sum.n >= 2 ? format_percent(sum.cv) : "-");
    row.push_back(sum.n >= 2 ? format_percent(sum.rse) : "-");
    row.emplace_back(o.verdict.noisy ? "noisy" : "ok");
    row.push_back(o.show_throughput ? fmt::format("{:.3g}", o.throughput.gb_per_s) : "-");
    row.push_back(o.throughput.gflop_per_s ? fmt::format("{:.3g}", *o.throughput.gflop_per_s)
                                           : "-");
    row.push_back(o.result.profile.timer);
  } else {
    row.resize(columns().size() - 1, "-");  // nothing measured
  }
  row.push_back(r.status == "ok" ? "ok" : fmt::format("{} (exit {})", r.status, r.exit_code));
  return row;
}

void print_rows(const std::vector<std::vector<std::string>>& rows) {
  const std::vector<Column>& cols = columns();
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = cols[c].name.size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  const auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += "  ";
      if (c + 1 == cells.size()) {
        line += cells[c];  // the last column unpadded
      } else if (cols[c].numeric) {
        line += fmt::format("{:>{}}", cells[c], width[c]);
      } else {
        line += fmt::format("{:<{}}", cells[c], width[c]);
      }
    }
    std::cout << line << "\n";
  };
  std::vector<std::string> header;
  header.reserve(cols.size());
  for (const Column& column : cols) header.push_back(column.name);
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

// The points' errors, each printed once: an error several points share (one that does not
// depend on the swept values, e.g. a missing module) names the points.
void print_errors(const std::vector<PointRun>& runs) {
  std::vector<std::pair<std::string, std::vector<const PointRun*>>> errors;
  for (const PointRun& r : runs) {
    if (r.error.empty()) continue;
    auto same = std::find_if(errors.begin(), errors.end(),
                             [&](const auto& e) { return e.first == r.error; });
    if (same == errors.end()) {
      errors.push_back({r.error, {&r}});
    } else {
      same->second.push_back(&r);
    }
  }
  for (const auto& [error, points] : errors) {
    if (points.size() == 1) {
      std::cout << fmt::format("point {} ({}): {}\n", points[0]->point->index + 1,
                               printable(points[0]->point->label), printable(error));
      continue;
    }
    if (points.size() == runs.size()) {
      std::cout << fmt::format("every point: {}\n", printable(error));
      continue;
    }
    std::vector<size_t> numbers;
    for (const PointRun* r : points) numbers.push_back(r->point->index + 1);
    std::cout << fmt::format("points {}: {}\n", fmt::join(numbers, ", "), printable(error));
  }
}

// Each measured point's noise verdict and check summary.
void print_verdicts(const std::vector<PointRun>& runs) {
  for (const PointRun& r : runs) {
    const std::string which =
        fmt::format("point {} ({})", r.point->index + 1, printable(r.point->label));
    if (!r.outcome) continue;
    if (!r.outcome->server.empty()) {
      std::cout << fmt::format(
          "{}: measured on {}{}\n", which, r.outcome->server,
          r.retried.empty()
              ? std::string()
              : fmt::format(" (attempt {}: {} server{} lost before)", r.attempts, r.retried.size(),
                            r.retried.size() == 1 ? " was" : "s were"));
    }
    if (r.outcome->verdict.noisy)
      std::cout << fmt::format("{}: {}\n", which, r.outcome->verdict.line());
    if (!r.outcome->check.summary.empty()) {
      std::cout << fmt::format("{}: checks{}:\n", which, r.outcome->check.ok ? "" : " FAILED");
      std::cout << r.outcome->check.summary << "\n";
    }
  }
}

}  // namespace

void print_sweep_table(const run::SweepSpec& sweep, const std::vector<PointRun>& runs,
                       int exit_code, size_t failed) {
  const size_t total = runs.size();
  std::vector<std::string> sizes;
  for (const run::SweepAxis& axis : sweep.axes) {
    sizes.push_back(fmt::format("{} {}", axis.values.size(), axis.name));
  }
  std::cout << fmt::format("sweep:    {}: {} point{} ({})\n", sweep.file.string(), total,
                           total == 1 ? "" : "s", fmt::join(sizes, " x "));
  std::vector<std::vector<std::string>> rows;
  rows.reserve(runs.size());
  for (const PointRun& r : runs) rows.push_back(row_of(r));
  print_rows(rows);
  print_errors(runs);
  print_verdicts(runs);
  std::cout << fmt::format("{} of {} point{} ok", total - failed, total, total == 1 ? "" : "s");
  if (failed > 0) {
    std::vector<std::string> which;
    for (const PointRun& r : runs) {
      if (r.exit_code != kExitOk) which.push_back(std::to_string(r.point->index + 1));
    }
    std::cout << fmt::format("; failed: {} (exit {})", fmt::join(which, ", "), exit_code);
  }
  std::cout << "\n";
}

}  // namespace kiln::tool
