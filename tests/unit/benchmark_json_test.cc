// SPDX-License-Identifier: Apache-2.0
// BenchmarkResult::to_json as Google Benchmark writes its JSON (issue 21 item 4): the sample
// stddev and the cv aggregate as its ComputeStats defines them, a filled context, and
// from_json reading `kiln run --json` documents too.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "kiln/evaluator.h"

namespace kiln {
namespace {

const nlohmann::json* find_aggregate(const nlohmann::json& doc, const std::string& which) {
  for (const auto& b : doc["benchmarks"]) {
    if (b.value("aggregate_name", "") == which) return &b;
  }
  return nullptr;
}

TEST(BenchmarkJson, AggregatesAsGoogleBenchmark) {
  BenchmarkResult r({1e-6, 2e-6, 3e-6, 4e-6, 5e-6});
  r.name = "relu/1024/float32/cpu:0";
  r.numbers = {7, 7, 7, 7, 7};
  const auto doc = nlohmann::json::parse(r.to_json());
  const auto* stddev = find_aggregate(doc, "stddev");
  const auto* cv = find_aggregate(doc, "cv");
  ASSERT_NE(stddev, nullptr);
  ASSERT_NE(cv, nullptr);
  // Sample stddev (n - 1) in ns: sqrt(10 / 4) us; the population value would be sqrt(2) us.
  EXPECT_NEAR((*stddev)["real_time"].get<double>(), std::sqrt(2.5) * 1000, 1e-9);
  EXPECT_EQ((*stddev)["aggregate_unit"], "time");
  // cv: stddev / mean as a fraction, aggregate_unit "percentage" (Google Benchmark's JSON).
  EXPECT_NEAR((*cv)["real_time"].get<double>(), std::sqrt(2.5) / 3, 1e-12);
  EXPECT_EQ((*cv)["aggregate_unit"], "percentage");
  EXPECT_EQ((*cv)["name"], "relu/1024/float32/cpu:0_cv");
  EXPECT_EQ((*cv)["run_name"], "relu/1024/float32/cpu:0");
  EXPECT_EQ((*cv)["iterations"], 7);  // the iterations of one repetition, as Google Benchmark
  EXPECT_EQ((*cv)["repetitions"], 5);
  // The population value stays where the reference prints it.
  EXPECT_NEAR(r.std(), std::sqrt(2.0) * 1e-6, 1e-18);
}

TEST(BenchmarkJson, ContextFilled) {
  const auto doc = nlohmann::json::parse(BenchmarkResult({1e-3}).to_json());
  const auto& c = doc["context"];
  for (const char* key : {"date", "host_name", "executable", "num_cpus", "mhz_per_cpu",
                          "cpu_scaling_enabled", "caches", "load_avg", "library_build_type"}) {
    EXPECT_TRUE(c.contains(key)) << key;
  }
  EXPECT_GE(c["num_cpus"].get<int64_t>(), 1);
  // ISO 8601 with the offset's colon: 2026-11-24T12:00:00+00:00.
  EXPECT_EQ(c["date"].get<std::string>().size(), 25u) << c["date"];
  EXPECT_EQ(c["load_avg"].size(), 3u);  // getloadavg works on Linux
  for (const auto& cache : c["caches"]) {
    EXPECT_TRUE(cache["type"] == "Data" || cache["type"] == "Instruction" ||
                cache["type"] == "Unified");
    EXPECT_GE(cache["level"].get<int64_t>(), 1);
    EXPECT_GT(cache["size"].get<int64_t>(), 0);
    EXPECT_GE(cache["num_sharing"].get<int64_t>(), 1);
  }
}

TEST(BenchmarkJson, FromJsonReadsRunJsonAndOneBenchmark) {
  BenchmarkResult r({1e-6, 3e-6});
  r.name = "add";
  nlohmann::json run{{"function", "add"}, {"benchmark", nlohmann::json::parse(r.to_json())}};
  BenchmarkResult back = BenchmarkResult::from_json(run.dump());
  ASSERT_EQ(back.results().size(), 2u);
  EXPECT_EQ(back.name, "add");
  // A Google Benchmark file with two benchmarks: the first one's repetitions only.
  nlohmann::json two = nlohmann::json::parse(r.to_json());
  for (auto& b : two["benchmarks"]) b["run_name"] = "other";
  // (The parsed document is a named value: a range-for over a member of a temporary would
  // read it after it is freed.)
  const nlohmann::json one = nlohmann::json::parse(r.to_json());
  for (const auto& b : one["benchmarks"]) two["benchmarks"].push_back(b);
  back = BenchmarkResult::from_json(two.dump());
  EXPECT_EQ(back.name, "other");
  EXPECT_EQ(back.results().size(), 2u);
  EXPECT_THROW(BenchmarkResult::from_json(R"({"benchmarks": [{"run_type": "iteration",
      "real_time": 1, "time_unit": "fortnights"}]})"),
               ValueError);
}

}  // namespace
}  // namespace kiln
