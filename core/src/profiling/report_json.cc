// SPDX-License-Identifier: Apache-2.0
// Report: the reference's JSON (SPEC.md §3.3) both ways, and Chrome trace-event JSON.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/profiling/report.h"
#include "profiling/report_internal.h"

namespace kiln::profiling {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetricKeys = "count, microseconds, percent, ratio, string";

// ---------------------------------------------------------------------------------------------
// Writing.

// A double of the reference's JSON: fixed with 17 decimals; non-finite values as a string.
void append_json_double(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "\"NaN\"";
  } else if (std::isinf(value)) {
    out += value < 0 ? "\"-Infinity\"" : "\"Infinity\"";
  } else {
    out += detail::fixed(value, 17);
  }
}

void append_metric(std::string& out, const MetricValue& value) {
  if (const auto* c = std::get_if<Count>(&value)) {
    out += "{\"count\":" + std::to_string(c->value) + "}";
  } else if (const auto* d = std::get_if<Duration>(&value)) {
    out += "{\"microseconds\":";
    append_json_double(out, d->microseconds);
    out += '}';
  } else if (const auto* p = std::get_if<Percent>(&value)) {
    out += "{\"percent\":";
    append_json_double(out, p->percent);
    out += '}';
  } else if (const auto* r = std::get_if<Ratio>(&value)) {
    out += "{\"ratio\":";
    append_json_double(out, r->ratio);
    out += '}';
  } else {
    out += "{\"string\":";
    detail::append_json_string(out, std::get<std::string>(value));
    out += '}';
  }
}

void append_metrics(std::string& out, const MetricMap& metrics) {
  out += '{';
  bool first = true;
  for (const auto& [name, value] : metrics) {
    if (!first) out += ',';
    first = false;
    detail::append_json_string(out, name);
    out += ':';
    append_metric(out, value);
  }
  out += '}';
}

// ---------------------------------------------------------------------------------------------
// Reading.

// `path` + ["key"], the key written as a JSON string.
std::string child(const std::string& path, std::string_view key) {
  std::string out = path + "[";
  detail::append_json_string(out, key);
  return out + "]";
}

// "object", "array", "string \"x\"", "number 3.5", ... for messages; long values are cut.
std::string describe(const Json& value) {
  if (value.is_object()) {
    if (value.empty()) return "an empty object";
    std::string keys;
    for (const auto& [key, v] : value.items()) {
      if (!keys.empty()) keys += ", ";
      keys += key;
    }
    return fmt::format("an object with the keys {}", keys);
  }
  if (value.is_array()) return "an array";
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw ValueError(fmt::format("Report.from_json: {}: {}", path, why));
}

double read_double(const Json& value, const std::string& path) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  fail(path, "expected a number (or \"NaN\", \"Infinity\", \"-Infinity\"), got " + describe(value));
}

int64_t read_count(const Json& value, const std::string& path) {
  if (value.is_number_unsigned()) {
    auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(path, "count " + std::to_string(u) + " is out of the int64 range");
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  fail(path, "expected an integer, got " + describe(value));
}

MetricValue read_metric(const Json& value, const std::string& path) {
  const std::string expected =
      fmt::format("expected an object with one of the keys {}", kMetricKeys);
  if (!value.is_object()) fail(path, expected + ", got " + describe(value));
  if (value.size() != 1) {
    fail(path, fmt::format("expected an object with exactly one of the keys {}, got {}",
                           kMetricKeys, describe(value)));
  }
  auto first = value.begin();
  const std::string& key = first.key();
  const Json& inner = first.value();
  const std::string inner_path = child(path, key);
  if (key == "count") return Count{read_count(inner, inner_path)};
  if (key == "microseconds") return Duration{read_double(inner, inner_path)};
  if (key == "percent") return Percent{read_double(inner, inner_path)};
  if (key == "ratio") return Ratio{read_double(inner, inner_path)};
  if (key == "string") {
    if (!inner.is_string()) fail(inner_path, "expected a string, got " + describe(inner));
    return inner.get<std::string>();
  }
  std::string quoted;
  detail::append_json_string(quoted, key);
  fail(path, fmt::format("unknown metric type {}: {}", quoted, expected));
}

MetricMap read_metrics(const Json& value, const std::string& path) {
  if (!value.is_object()) fail(path, "expected an object of metrics, got " + describe(value));
  MetricMap out;
  for (const auto& [name, metric] : value.items()) {
    out.emplace(name, read_metric(metric, child(path, name)));
  }
  return out;
}

// The reference wrote strings without escaping; raw control characters inside them are not
// JSON. Returns `text` with each such character inside a string turned into a \u00XX escape.
std::string escape_raw_control_characters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (static_cast<unsigned char>(c) < 0x20) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        continue;
      }
      if (c == '\\' && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x20) {
        out += c;
        out += text[++i];
        continue;
      }
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    }
    out += c;
  }
  return out;
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string without_id(const Json::exception& e) {
  std::string message = e.what();
  size_t bracket = message.find("] ");
  return bracket == std::string::npos ? message : message.substr(bracket + 2);
}

[[noreturn]] void fail_invalid(const Json::exception& e) {
  throw ValueError(fmt::format("Report.from_json: invalid JSON: {}", without_id(e)));
}

Json parse_document(std::string_view text) {
  auto parse = [](std::string_view t) { return Json::parse(t.begin(), t.end()); };
  try {
    return parse(text);
  } catch (const Json::parse_error& original) {
    std::string repaired = escape_raw_control_characters(text);
    if (repaired == text) fail_invalid(original);
    try {
      return parse(repaired);
    } catch (const Json::parse_error&) {
      fail_invalid(original);  // the error in the text as given
    } catch (const Json::exception& e) {
      fail_invalid(e);
    }
  } catch (const Json::exception& e) {
    // E.g. out_of_range.406 "number overflow parsing '1e400'".
    fail_invalid(e);
  }
}

