// SPDX-License-Identifier: Apache-2.0
// Report: metric formatting, CSV (SPEC.md §3.4) and the table (§3.5).
#include "kiln/profiling/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "profiling/report_internal.h"

namespace kiln::profiling {

namespace detail {

namespace {

// Length of the valid UTF-8 sequence at the start of `s`, or 0 if it does not start with one.
size_t utf8_sequence_length(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto continuation = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return continuation(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b0 == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t n = utf8_sequence_length(text.substr(i));
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string fixed(double value, int decimals) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Enough for DBL_MAX (309 integer digits) plus sign, point and decimals.
  char buf[400];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed, decimals);
  if (ec != std::errc()) return fmt::format("{:.{}f}", value, decimals);
  return std::string(buf, end);
}

std::string shortest(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return fmt::format("{}", value);
  return std::string(buf, end);
}

const char* type_name(const MetricValue& value) {
  static constexpr const char* kNames[] = {"Count", "Duration", "Percent", "Ratio", "string"};
  return kNames[value.index()];
}

std::string text_of(const MetricValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  return format_metric(value);
}

}  // namespace detail

namespace {

using detail::fixed;

// Inserts ',' every three digits into the integer part of a formatted number ("-1234.50" ->
// "-1,234.50").
std::string group_thousands(const std::string& number) {
  size_t begin = (!number.empty() && number[0] == '-') ? 1 : 0;
  size_t end = number.find('.');
  if (end == std::string::npos) end = number.size();
  std::string out = number.substr(0, begin);
  for (size_t i = begin; i < end; ++i) {
    out += number[i];
    size_t remaining = end - i - 1;
    if (remaining > 0 && remaining % 3 == 0) out += ',';
  }
  out += number.substr(end);
  return out;
}

// 2 significant digits, general format, as printf("%.2g").
std::string general2(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::general, 2);
  if (ec != std::errc()) return fmt::format("{:.2g}", value);
  return std::string(buf, end);
}

// C++ default stream formatting of a double (6 significant digits, "%g"), locale-independent.
std::string general6(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::general, 6);
  if (ec != std::errc()) return fmt::format("{:g}", value);
  return std::string(buf, end);
}

bool has(const MetricMap& row, std::string_view name) {
  return row.find(std::string(name)) != row.end();
}

// The aggregation key of a call (§3.5): (Hash if present else Name) + Argument Shapes + Device,
// concatenated without a separator as the reference does.
std::string group_key(const MetricMap& call) {
  std::string key;
  auto append = [&](std::string_view name) {
    auto it = call.find(std::string(name));
    if (it != call.end()) key += detail::text_of(it->second);
  };
  append(has(call, kHashMetric) ? kHashMetric : kNameMetric);
  append(kArgumentShapesMetric);
  append(kDeviceMetric);
  // Kiln's addition: a nested call never joins a top-level one (nor one nested elsewhere), so
  // that the Sum row can leave out exactly the nested rows.
  if (auto it = call.find(std::string(kNestedInMetric)); it != call.end()) {
    key += " (nested in " + detail::text_of(it->second) + ")";
  }
  return key;
}

// Whether `row` ran inside another profiled call ("Nested in" present and not empty).
bool nested(const MetricMap& row) {
  auto it = row.find(std::string(kNestedInMetric));
  return it != row.end() && !detail::text_of(it->second).empty();
}

// Aggregates the values one metric takes in one group of calls: sums Count, Duration and
// Percent, averages Ratio, keeps a string when all are equal and blanks it otherwise.
MetricValue aggregate_values(const std::vector<const MetricValue*>& values,
                             const std::string& metric, const std::string& key) {
  const MetricValue& first = *values.front();
  for (const MetricValue* v : values) {
    if (v->index() != first.index()) {
      throw ValueError(fmt::format(
          "Report.table: cannot aggregate metric \"{}\" of the calls grouped as \"{}\": it holds "
          "both a {} and a {}",
          metric, key, detail::type_name(first), detail::type_name(*v)));
    }
  }
  switch (first.index()) {
    case 0: {
      int64_t sum = 0;
      for (const MetricValue* v : values) sum += std::get<Count>(*v).value;
      return Count{sum};
    }
    case 1: {
      double sum = 0;
      for (const MetricValue* v : values) sum += std::get<Duration>(*v).microseconds;
      return Duration{sum};
    }
    case 2: {
      double sum = 0;
      for (const MetricValue* v : values) sum += std::get<Percent>(*v).percent;
      return Percent{sum};
    }
    case 3: {
      double sum = 0;
      for (const MetricValue* v : values) sum += std::get<Ratio>(*v).ratio;
      return Ratio{sum / static_cast<double>(values.size())};
    }
    default: {
      const auto& s = std::get<std::string>(first);
      for (const MetricValue* v : values) {
        if (std::get<std::string>(*v) != s) return std::string();
      }
      return s;
    }
  }
}

// Calls grouped by group_key(), groups in order of first appearance; "Start (us)" is left out.
std::vector<MetricMap> aggregate_calls(const std::vector<MetricMap>& calls) {
  std::vector<std::string> keys;
  std::unordered_map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string key = group_key(calls[i]);
    auto [it, inserted] = groups.try_emplace(key);
    if (inserted) keys.push_back(key);
    it->second.push_back(i);
  }
  std::set<std::string> metrics;
  for (const MetricMap& call : calls) {
    for (const auto& [name, value] : call) metrics.insert(name);
  }
  metrics.erase(std::string(kStartMetric));

