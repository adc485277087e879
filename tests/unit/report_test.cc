// SPDX-License-Identifier: Apache-2.0
// Tests of kiln::profiling::Report: the JSON, CSV and table formats of SPEC.md §3.3-§3.5, the
// report items of the §3.10 checklist, and the Chrome trace export.
#include "kiln/profiling/report.h"

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/error.h"

namespace kiln::profiling {
namespace {

using nlohmann::json;

// Whether `text` contains `part`; on failure says both.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// One call row as the profiler writes it (§3.2).
MetricMap Call(const std::string& name, double us, const std::string& device,
               const std::string& shapes, double percent) {
  return {{"Name", name},     {"Duration (us)", Duration{us}}, {"Count", Count{1}},
          {"Device", device}, {"Argument Shapes", shapes},     {"Percent", Percent{percent}}};
}

// A device's Total row.
MetricMap Total(const std::string& device, double us) {
  return {{"Name", std::string("Total")},
          {"Duration (us)", Duration{us}},
          {"Count", Count{1}},
          {"Device", device}};
}

// A report like the VM profiler's: calls on cpu0 and cuda0, Percent = duration / longest total.
Report VmReport() {
  Report r;
  r.device_metrics["cpu0"] = Total("cpu0", 400);
  r.device_metrics["cuda0"] = Total("cuda0", 800);
  r.calls = {Call("fused_dense", 200, "cuda0", "float32[1, 64], float32[64, 64]", 25),
             Call("vm.builtin.check_tensor_info", 1.5, "cpu0", "float32[1, 64]", 0.1875),
             Call("fused_dense", 100, "cuda0", "float32[1, 64], float32[64, 64]", 12.5),
             Call("vm.builtin.make_tuple", 0.25, "cpu0", "", 0.03125)};
  r.calls[0]["Hash"] = std::string("9f86d081");
  r.calls[2]["Hash"] = std::string("9f86d081");
  r.configuration = {{"Executor", std::string("VM")}, {"Number of threads", Count{8}}};
  return r;
}

// Splits one CSV line into its fields, undoing RFC 4180 quoting.
std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

void ExpectSameReport(const Report& a, const Report& b) {
  EXPECT_EQ(a.calls, b.calls);
  EXPECT_EQ(a.device_metrics, b.device_metrics);
  EXPECT_EQ(a.configuration, b.configuration);
}

// ---------------------------------------------------------------------------------------------
// §3.10 checklist items 1-7.

// 1. json() parses; has the three keys; every call has Name.string, Count.count (int) and
// "Duration (us)".microseconds (float).
TEST(ReportChecklist, JsonHasKeysAndTypedCallMetrics) {
  json doc = json::parse(VmReport().json());
  ASSERT_TRUE(doc.is_object());
  EXPECT_TRUE(doc.contains("calls"));
  EXPECT_TRUE(doc.contains("device_metrics"));
  EXPECT_TRUE(doc.contains("configuration"));
  ASSERT_EQ(doc["calls"].size(), 4u);
  for (const json& call : doc["calls"]) {
    EXPECT_TRUE(call["Name"]["string"].is_string());
    EXPECT_TRUE(call["Count"]["count"].is_number_integer());
    EXPECT_TRUE(call["Duration (us)"]["microseconds"].is_number_float());
  }
  EXPECT_EQ(doc["device_metrics"]["cuda0"]["Duration (us)"]["microseconds"].get<double>(), 800);
  EXPECT_EQ(doc["configuration"]["Executor"]["string"], "VM");
}

// 2. from_json(json()) preserves the unaggregated table exactly (and everything else).
TEST(ReportChecklist, FromJsonPreservesUnaggregatedTable) {
  Report r = VmReport();
  Report back = Report::from_json(r.json());
  EXPECT_EQ(back.table(true, false, false), r.table(true, false, false));
  EXPECT_EQ(back.table(false, false, false), r.table(false, false, false));
  EXPECT_EQ(back.table(), r.table());
  ExpectSameReport(back, r);
}

// 3. csv() has every call metric (Hash included) in its header; durations are >= 0.
TEST(ReportChecklist, CsvHeaderHasEveryCallMetric) {
  std::string csv = VmReport().csv();
  std::istringstream lines(csv);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header, "Argument Shapes,Count,Device,Duration (us),Hash,Name,Percent");
  for (const MetricMap& call : VmReport().calls) {
    for (const auto& [name, value] : call) EXPECT_TRUE(Contains(header, name));
  }
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields = SplitCsvLine(line);
    ASSERT_EQ(fields.size(), 7u) << line;
    EXPECT_GE(std::stod(fields[3]), 0) << line;  // Duration (us)
    ++rows;
  }
  EXPECT_EQ(rows, 4);
}

// 4. The table has Total rows and the Configuration section; configuration["Executor"] is "VM".
TEST(ReportChecklist, TableHasTotalsAndConfiguration) {
  Report r = VmReport();
  std::string table = r.table();
  EXPECT_TRUE(Contains(table, "\nTotal "));
  EXPECT_TRUE(Contains(table, "\nSum "));
  EXPECT_TRUE(Contains(table, "Duration (us)"));
  EXPECT_TRUE(Contains(table, "fused_dense"));
  EXPECT_TRUE(
      Contains(table, "\n\nConfiguration\n-------------\nExecutor: VM\nNumber of threads: 8\n"));
  EXPECT_EQ(std::get<std::string>(r.configuration.at("Executor")), "VM");
  EXPECT_EQ(r.str(), table);
  // Two Total rows: one per device.
  size_t totals = 0;
  for (size_t at = table.find("\nTotal "); at != std::string::npos;
       at = table.find("\nTotal ", at + 1)) {
    ++totals;
  }
  EXPECT_EQ(totals, 2u);
}

