// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the report formatters (report.cc, report_json.cc). Private to libkiln.
#ifndef KILN_PROFILING_REPORT_INTERNAL_H_
#define KILN_PROFILING_REPORT_INTERNAL_H_

#include <string>
#include <string_view>

#include "kiln/profiling/metrics.h"

namespace kiln::profiling::detail {

// Appends `text` as a JSON string literal (quotes included) to `out`: '"' and '\' escaped,
// control characters as \b \f \n \r \t or \u00XX, valid UTF-8 verbatim, and each byte that is
// not part of valid UTF-8 replaced by U+FFFD.
void append_json_string(std::string& out, std::string_view text);

// `value` fixed-point with `decimals` digits after the point, locale-independent ("12.30").
// Non-finite values give "nan", "inf" or "-inf".
std::string fixed(double value, int decimals);

// The shortest decimal text that reads back as exactly `value` ("12.3", "1e+20"); finite only.
std::string shortest(double value);

// The metric's type for messages: "Count", "Duration", "Percent", "Ratio" or "string".
const char* type_name(const MetricValue& value);

// A string metric's text, or format_metric() of any other metric.
std::string text_of(const MetricValue& value);

}  // namespace kiln::profiling::detail

#endif  // KILN_PROFILING_REPORT_INTERNAL_H_
