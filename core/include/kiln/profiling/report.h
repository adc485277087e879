// SPDX-License-Identifier: Apache-2.0
// Profiling reports (SPEC.md §3.1, §3.3-§3.5, §3.8): the rows a profiler produces and their
// JSON, CSV, table and Chrome trace-event forms. Formats and Kiln's deviations from the reference
// are documented in docs/profiling-formats.md.
#ifndef KILN_PROFILING_REPORT_H_
#define KILN_PROFILING_REPORT_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/device.h"
#include "kiln/profiling/metrics.h"

namespace kiln::profiling {

// Metric names with a meaning in reports. The profiler writes the first four into every row
// (§3.2); "Hash" and "Argument Shapes" take part in the table's aggregation key (§3.5).
inline constexpr std::string_view kNameMetric = "Name";
inline constexpr std::string_view kDurationMetric = "Duration (us)";
inline constexpr std::string_view kCountMetric = "Count";
inline constexpr std::string_view kDeviceMetric = "Device";
inline constexpr std::string_view kPercentMetric = "Percent";
inline constexpr std::string_view kHashMetric = "Hash";
inline constexpr std::string_view kArgumentShapesMetric = "Argument Shapes";
// Kiln's addition: a Duration, the call's start as an offset in microseconds from the start of
// the profiled run. An ordinary metric in json() and csv(); table() shows it only for unaggregated
// rows and never sums it; chrome_trace() uses it as the slice start.
inline constexpr std::string_view kStartMetric = "Start (us)";
// Kiln's addition: a string, the name of the profiled call this call ran inside (a VM
// function's kernels are nested in it); absent for a top-level call. Its time is part of that
// call's, so table() leaves nested rows out of the Sum row and never aggregates a nested call
// with a top-level one; an ordinary metric in json(), csv() and chrome_trace().
inline constexpr std::string_view kNestedInMetric = "Nested in";
// Kiln's additions to the configuration of a profile that made warm-up calls before the
// profiled ones (kiln profile, VirtualMachine::profile): how many (a Count), and how long they
// took by the host clock, synchronized (a Duration). Their time is in no row and no total.
inline constexpr std::string_view kWarmupCallsConfig = "Warm-up calls (excluded)";
inline constexpr std::string_view kWarmupDurationConfig = "Warm-up duration (us)";

// The result of a profiled run. A plain value type: copyable, no shared state, and every method
// is const and thread-compatible.
struct Report {
  // One row per call, in call order.
  std::vector<MetricMap> calls;
  // Device name (device_report_name(), e.g. "cpu0") -> that device's "Total" row.
  std::map<std::string, MetricMap> device_metrics;
  // Run-wide settings, e.g. "Executor" -> "VM", "Number of threads" -> Count.
  MetricMap configuration;

  // CSV of `calls` only (§3.4): a header of every call metric name in byte order, then one line
  // per call. Strings are quoted; an embedded '"' is doubled (RFC 4180), which the reference
  // did not do.
  std::string csv() const;

  // The human-readable table (§3.5): calls (grouped by Hash-or-Name + Argument Shapes + Device,
  // and "Nested in" when present, when `aggregate`; groups in first-appearance order), stably
  // sorted by "Duration (us)" descending when `sort`, a "----------" separator and a "Sum" row
  // of the top-level rows (those without "Nested in", so that each nanosecond counts once) when
  // `col_sums`, one "Total" row per device, then the Configuration section. Numbers use
  // format_metric(). Throws
  // ValueError when one metric name holds values of different types in rows that must be
  // aggregated or summed together.
  std::string table(bool sort = true, bool aggregate = true, bool col_sums = true) const;

  // The reference's JSON (§3.3): compact, keys "calls", "device_metrics", "configuration",
  // doubles fixed with 17 decimals, strings with standard JSON escaping. Non-finite doubles are
  // written as the strings "NaN", "Infinity", "-Infinity" so the output stays valid JSON.
  std::string json() const;

  // Parses what json() writes and what the reference's AsJSON writes (including raw control
  // characters inside strings, which it did not escape). Unknown top-level keys are ignored;
  // missing ones give empty members. Throws ValueError naming where and why for anything
  // malformed, e.g. `calls[3]["Duration (us)"]: expected an object with one of the keys count,
  // microseconds, percent, ratio, string`.
  static Report from_json(std::string_view text);

  // Chrome trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ns"}) for Perfetto or
  // chrome://tracing: one track (tid) per device, named by a "thread_name" metadata event, and one
  // complete ("ph":"X") event per call with ts = "Start (us)" (else the calls laid end to end in
  // call order), dur = "Duration (us)", name = "Name" and the other metrics as args.
  std::string chrome_trace() const;

  // The default table(), as the reference's str(report).
  std::string str() const { return table(); }
};

// The name of `device` in reports (§3.8): "<device type name><id>", e.g. "cpu0", "cuda0",
// "opencl1", with the type names of `names` (a Runtime's device_types() also knows its plugins'
// names); a type without a name gives "dev<code><id>".
std::string device_report_name(Device device,
                               const DeviceTypeNames& names = DeviceTypeNames::builtin());

// Formats one metric for table() (§3.5), independent of the process locale: Count as an integer
// with ',' every three digits ("1,234"); Duration fixed with 2 decimals and ',' grouping
// ("705,779.00"); Percent fixed with 2 decimals, no grouping ("51.22"); Ratio with 2 significant
// digits, general format ("0.5", "1.2e+03"); a string verbatim. NaN and infinities print as "nan",
// "inf", "-inf".
std::string format_metric(const MetricValue& value);

}  // namespace kiln::profiling

#endif  // KILN_PROFILING_REPORT_H_