// 5. Aggregation sums Count, Duration and Percent, averages Ratio, blanks differing strings and
// keeps equal ones; groups by (Hash else Name) + Argument Shapes + Device.
TEST(ReportChecklist, AggregatesEveryMetricType) {
  Report r;
  r.calls = {Call("add", 10, "cpu0", "f32[2]", 1), Call("mul", 5, "cpu0", "f32[2]", 0.5),
             Call("add", 30, "cpu0", "f32[2]", 3), Call("add", 7, "cuda0", "f32[2]", 0.7),
             Call("x", 2, "cpu0", "", 0.2),        Call("y", 3, "cpu0", "", 0.3),
             Call("add", 1, "cpu0", "f32[4]", 0.1)};
  r.calls[0]["Occ"] = Ratio{0.5};
  r.calls[2]["Occ"] = Ratio{1.0};
  r.calls[0]["Tag"] = std::string("same");
  r.calls[2]["Tag"] = std::string("same");
  r.calls[4]["Tag"] = std::string("p");
  r.calls[5]["Tag"] = std::string("q");
  // Different names, same hash, no shapes: one group, Name and Tag blanked.
  r.calls[4].erase("Argument Shapes");
  r.calls[5].erase("Argument Shapes");
  r.calls[4]["Hash"] = std::string("H");
  r.calls[5]["Hash"] = std::string("H");

  // Groups in order of first appearance.
  const std::string unsorted =
      "Name  Duration (us)  Percent  Device  Count  Argument Shapes  Hash   Occ   Tag  \n"
      "add           40.00     4.00    cpu0      2           f32[2]        0.75  same  \n"
      "mul            5.00     0.50    cpu0      1           f32[2]                    \n"
      "add            7.00     0.70   cuda0      1           f32[2]                    \n"
      "               5.00     0.50    cpu0      2                      H              \n"
      "add            1.00     0.10    cpu0      1           f32[4]                    \n"
      "\n"
      "Configuration\n"
      "-------------\n";
  EXPECT_EQ(r.table(false, true, false), unsorted);
  // Sorted (stably: "mul" and the H group tie at 5 us and keep their order) with sums; the
  // Ratio column is not summed.
  const std::string sorted =
      "Name        Duration (us)  Percent  Device  Count  Argument Shapes  Hash   Occ   Tag  \n"
      "add                 40.00     4.00    cpu0      2           f32[2]        0.75  same  \n"
      "add                  7.00     0.70   cuda0      1           f32[2]                    \n"
      "mul                  5.00     0.50    cpu0      1           f32[2]                    \n"
      "                     5.00     0.50    cpu0      2                      H              \n"
      "add                  1.00     0.10    cpu0      1           f32[4]                    \n"
      "----------                                                                            \n"
      "Sum                 58.00     5.80              7                                     \n"
      "\n"
      "Configuration\n"
      "-------------\n";
  EXPECT_EQ(r.table(), sorted);
}

// 6. Columns: Name, Duration (us), Percent, Device, Count, Argument Shapes, then the others in
// byte order ("FLOPs" < "Hash" < "Hits"). Also the number formats of §3.5 and the Sum/Total rows.
TEST(ReportChecklist, ColumnOrderAndFormatting) {
  Report r;
  r.calls = {Call("matmul", 1234.5, "cpu0", "float32[16, 16]", 61.75),
             Call("relu", 10.25, "cpu0", "float32[16]", 0.5)};
  r.calls[0]["Hash"] = std::string("abc");
  r.calls[1]["Hash"] = std::string("def");
  r.calls[0]["Hits"] = Ratio{0.5};
  r.calls[1]["Hits"] = Ratio{0.75};
  r.calls[1]["FLOPs"] = Count{12345};
  r.device_metrics["cpu0"] = Total("cpu0", 2000);
  r.configuration = {{"Executor", std::string("VM")}, {"Number of threads", Count{8}}};
  const std::string expected =
      "Name        Duration (us)  Percent  Device  Count  Argument Shapes   FLOPs  Hash  Hits  \n"
      "matmul           1,234.50    61.75    cpu0      1  float32[16, 16]           abc   0.5  \n"
      "relu                10.25     0.50    cpu0      1      float32[16]  12,345   def  0.75  \n"
      "----------                                                                              \n"
      "Sum              1,244.75    62.25              2                   12,345              \n"
      "Total            2,000.00             cpu0      1                                       \n"
      "\n"
      "Configuration\n"
      "-------------\n"
      "Executor: VM\n"
      "Number of threads: 8\n";
  EXPECT_EQ(r.table(), expected);
  // Each call is its own group here, so aggregation changes nothing.
  EXPECT_EQ(r.table(true, false, true), expected);
}