// ---------------------------------------------------------------------------------------------
// Chrome trace.

// A number for the trace (shortest round-trip form); non-finite values as strings.
void append_trace_number(std::string& out, double value) {
  if (std::isfinite(value)) {
    out += detail::shortest(value);
  } else {
    append_json_double(out, value);
  }
}

void append_trace_arg(std::string& out, const MetricValue& value) {
  if (const auto* c = std::get_if<Count>(&value)) {
    out += std::to_string(c->value);
  } else if (const auto* d = std::get_if<Duration>(&value)) {
    append_trace_number(out, d->microseconds);
  } else if (const auto* p = std::get_if<Percent>(&value)) {
    append_trace_number(out, p->percent);
  } else if (const auto* r = std::get_if<Ratio>(&value)) {
    append_trace_number(out, r->ratio);
  } else {
    detail::append_json_string(out, std::get<std::string>(value));
  }
}

// The finite, non-negative Duration `name` of `row`, if it has one.
std::optional<double> row_duration(const MetricMap& row, std::string_view name) {
  auto it = row.find(std::string(name));
  if (it == row.end()) return std::nullopt;
  const auto* d = std::get_if<Duration>(&it->second);
  if (d == nullptr || !std::isfinite(d->microseconds)) return std::nullopt;
  return d->microseconds;
}

constexpr std::string_view kNoDevice = "(no device)";

}  // namespace

std::string Report::json() const {
  std::string out = "{\"calls\":[";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += ',';
    append_metrics(out, calls[i]);
  }
  out += "],\"device_metrics\":{";
  bool first = true;
  for (const auto& [device, metrics] : device_metrics) {
    if (!first) out += ',';
    first = false;
    detail::append_json_string(out, device);
    out += ':';
    append_metrics(out, metrics);
  }
  out += "},\"configuration\":";
  append_metrics(out, configuration);
  out += '}';
  return out;
}

Report Report::from_json(std::string_view text) {
  Json doc = parse_document(text);
  if (!doc.is_object()) fail("the document", "expected an object, got " + describe(doc));
  Report report;
  if (auto it = doc.find("calls"); it != doc.end()) {
    if (!it->is_array()) fail("calls", "expected an array, got " + describe(*it));
    report.calls.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      report.calls.push_back(read_metrics((*it)[i], fmt::format("calls[{}]", i)));
    }
  }
  if (auto it = doc.find("device_metrics"); it != doc.end()) {
    if (!it->is_object()) fail("device_metrics", "expected an object, got " + describe(*it));
    for (const auto& [device, metrics] : it->items()) {
      report.device_metrics.emplace(device, read_metrics(metrics, child("device_metrics", device)));
    }
  }
  if (auto it = doc.find("configuration"); it != doc.end()) {
    report.configuration = read_metrics(*it, "configuration");
  }
  return report;
}

std::string Report::chrome_trace() const {
  // Tracks: the devices of device_metrics (map order), then those only calls name, in order of
  // first appearance; tids from 1.
  std::vector<std::string> tracks;
  std::map<std::string, int> tids;
  auto track_of = [&](const std::string& name) {
    auto [it, inserted] = tids.try_emplace(name, static_cast<int>(tracks.size()) + 1);
    if (inserted) tracks.push_back(name);
    return it->second;
  };
  for (const auto& [device, metrics] : device_metrics) track_of(device);
  std::vector<int> call_tids;
  call_tids.reserve(calls.size());
  for (const MetricMap& call : calls) {
    auto it = call.find(std::string(kDeviceMetric));
    call_tids.push_back(
        track_of(it == call.end() ? std::string(kNoDevice) : detail::text_of(it->second)));
  }

  std::string out = "{\"traceEvents\":[\n";
  out += R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"Kiln profile"}})";
  for (size_t i = 0; i < tracks.size(); ++i) {
    int tid = static_cast<int>(i) + 1;
    out += fmt::format(",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},", tid);
    out += "\"args\":{\"name\":";
    detail::append_json_string(out, tracks[i]);
    out += "}}";
    out += fmt::format(
        ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":{},"
        "\"args\":{{\"sort_index\":{}}}}}",
        tid, tid);
  }
  double cursor = 0;  // where the next call without "Start (us)" begins
  for (size_t i = 0; i < calls.size(); ++i) {
    const MetricMap& call = calls[i];
    double ts = row_duration(call, kStartMetric).value_or(cursor);
    double dur = std::max(0.0, row_duration(call, kDurationMetric).value_or(0.0));
    cursor = ts + dur;
    auto name = call.find(std::string(kNameMetric));
    out += ",\n{\"name\":";
    detail::append_json_string(out, name == call.end() ? "" : detail::text_of(name->second));
    out += ",\"cat\":\"kiln\",\"ph\":\"X\",\"ts\":";
    append_trace_number(out, ts);
    out += ",\"dur\":";
    append_trace_number(out, dur);
    out += fmt::format(",\"pid\":1,\"tid\":{},\"args\":{{", call_tids[i]);
    bool first = true;
    for (const auto& [metric, value] : call) {
      if (metric == kNameMetric || metric == kDurationMetric || metric == kStartMetric) continue;
      if (!first) out += ',';
      first = false;
      detail::append_json_string(out, metric);
      out += ':';
      append_trace_arg(out, value);
    }
    out += "}}";
  }
  out += "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{";
  bool first = true;
  for (const auto& [key, value] : configuration) {
    if (!first) out += ',';
    first = false;
    detail::append_json_string(out, key);
    out += ':';
    append_trace_arg(out, value);
  }
  out += "}}\n";
  return out;
}

}  // namespace kiln::profiling