  std::vector<MetricMap> rows;
  rows.reserve(keys.size());
  for (const std::string& key : keys) {
    const std::vector<size_t>& members = groups.at(key);
    MetricMap row;
    for (const std::string& metric : metrics) {
      std::vector<const MetricValue*> values;
      for (size_t i : members) {
        auto it = calls[i].find(metric);
        if (it != calls[i].end()) values.push_back(&it->second);
      }
      if (!values.empty()) row.emplace(metric, aggregate_values(values, metric, key));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// The "Duration (us)" a row sorts by; none when it is missing, not a Duration, or NaN.
std::optional<double> sort_duration(const MetricMap& row) {
  auto it = row.find(std::string(kDurationMetric));
  if (it == row.end()) return std::nullopt;
  const auto* d = std::get_if<Duration>(&it->second);
  if (d == nullptr || std::isnan(d->microseconds)) return std::nullopt;
  return d->microseconds;
}

// The "Sum" row: per metric, the sum of its Count, Duration or Percent values over the top-level
// `rows` (nested rows are part of the time of the call they ran in; "Start (us)", Ratio and
// string metrics are skipped), and Name = "Sum".
MetricMap column_sums(const std::vector<MetricMap>& rows) {
  MetricMap sums;
  for (const MetricMap& row : rows) {
    if (nested(row)) continue;
    for (const auto& [name, value] : row) {
      if (name == kStartMetric) continue;
      if (std::holds_alternative<Ratio>(value) || std::holds_alternative<std::string>(value)) {
        continue;
      }
      auto [it, inserted] = sums.try_emplace(name, value);
      if (inserted) continue;
      MetricValue& sum = it->second;
      if (sum.index() != value.index()) {
        throw ValueError(
            fmt::format("Report.table: cannot sum column \"{}\": it holds both a {} and a {}", name,
                        detail::type_name(sum), detail::type_name(value)));
      }
      if (auto* c = std::get_if<Count>(&sum)) {
        c->value += std::get<Count>(value).value;
      } else if (auto* d = std::get_if<Duration>(&sum)) {
        d->microseconds += std::get<Duration>(value).microseconds;
      } else {
        std::get<Percent>(sum).percent += std::get<Percent>(value).percent;
      }
    }
  }
  sums[std::string(kNameMetric)] = std::string("Sum");
  return sums;
}

}  // namespace

std::string device_report_name(Device device, const DeviceTypeNames& names) {
  auto name = names.name_of(device.type);
  return fmt::format("{}{}", name ? *name : fmt::format("dev{}", device.type), device.id);
}

std::string format_metric(const MetricValue& value) {
  if (const auto* c = std::get_if<Count>(&value)) return group_thousands(std::to_string(c->value));
  if (const auto* d = std::get_if<Duration>(&value)) {
    if (!std::isfinite(d->microseconds)) return fixed(d->microseconds, 2);
    return group_thousands(fixed(d->microseconds, 2));
  }
  if (const auto* p = std::get_if<Percent>(&value)) return fixed(p->percent, 2);
  if (const auto* r = std::get_if<Ratio>(&value)) return general2(r->ratio);
  return std::get<std::string>(value);
}

std::string Report::csv() const {
  std::set<std::string> names;
  for (const MetricMap& call : calls) {
    for (const auto& [name, value] : call) names.insert(name);
  }
  auto quote = [](std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"') out += '"';
      out += c;
    }
    return out + "\"";
  };
  std::string out;
  bool first = true;
  for (const std::string& name : names) {
    if (!first) out += ',';
    first = false;
    // Header names are written bare, as the reference does, unless that would break the line.
    out += name.find_first_of(",\"\r\n") == std::string::npos ? name : quote(name);
  }
  out += '\n';
  for (const MetricMap& call : calls) {
    first = true;
    for (const std::string& name : names) {
      if (!first) out += ',';
      first = false;
      auto it = call.find(name);
      if (it == call.end()) continue;
      const MetricValue& v = it->second;
      if (const auto* c = std::get_if<Count>(&v)) {
        out += std::to_string(c->value);
      } else if (const auto* d = std::get_if<Duration>(&v)) {
        out += general6(d->microseconds);
      } else if (const auto* p = std::get_if<Percent>(&v)) {
        out += general6(p->percent);
      } else if (const auto* r = std::get_if<Ratio>(&v)) {
        out += general6(r->ratio);
      } else {
        out += quote(std::get<std::string>(v));
      }
    }
    out += '\n';
  }
  return out;
}

namespace {

// What table() appends to a value that cannot be (issue 29 item 3).
constexpr const char* kImpossibleMark = " (!)";

}  // namespace

// A percentage outside 0-100 (with room for a sum's rounding), a negative duration or count.
bool impossible_for_its_kind(const MetricValue& value) {
  if (const auto* c = std::get_if<Count>(&value)) return c->value < 0;
  if (const auto* d = std::get_if<Duration>(&value)) return d->microseconds < 0;
  if (const auto* p = std::get_if<Percent>(&value)) {
    return p->percent < 0 || p->percent > 100 * (1 + 1e-9);
  }
  return false;
}

std::string Report::table(bool sort, bool aggregate, bool col_sums) const {
  // 1. Rows.
  std::vector<MetricMap> rows = aggregate ? aggregate_calls(calls) : calls;
  // 2. Stable sort by duration, descending; rows without a (non-NaN) duration go last.
  if (sort) {
    std::vector<std::pair<std::optional<double>, MetricMap>> keyed;
    keyed.reserve(rows.size());
    for (MetricMap& row : rows) keyed.emplace_back(sort_duration(row), std::move(row));
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
      if (!a.first) return false;
      if (!b.first) return true;
      return *a.first > *b.first;
    });
    rows.clear();
    for (auto& [key, row] : keyed) rows.push_back(std::move(row));
  }
  // 3. Separator and Sum rows.
  const bool any_nested = std::any_of(rows.begin(), rows.end(), nested);
  if (col_sums) {
    MetricMap sums = column_sums(rows);
    rows.push_back(MetricMap{{std::string(kNameMetric), std::string("----------")}});
    rows.push_back(std::move(sums));
  }
  // 4. One Total row per device.
  for (const auto& [device, metrics] : device_metrics) {
    MetricMap row = metrics;
    row[std::string(kNameMetric)] = std::string("Total");
    rows.push_back(std::move(row));
  }
  // 5. Columns: the fixed six, "Nested in" when a row is nested, then every other printed metric
  // in byte order.
  std::vector<std::string> headers = {
      std::string(kNameMetric),   std::string(kDurationMetric), std::string(kPercentMetric),
      std::string(kDeviceMetric), std::string(kCountMetric),    std::string(kArgumentShapesMetric)};
  if (any_nested) headers.emplace_back(kNestedInMetric);
  std::set<std::string> others;
  for (const MetricMap& row : rows) {
    for (const auto& [name, value] : row) others.insert(name);
  }
  for (const std::string& name : others) {
    if (std::find(headers.begin(), headers.end(), name) == headers.end()) headers.push_back(name);
  }
  // 6. Cells and widths (in bytes). A collector's value impossible for its kind is marked, not
  // printed as if it were a measurement (the fixed columns are the profiler's own: a merged
  // report's Percent may pass 100 by design).
  constexpr size_t kFixedColumns = 6;
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size() + 1);
  cells.push_back(headers);
  bool marked = false;
  for (const MetricMap& row : rows) {
    std::vector<std::string> line;
    line.reserve(headers.size());
    for (size_t column = 0; column < headers.size(); ++column) {
      auto it = row.find(headers[column]);
      if (it == row.end()) {
        line.emplace_back();
        continue;
      }
      const bool wrong = column >= kFixedColumns && impossible_for_its_kind(it->second);
      marked = marked || wrong;
      line.push_back(format_metric(it->second) + (wrong ? kImpossibleMark : ""));
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> widths(headers.size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  }
  // 7. Layout: column 0 left-aligned, the others right-aligned, each cell followed by two spaces.
  std::string out;
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) {
      std::string padding(widths[i] - line[i].size(), ' ');
      out += i == 0 ? line[i] + padding : padding + line[i];
      out += "  ";
    }
    out += '\n';
  }
  if (any_nested && col_sums) {
    out += fmt::format(
        "Sum: the calls nested in no other; a row with \"{}\" ran inside the call it names and "
        "is part of that call's time\n",
        kNestedInMetric);
  }
  if (marked) {
    out += fmt::format(
        "{} impossible for its kind (a percentage outside 0-100, a negative duration or count): "
        "the collector or plugin that reported it is wrong\n",
        kImpossibleMark);
  }
  // 8. Configuration.
  out += "\nConfiguration\n-------------\n";
  for (const auto& [key, value] : configuration) {
    out += key;
    out += ": ";
    out += format_metric(value);
    out += '\n';
  }
  return out;
}

}  // namespace kiln::profiling