// 7. The report keeps the profiler's Percent (duration / longest device total × 100) as given;
// Total rows have no Percent.
TEST(ReportChecklist, PercentIsOfTheLongestDeviceTotal) {
  Report r = VmReport();
  double longest = 0;
  for (const auto& [device, row] : r.device_metrics) {
    longest = std::max(longest, std::get<Duration>(row.at("Duration (us)")).microseconds);
  }
  Report back = Report::from_json(r.json());
  for (const MetricMap& call : back.calls) {
    EXPECT_DOUBLE_EQ(std::get<Percent>(call.at("Percent")).percent,
                     std::get<Duration>(call.at("Duration (us)")).microseconds / longest * 100);
  }
  Report small;
  small.device_metrics["cpu0"] = Total("cpu0", 400);
  small.device_metrics["cuda0"] = Total("cuda0", 800);
  small.calls = {Call("k", 200, "cuda0", "", 25), Call("h", 40, "cpu0", "", 5)};
  small.calls[0].erase("Argument Shapes");
  small.calls[1].erase("Argument Shapes");
  EXPECT_EQ(small.table(true, false, false),
            "Name   Duration (us)  Percent  Device  Count  Argument Shapes  \n"
            "k             200.00    25.00   cuda0      1                   \n"
            "h              40.00     5.00    cpu0      1                   \n"
            "Total         400.00             cpu0      1                   \n"
            "Total         800.00            cuda0      1                   \n"
            "\n"
            "Configuration\n"
            "-------------\n");
}

// ---------------------------------------------------------------------------------------------
// format_metric and device names.

TEST(ReportFormat, FormatMetric) {
  EXPECT_EQ(format_metric(Count{0}), "0");
  EXPECT_EQ(format_metric(Count{999}), "999");
  EXPECT_EQ(format_metric(Count{1000}), "1,000");
  EXPECT_EQ(format_metric(Count{1234567}), "1,234,567");
  EXPECT_EQ(format_metric(Count{-1234}), "-1,234");
  EXPECT_EQ(format_metric(Count{std::numeric_limits<int64_t>::min()}),
            "-9,223,372,036,854,775,808");
  EXPECT_EQ(format_metric(Duration{705779}), "705,779.00");
  EXPECT_EQ(format_metric(Duration{0}), "0.00");
  EXPECT_EQ(format_metric(Duration{1234.567}), "1,234.57");
  EXPECT_EQ(format_metric(Duration{999.999}), "1,000.00");
  EXPECT_EQ(format_metric(Duration{-1234.5}), "-1,234.50");
  EXPECT_EQ(format_metric(Duration{123.4}), "123.40");
  EXPECT_EQ(format_metric(Percent{51.2234}), "51.22");
  EXPECT_EQ(format_metric(Percent{1234.5}), "1234.50");
  EXPECT_EQ(format_metric(Percent{100}), "100.00");
  EXPECT_EQ(format_metric(Ratio{0.5}), "0.5");
  EXPECT_EQ(format_metric(Ratio{1}), "1");
  EXPECT_EQ(format_metric(Ratio{1234}), "1.2e+03");
  EXPECT_EQ(format_metric(Ratio{0.333}), "0.33");
  EXPECT_EQ(format_metric(Ratio{0.000123}), "0.00012");
  EXPECT_EQ(format_metric(Ratio{1e-5}), "1e-05");
  EXPECT_EQ(format_metric(Ratio{12}), "12");
  EXPECT_EQ(format_metric(Ratio{123}), "1.2e+02");
  EXPECT_EQ(format_metric(std::string("float32[1, 64]")), "float32[1, 64]");
  EXPECT_EQ(format_metric(std::string()), "");
  EXPECT_EQ(format_metric(Duration{std::nan("")}), "nan");
  EXPECT_EQ(format_metric(Percent{std::numeric_limits<double>::infinity()}), "inf");
  EXPECT_EQ(format_metric(Ratio{-std::numeric_limits<double>::infinity()}), "-inf");
}

TEST(ReportFormat, FormatMetricIgnoresTheGlobalLocale) {
  // The reference used std::locale(""); Kiln always groups with ',' and uses '.'.
  std::locale old = std::locale::global(std::locale::classic());
  EXPECT_EQ(format_metric(Count{1234}), "1,234");
  EXPECT_EQ(format_metric(Duration{1234.5}), "1,234.50");
  std::locale::global(old);
}

TEST(ReportFormat, DeviceReportName) {
  EXPECT_EQ(device_report_name(Device::cpu()), "cpu0");
  EXPECT_EQ(device_report_name(Device{kDLCUDA, 0}), "cuda0");
  EXPECT_EQ(device_report_name(Device{kDLOpenCL, 1}), "opencl1");
  EXPECT_EQ(device_report_name(Device{kDLVulkan, 1}), "vulkan1");
  EXPECT_EQ(device_report_name(Device{kDLROCM, 2}), "rocm2");
  EXPECT_EQ(device_report_name(Device{kDLCUDAHost, 0}), "cuda_host0");
  EXPECT_EQ(device_report_name(Device{1000, 3}), "dev10003");
}

// ---------------------------------------------------------------------------------------------
// JSON.

TEST(ReportJson, ExactText) {
  Report r;
  r.calls = {{{"Name", std::string("a")},
              {"Duration (us)", Duration{12.3}},
              {"Count", Count{3}},
              {"Percent", Percent{100}},
              {"Occupancy", Ratio{0.5}}}};
  r.device_metrics["cpu0"] = {{"Duration (us)", Duration{1000}}, {"Count", Count{-1}}};
  r.configuration = {{"Executor", std::string("VM")}};
  EXPECT_EQ(r.json(),
            "{\"calls\":[{\"Count\":{\"count\":3},\"Duration (us)\":{\"microseconds\":"
            "12.30000000000000071},\"Name\":{\"string\":\"a\"},\"Occupancy\":{\"ratio\":"
            "0.50000000000000000},\"Percent\":{\"percent\":100.00000000000000000}}],"
            "\"device_metrics\":{\"cpu0\":{\"Count\":{\"count\":-1},\"Duration (us)\":{"
            "\"microseconds\":1000.00000000000000000}}},\"configuration\":{\"Executor\":{"
            "\"string\":\"VM\"}}}");
  EXPECT_EQ(Report().json(), R"j({"calls":[],"device_metrics":{},"configuration":{}})j");
}

// A document in the reference's exact format (compact, 17-digit doubles, every metric kind),
// written by hand. Its keys are in byte order, so json() must give it back byte for byte.
constexpr const char* kOriginalJson =
    R"j({"calls":[{"Argument Shapes":{"string":"float32[1, 64], float32[64, 64]"},)j"
    R"j("Count":{"count":1},"Device":{"string":"cpu0"},)j"
    R"j("Duration (us)":{"microseconds":12.30000000000000071},"Hash":{"string":"9f86d081"},)j"
    R"j("Name":{"string":"fused_dense"},"Occupancy":{"ratio":0.75000000000000000},)j"
    R"j("Percent":{"percent":1.22999999999999998},"perf::CYCLES":{"count":123456789012}},)j"
    R"j({"Count":{"count":1},"Device":{"string":"cpu0"},)j"
    R"j("Duration (us)":{"microseconds":0.10000000000000001},)j"
    R"j("Name":{"string":"vm.builtin.check_tensor_info"},)j"
    R"j("Percent":{"percent":0.01000000000000000}}],)j"
    R"j("device_metrics":{"cpu0":{"Count":{"count":1},"Device":{"string":"cpu0"},)j"
    R"j("Duration (us)":{"microseconds":1000.00000000000000000},"Name":{"string":"Total"}}},)j"
    R"j("configuration":{"Executor":{"string":"VM"},"Number of threads":{"count":8}}})j";

Report OriginalReport() {
  Report r;
  r.calls = {{{"Argument Shapes", std::string("float32[1, 64], float32[64, 64]")},
              {"Count", Count{1}},
              {"Device", std::string("cpu0")},
              {"Duration (us)", Duration{12.3}},
              {"Hash", std::string("9f86d081")},
              {"Name", std::string("fused_dense")},
              {"Occupancy", Ratio{0.75}},
              {"Percent", Percent{1.23}},
              {"perf::CYCLES", Count{123456789012}}},
             {{"Count", Count{1}},
              {"Device", std::string("cpu0")},
              {"Duration (us)", Duration{0.1}},
              {"Name", std::string("vm.builtin.check_tensor_info")},
              {"Percent", Percent{0.01}}}};
  r.device_metrics["cpu0"] = Total("cpu0", 1000);
  r.configuration = {{"Executor", std::string("VM")}, {"Number of threads", Count{8}}};
  return r;
}

TEST(ReportJson, ReadsTheOriginalFormat) {
  Report r = Report::from_json(kOriginalJson);
  ExpectSameReport(r, OriginalReport());
  EXPECT_EQ(r.json(), kOriginalJson);
  EXPECT_EQ(OriginalReport().json(), kOriginalJson);
}

TEST(ReportJson, KeyOrderWhitespaceAndUnknownKeysDoNotMatter) {
  // The original wrote keys in hash-map order; a tool may pretty-print or add keys.
  const char* text = R"j({
    "version": 2,
    "configuration": {"Number of threads": {"count": 8}, "Executor": {"string": "VM"}},
    "device_metrics": {"cpu0": {"Name": {"string": "Total"}, "Device": {"string": "cpu0"},
                                "Duration (us)": {"microseconds": 1000}, "Count": {"count": 1}}},
    "calls": [
      {"perf::CYCLES": {"count": 123456789012}, "Percent": {"percent": 1.23},
       "Occupancy": {"ratio": 0.75}, "Name": {"string": "fused_dense"},
       "Hash": {"string": "9f86d081"}, "Duration (us)": {"microseconds": 12.3},
       "Device": {"string": "cpu0"}, "Count": {"count": 1},
       "Argument Shapes": {"string": "float32[1, 64], float32[64, 64]"}},
      {"Percent": {"percent": 1e-2}, "Name": {"string": "vm.builtin.check_tensor_info"},
       "Duration (us)": {"microseconds": 0.1}, "Device": {"string": "cpu0"},
       "Count": {"count": 1}}
    ]
  })j";
  ExpectSameReport(Report::from_json(text), OriginalReport());
  // Missing top-level keys give empty members.
  Report empty = Report::from_json("{}");
  EXPECT_TRUE(empty.calls.empty());
  EXPECT_TRUE(empty.device_metrics.empty());
  EXPECT_TRUE(empty.configuration.empty());
  EXPECT_EQ(Report::from_json(R"j({"calls":[{}]})j").calls, std::vector<MetricMap>{MetricMap{}});
}

TEST(ReportJson, RoundTripsHardStrings) {
  const std::vector<std::string> names = {
      "say \"hi\"",
      "back\\slash\\",
      std::string("ctl\x01\x02\t\n\r\b\f\x1f\x7f end"),
      std::string("nul\0inside", 10),
      "µs — 日本語 😀",
      "/slash/ and </script>",
      "",
  };
  Report r;
  for (const std::string& name : names) {
    r.calls.push_back(
        {{"Name", name}, {name + " metric", Count{1}}, {"Duration (us)", Duration{1}}});
    r.device_metrics[name] = {{"Device", name}};
    r.configuration[name] = name;
  }
  std::string text = r.json();
  // Standard JSON, and the strings decode to the same bytes.
  json doc = json::parse(text);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(doc["calls"][i]["Name"]["string"].get<std::string>(), names[i]);
  }
  EXPECT_TRUE(Contains(text, R"j("say \"hi\"")j"));
  EXPECT_TRUE(Contains(text, R"j("back\\slash\\")j"));
  EXPECT_TRUE(Contains(text, R"j("ctl\u0001\u0002\t\n\r\b\f\u001f)j"));
  EXPECT_TRUE(Contains(text, R"j("nul\u0000inside")j"));
  EXPECT_TRUE(Contains(text, "\"µs — 日本語 😀\""));  // UTF-8 is written verbatim
  ExpectSameReport(Report::from_json(text), r);
}

TEST(ReportJson, InvalidUtf8IsReplaced) {
  Report r;
  r.configuration["k"] = std::string(
      "a\xff"
      "b\xc3");
  std::string text = r.json();
  EXPECT_TRUE(Contains(text,
                       "\"a\xEF\xBF\xBD"
                       "b\xEF\xBF\xBD\""));
  EXPECT_EQ(std::get<std::string>(Report::from_json(text).configuration.at("k")),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(ReportJson, NonFiniteDoublesStayValidJson) {
  Report r;
  r.configuration = {{"a", Duration{std::nan("")}},
                     {"b", Percent{std::numeric_limits<double>::infinity()}},
                     {"c", Ratio{-std::numeric_limits<double>::infinity()}}};
  std::string text = r.json();
  EXPECT_EQ(text,
            R"j({"calls":[],"device_metrics":{},"configuration":{"a":{"microseconds":"NaN"},)j"
            R"j("b":{"percent":"Infinity"},"c":{"ratio":"-Infinity"}}})j");
  EXPECT_TRUE(json::parse(text).is_object());  // valid JSON (nodiscard: clang -Wunused-result)
  Report back = Report::from_json(text);
  EXPECT_TRUE(std::isnan(std::get<Duration>(back.configuration.at("a")).microseconds));
  EXPECT_EQ(std::get<Percent>(back.configuration.at("b")).percent,
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<Ratio>(back.configuration.at("c")).ratio,
            -std::numeric_limits<double>::infinity());
}

TEST(ReportJson, AcceptsTheOriginalsRawControlCharacters) {
  // The original did not escape strings: a newline or tab in a name went out raw.
  Report r = Report::from_json(
      "{\"calls\":[{\"Name\":{\"string\":\"line1\nline2\ttab\"}}],\"configuration\":{\"a\\\"b\":"
      "{\"string\":\"x\"}}}");
  EXPECT_EQ(std::get<std::string>(r.calls.at(0).at("Name")), "line1\nline2\ttab");
  EXPECT_EQ(std::get<std::string>(r.configuration.at("a\"b")), "x");
  // Integers are accepted for doubles.
  r = Report::from_json(R"j({"configuration":{"d":{"microseconds":12},"p":{"percent":-3}}})j");
  EXPECT_EQ(std::get<Duration>(r.configuration.at("d")).microseconds, 12);
  EXPECT_EQ(std::get<Percent>(r.configuration.at("p")).percent, -3);
}

// from_json on malformed input: a ValueError naming the JSON path and the reason.
TEST(ReportJson, MalformedInputSaysWhereAndWhy) {
  const std::string keys = "count, microseconds, percent, ratio, string";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "the document: expected an object, got an array"},
      {"\"x\"", "the document: expected an object, got string \"x\""},
      {R"j({"calls":{}})j", "calls: expected an array, got an empty object"},
      {R"j({"calls":null})j", "calls: expected an array, got null"},
      {R"j({"calls":[1]})j", "calls[0]: expected an object of metrics, got number 1"},
      {R"j({"calls":[{"Name":{"string":"a"}},{"Name":{"string":"b"}},{"Name":{"string":"c"}},)j"
       R"j({"Duration (us)":12.5}]})j",
       "calls[3][\"Duration (us)\"]: expected an object with one of the keys " + keys +
           ", got number 12.5"},
      {R"j({"calls":[{"X":{}}]})j",
       "calls[0][\"X\"]: expected an object with exactly one of the keys " + keys +
           ", got an empty object"},
      {R"j({"calls":[{"X":{"ratio":2,"count":1}}]})j",
       "calls[0][\"X\"]: expected an object with exactly one of the keys " + keys +
           ", got an object with the keys count, ratio"},
      {R"j({"calls":[{"X":{"seconds":1}}]})j",
       "calls[0][\"X\"]: unknown metric type \"seconds\": expected an object with one of the "
       "keys " +
           keys},
      {R"j({"calls":[{"Count":{"count":"3"}}]})j",
       "calls[0][\"Count\"][\"count\"]: expected an integer, got string \"3\""},
      {R"j({"calls":[{"Count":{"count":1.5}}]})j",
       "calls[0][\"Count\"][\"count\"]: expected an integer, got number 1.5"},
      {R"j({"calls":[{"Count":{"count":9223372036854775808}}]})j",
       "calls[0][\"Count\"][\"count\"]: count 9223372036854775808 is out of the int64 range"},
      {R"j({"calls":[{"a\"b":{"string":true}}]})j",
       "calls[0][\"a\\\"b\"][\"string\"]: expected a string, got boolean true"},
      {R"j({"device_metrics":[]})j", "device_metrics: expected an object, got an array"},
      {R"j({"device_metrics":{"cpu0":7}})j",
       "device_metrics[\"cpu0\"]: expected an object of metrics, got number 7"},
      {R"j({"device_metrics":{"cpu0":{"Duration (us)":{"microseconds":"fast"}}}})j",
       "device_metrics[\"cpu0\"][\"Duration (us)\"][\"microseconds\"]: expected a number (or "
       "\"NaN\", \"Infinity\", \"-Infinity\"), got string \"fast\""},
      {R"j({"configuration":[]})j", "configuration: expected an object of metrics, got an array"},
      {R"j({"configuration":{"Executor":{"string":5}}})j",
       "configuration[\"Executor\"][\"string\"]: expected a string, got number 5"},
      {R"j({"configuration":{"r":{"ratio":null}}})j",
       "configuration[\"r\"][\"ratio\"]: expected a number (or \"NaN\", \"Infinity\", "
       "\"-Infinity\"), got null"},
  };
  for (const auto& [text, message] : cases) {
    try {
      Report::from_json(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()), "Report.from_json: " + message) << text;
    }
  }
}

TEST(ReportJson, InvalidJsonSaysWhere) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "Report.from_json: invalid JSON: parse error at line 1, column 1: "},
      {R"j({"calls":[)j", "Report.from_json: invalid JSON: parse error at line 1, column 11: "},
      {"{\"calls\":[]}\n{}", "Report.from_json: invalid JSON: parse error at line 2, column 1: "},
      {R"j({"calls":[{"Name":{"string":"a"b"}}]})j",
       "Report.from_json: invalid JSON: parse error at line 1, column 32: "},
      {"{\"a\":\"\xff\"}", "Report.from_json: invalid JSON: parse error at line 1, column 7: "},
      {R"j({"calls":[{"d":{"microseconds":1e400}}]})j",
       "Report.from_json: invalid JSON: number overflow parsing '1e400'"},
      {"{\"calls\":[{\"Name\":{\"string\":\"raw\nnewline\"},\"d\":{\"microseconds\":1e400}}]}",
       "Report.from_json: invalid JSON: number overflow parsing '1e400'"},
  };
  for (const auto& [text, prefix] : cases) {
    try {
      Report::from_json(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// CSV.

TEST(ReportCsv, HeaderOrderNumbersAndQuoting) {
  Report r;
  r.calls = {{{"Name", std::string("a,b")},
              {"Duration (us)", Duration{1234567.0}},
              {"Count", Count{1}},
              {"Percent", Percent{12.5}},
              {"R", Ratio{1.0 / 3}},
              {"Hash", std::string("h")}},
             {{"Name", std::string("say \"hi\"")},
              {"Duration (us)", Duration{0.5}},
              {"Count", Count{-2}},
              {"Percent", Percent{3}}}};
  r.device_metrics["cpu0"] = Total("cpu0", 1);      // not in the CSV
  r.configuration["Executor"] = std::string("VM");  // not in the CSV
  EXPECT_EQ(r.csv(),
            "Count,Duration (us),Hash,Name,Percent,R\n"
            "1,1.23457e+06,\"h\",\"a,b\",12.5,0.333333\n"
            "-2,0.5,,\"say \"\"hi\"\"\",3,\n");
}

TEST(ReportCsv, HeaderIsByteOrderedAndQuotedOnlyWhenNeeded) {
  Report r;
  r.calls = {{{"b", Count{1}}, {"B", Count{2}}, {"a,z", Count{3}}, {"\xc3\xa9", Count{4}}},
             {{"_", Ratio{0.000012345678}}}};
  EXPECT_EQ(r.csv(),
            "B,_,\"a,z\",b,\xc3\xa9\n"
            "2,,3,1,4\n"
            ",1.23457e-05,,,\n");
}

TEST(ReportCsv, EmptyReport) { EXPECT_EQ(Report().csv(), "\n"); }

// ---------------------------------------------------------------------------------------------
// Table details.

// Issue 29: a collector's 150 % or negative duration was printed as a measurement.
TEST(ReportTable, ValuesImpossibleForTheirKindAreMarked) {
  Report r;
  r.calls = {Call("ok", 100, "cpu0", "float32[4]", 40), Call("hot", 200, "cpu0", "float32[4]", 60)};
  r.calls[1]["Occupancy (%)"] = Percent{150};
  r.calls[0]["Stall (us)"] = Duration{-3};
  r.calls[0]["Misses"] = Count{-1};
  r.device_metrics["cpu0"] = Total("cpu0", 300);
  const std::string table = r.table();
  EXPECT_TRUE(Contains(table, "150.00 (!)"));
  EXPECT_TRUE(Contains(table, "-3.00 (!)"));
  EXPECT_TRUE(Contains(table, "-1 (!)"));
  EXPECT_TRUE(Contains(table,
                       "(!) impossible for its kind (a percentage outside 0-100, a "
                       "negative duration or count)"));
  // The percentages of the calls sum to 100: that sum is not marked, nor are sound values.
  EXPECT_FALSE(Contains(table, "100.00 (!)"));
  EXPECT_FALSE(Contains(table, "40.00 (!)"));
  Report sound;
  sound.calls = {Call("ok", 100, "cpu0", "float32[4]", 100)};
  EXPECT_EQ(sound.table().find("(!)"), std::string::npos);
  // The profiler's own columns are not judged: two merged profiles give Percent 200.
  Report merged;
  merged.calls = {Call("a", 100, "cpu0", "float32[4]", 100),
                  Call("a", 100, "cpu0", "float32[4]", 100)};
  EXPECT_EQ(merged.table().find("(!)"), std::string::npos);
}

TEST(ReportTable, EmptyReport) {
  EXPECT_EQ(Report().table(),
            "Name        Duration (us)  Percent  Device  Count  Argument Shapes  \n"
            "----------                                                          \n"
            "Sum                                                                 \n"
            "\n"
            "Configuration\n"
            "-------------\n");
  EXPECT_EQ(Report().table(true, true, false),
            "Name  Duration (us)  Percent  Device  Count  Argument Shapes  \n"
            "\n"
            "Configuration\n"
            "-------------\n");
}

TEST(ReportTable, StableSortRowsWithoutDurationLast) {
  Report r;
  r.calls = {{{"Name", std::string("no_duration")}},
             {{"Name", std::string("first")}, {"Duration (us)", Duration{5}}},
             {{"Name", std::string("nan")}, {"Duration (us)", Duration{std::nan("")}}},
             {{"Name", std::string("second")}, {"Duration (us)", Duration{5}}},
             {{"Name", std::string("big")}, {"Duration (us)", Duration{6}}}};
  EXPECT_EQ(r.table(true, false, false),
            "Name         Duration (us)  Percent  Device  Count  Argument Shapes  \n"
            "big                   6.00                                           \n"
            "first                 5.00                                           \n"
            "second                5.00                                           \n"
            "no_duration                                                          \n"
            "nan                    nan                                           \n"
            "\n"
            "Configuration\n"
            "-------------\n");
}

TEST(ReportTable, MixedTypesInOneMetricAreAValueError) {
  Report r;
  r.calls = {{{"Name", std::string("k")}, {"X", Count{1}}, {"Duration (us)", Duration{1}}},
             {{"Name", std::string("k")}, {"X", Duration{1}}, {"Duration (us)", Duration{1}}}};
  try {
    r.table();
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Report.table: cannot aggregate metric \"X\" of the calls grouped as \"k\": it holds "
              "both a Count and a Duration");
  }
  try {
    r.table(true, false, true);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Report.table: cannot sum column \"X\": it holds both a Count and a Duration");
  }
  EXPECT_NO_THROW(r.table(true, false, false));
}

TEST(ReportTable, StartOffsetIsShownOnlyUnaggregatedAndNeverSummed) {
  Report r;
  r.calls = {{{"Name", std::string("a")},
              {"Start (us)", Duration{0}},
              {"Duration (us)", Duration{10}},
              {"Count", Count{1}},
              {"Device", std::string("cpu0")}},
             {{"Name", std::string("b")},
              {"Start (us)", Duration{12.5}},
              {"Duration (us)", Duration{20}},
              {"Count", Count{1}},
              {"Device", std::string("cpu0")}}};
  EXPECT_EQ(r.table(true, false, true),
            "Name        Duration (us)  Percent  Device  Count  Argument Shapes  Start (us)  \n"
            "b                   20.00             cpu0      1                        12.50  \n"
            "a                   10.00             cpu0      1                         0.00  \n"
            "----------                                                                      \n"
            "Sum                 30.00                       2                               \n"
            "\n"
            "Configuration\n"
            "-------------\n");
  EXPECT_EQ(r.table(),
            "Name        Duration (us)  Percent  Device  Count  Argument Shapes  \n"
            "b                   20.00             cpu0      1                   \n"
            "a                   10.00             cpu0      1                   \n"
            "----------                                                          \n"
            "Sum                 30.00                       2                   \n"
            "\n"
            "Configuration\n"
            "-------------\n");
  // An ordinary Duration in CSV and JSON.
  EXPECT_EQ(r.csv(),
            "Count,Device,Duration (us),Name,Start (us)\n"
            "1,\"cpu0\",10,\"a\",0\n"
            "1,\"cpu0\",20,\"b\",12.5\n");
  EXPECT_TRUE(Contains(r.json(), R"j("Start (us)":{"microseconds":12.50000000000000000})j"));
  ExpectSameReport(Report::from_json(r.json()), r);
}

// A VM function's profile as `kiln profile` makes it: two calls of "main" (top level), each with
// its kernels nested in it. The Sum counts each microsecond once (the two mains), a nested row is
// never aggregated with a top-level row of the same name, and every format keeps the marker.
TEST(ReportTable, NestedRowsAreMarkedAndLeftOutOfTheSum) {
  Report r;
  r.device_metrics["cpu0"] = Total("cpu0", 100);
  MetricMap matmul = Call("matmul", 30, "cpu0", "float32[4, 4]", 30);
  matmul["Nested in"] = std::string("main");
  MetricMap relu = Call("relu", 10, "cpu0", "float32[4, 4]", 10);
  relu["Nested in"] = std::string("main");
  // A top-level call named like a kernel: grouped apart from the nested ones.
  MetricMap relu_alone = Call("relu", 4, "cpu0", "float32[4, 4]", 4);
  r.calls = {matmul,    relu, Call("main", 45, "cpu0", "float32[4, 4]", 45),
             matmul,    relu, Call("main", 43, "cpu0", "float32[4, 4]", 43),
             relu_alone};
  EXPECT_EQ(r.table(),
            "Name        Duration (us)  Percent  Device  Count  Argument Shapes  Nested in  \n"
            "main                88.00    88.00    cpu0      2    float32[4, 4]             \n"
            "matmul              60.00    60.00    cpu0      2    float32[4, 4]       main  \n"
            "relu                20.00    20.00    cpu0      2    float32[4, 4]       main  \n"
            "relu                 4.00     4.00    cpu0      1    float32[4, 4]             \n"
            "----------                                                                     \n"
            "Sum                 92.00    92.00              3                              \n"
            "Total              100.00             cpu0      1                              \n"
            "Sum: the calls nested in no other; a row with \"Nested in\" ran inside the call it "
            "names and is part of that call's time\n"
            "\n"
            "Configuration\n"
            "-------------\n");
  // Unaggregated, the same rule: 45 + 43 + 4.
  EXPECT_TRUE(Contains(r.table(false, false, true), "Sum                 92.00    92.00"));
  // Without sums there is no Sum row to explain.
  EXPECT_EQ(r.table(true, true, false).find("Sum:"), std::string::npos);
  // An ordinary string metric in CSV, JSON (round trip) and the trace.
  EXPECT_TRUE(
      Contains(r.csv(), "Argument Shapes,Count,Device,Duration (us),Name,Nested in,Percent\n"));
  EXPECT_TRUE(Contains(r.csv(), "\"float32[4, 4]\",1,\"cpu0\",30,\"matmul\",\"main\",30\n"));
  EXPECT_TRUE(Contains(r.json(), R"j("Nested in":{"string":"main"})j"));
  ExpectSameReport(Report::from_json(r.json()), r);
  EXPECT_TRUE(Contains(r.chrome_trace(), R"j("Nested in":"main")j"));
  // A report without nesting (the reference's) is unchanged: every row is summed.
  Report flat = r;
  for (MetricMap& call : flat.calls) call.erase("Nested in");
  EXPECT_TRUE(Contains(flat.table(), "Sum                172.00   172.00              7"));
  EXPECT_EQ(flat.table().find("Nested in"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Chrome trace.

TEST(ReportChromeTrace, OneSlicePerCallOneTrackPerDevice) {
  Report r = VmReport();
  r.calls[2]["Start (us)"] = Duration{1000};  // the profiler's start offset wins
  r.calls[1]["Occupancy"] = Ratio{0.5};
  r.calls.push_back({{"Name", std::string("no device")}, {"Duration (us)", Duration{2}}});
  json doc = json::parse(r.chrome_trace());
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  EXPECT_EQ(doc["otherData"]["Executor"], "VM");
  EXPECT_EQ(doc["otherData"]["Number of threads"], 8);
  std::map<int, std::string> thread_names;
  std::vector<json> slices;
  for (const json& event : doc["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      EXPECT_EQ(event["pid"], 1);
      EXPECT_TRUE(thread_names.emplace(event["tid"].get<int>(), event["args"]["name"]).second);
    } else if (event["ph"] == "X") {
      slices.push_back(event);
    }
  }
  EXPECT_EQ(thread_names,
            (std::map<int, std::string>{{1, "cpu0"}, {2, "cuda0"}, {3, "(no device)"}}));
  ASSERT_EQ(slices.size(), r.calls.size());
  const std::vector<std::string> names = {"fused_dense", "vm.builtin.check_tensor_info",
                                          "fused_dense", "vm.builtin.make_tuple", "no device"};
  const std::vector<double> ts = {0, 200, 1000, 1100, 1100.25};
  const std::vector<double> dur = {200, 1.5, 100, 0.25, 2};
  const std::vector<std::string> tracks = {"cuda0", "cpu0", "cuda0", "cpu0", "(no device)"};
  for (size_t i = 0; i < slices.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(slices[i]["name"], names[i]);
    EXPECT_EQ(slices[i]["ts"].get<double>(), ts[i]);
    EXPECT_EQ(slices[i]["dur"].get<double>(), dur[i]);
    EXPECT_EQ(slices[i]["pid"], 1);
    EXPECT_EQ(thread_names[slices[i]["tid"].get<int>()], tracks[i]);
    const json& args = slices[i]["args"];
    EXPECT_FALSE(args.contains("Name"));
    EXPECT_FALSE(args.contains("Duration (us)"));
    EXPECT_FALSE(args.contains("Start (us)"));
  }
  EXPECT_EQ(slices[0]["args"]["Count"], 1);
  EXPECT_TRUE(slices[0]["args"]["Count"].is_number_integer());
  EXPECT_EQ(slices[0]["args"]["Percent"], 25.0);
  EXPECT_EQ(slices[0]["args"]["Hash"], "9f86d081");
  EXPECT_EQ(slices[0]["args"]["Argument Shapes"], "float32[1, 64], float32[64, 64]");
  EXPECT_EQ(slices[1]["args"]["Occupancy"], 0.5);
  EXPECT_EQ(slices[1]["args"]["Device"], "cpu0");
}

TEST(ReportChromeTrace, EmptyReportAndHardNames) {
  json doc = json::parse(Report().chrome_trace());
  ASSERT_EQ(doc["traceEvents"].size(), 1u);  // the process name
  EXPECT_EQ(doc["traceEvents"][0]["name"], "process_name");

  Report r;
  r.calls = {{{"Name", std::string("a \"quoted\"\n\\name")},
              {"Device", std::string("cpu0")},
              {"Duration (us)", Duration{-1}},
              {"Weird", Percent{std::nan("")}}}};
  doc = json::parse(r.chrome_trace());
  const json& slice = doc["traceEvents"].back();
  EXPECT_EQ(slice["name"], "a \"quoted\"\n\\name");
  EXPECT_EQ(slice["dur"], 0);  // negative durations are clamped
  EXPECT_EQ(slice["args"]["Weird"], "NaN");
}

}  // namespace
}  // namespace kiln::profiling
