// SPDX-License-Identifier: Apache-2.0
// Throughput (issue 21 item 2): bytes derived from the arguments or given, GB/s and GFLOP/s
// arithmetic, the fraction of the peak memory bandwidth only where the backend reports one, and
// the run config's `throughput:` section with its errors.
#include "kiln/detail/throughput.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/config_error.h"
#include "kiln/detail/run_config.h"
#include "kiln/tensor.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(Throughput, DerivedBytesAreTheTensorArgumentsTotalSize) {
  const std::vector<Any> args = {Any(Tensor::empty_host({1000}, DataType::Float(32))),
                                 Any(int64_t{7}),  // a scalar moves nothing
                                 Any(Tensor::empty_host({10, 10}, DataType::Float(64))),
                                 Any(Tensor::empty_host({3}, DataType::Int(8)))};
  EXPECT_DOUBLE_EQ(argument_bytes(args), 4000 + 800 + 3);
  EXPECT_DOUBLE_EQ(argument_bytes({Any(1.5)}), 0);
}

TEST(Throughput, AutoBytesGbPerSecond) {
  // 12 MB per call in 1 ms: 12 GB/s; no flops, no peak.
  const Throughput t = compute_throughput(ThroughputSpec{}, 12e6, 1e-3, std::nullopt);
  EXPECT_TRUE(t.bytes_derived);
  EXPECT_DOUBLE_EQ(t.bytes, 12e6);
  EXPECT_DOUBLE_EQ(t.gb_per_s, 12);
  EXPECT_FALSE(t.gflop_per_s);
  EXPECT_FALSE(t.fraction_of_peak);
  EXPECT_EQ(t.line(),
            "throughput: 12.0 GB/s (12000000 bytes per call, the arguments' total size, an "
            "estimate of the traffic)");
}

TEST(Throughput, GivenBytesAndFlopsOverrideTheArguments) {
  ThroughputSpec spec;
  spec.bytes = 2e9;
  spec.flops = 5e8;
  const Throughput t = compute_throughput(spec, 123, 0.25, std::nullopt);
  EXPECT_FALSE(t.bytes_derived);
  EXPECT_DOUBLE_EQ(t.gb_per_s, 8);
  ASSERT_TRUE(t.gflop_per_s);
  EXPECT_DOUBLE_EQ(*t.gflop_per_s, 2);
  EXPECT_EQ(t.line(),
            "throughput: 8.00 GB/s (2000000000 bytes per call), 2.00 GFLOP/s (500000000 flops "
            "per call)");
}

TEST(Throughput, PercentOfPeakOnlyWhereTheBackendReportsOne) {
  const std::vector<std::pair<std::string, Any>> with_peak = {
      {"name", Any(std::string("gpu"))},
      {kPeakMemoryBandwidthAttribute, Any(int64_t{80'000'000'000})}};
  const std::optional<double> peak = peak_memory_bandwidth(with_peak);
  ASSERT_TRUE(peak);
  EXPECT_DOUBLE_EQ(*peak, 80e9);
  ThroughputSpec spec;
  spec.bytes = 40e6;
  const Throughput t = compute_throughput(spec, 0, 1e-3, peak);  // 40 GB/s of 80
  ASSERT_TRUE(t.fraction_of_peak);
  EXPECT_DOUBLE_EQ(*t.fraction_of_peak, 0.5);
  EXPECT_THAT(t.line(), HasSubstr("40.0 GB/s (50% of the 80.0 GB/s peak memory bandwidth; "));

  // The CPU plugin reports caches, cores and memory size but no bandwidth: no percentage.
  const std::vector<std::pair<std::string, Any>> cpu = {{"cores", Any(int64_t{2})},
                                                        {"memory_bytes", Any(int64_t{1} << 34)}};
  EXPECT_FALSE(peak_memory_bandwidth(cpu));
  const Throughput none = compute_throughput(spec, 0, 1e-3, peak_memory_bandwidth(cpu));
  EXPECT_FALSE(none.fraction_of_peak);
  EXPECT_THAT(none.line(), Not(HasSubstr("peak")));
  // A peak that is not a positive number is no peak.
  EXPECT_FALSE(peak_memory_bandwidth({{kPeakMemoryBandwidthAttribute, Any(int64_t{0})}}));
  EXPECT_FALSE(peak_memory_bandwidth({{kPeakMemoryBandwidthAttribute, Any(std::string("fast"))}}));
}

TEST(Throughput, ZeroTimeGivesNoRateNotZeroNorInfinity) {
  ThroughputSpec spec;
  spec.flops = 10;
  const Throughput t = compute_throughput(spec, 100, 0, 1e9);
  EXPECT_EQ(t.gb_per_s, 0);  // never infinity; the line and the JSON say n/a
  EXPECT_EQ(*t.gflop_per_s, 0);
  EXPECT_FALSE(t.fraction_of_peak);
  EXPECT_EQ(t.line(), "throughput: n/a (no time per call was measured; 100 bytes per call)");
}

// The run config's `throughput:` section.
class ThroughputConfigTest : public ::testing::Test {
 protected:
  ThroughputConfigTest() { std::ofstream(dir_.path() / "mod.so") << "stand-in"; }

  std::filesystem::path path() const { return dir_.path() / "run.yaml"; }

  run::RunSpec parse(const std::string& text) const {
    std::ofstream(path(), std::ios::binary) << text;
    return run::parse_run_config(path());
  }

  // Expects `text` to fail at line:column about `key` with `message` in the error.
  void expect_error(const std::string& text, int line, int column, const std::string& key,
                    const std::string& message) const {
    try {
      parse(text);
      ADD_FAILURE() << "no ConfigError for:\n" << text;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), StartsWith(path().string() + ":" + std::to_string(line) + ":" +
                                       std::to_string(column) + ": " + key + ": "))
          << text;
      EXPECT_THAT(e.what(), HasSubstr(message)) << text;
    }
  }

 private:
  TempDir dir_;
};

TEST_F(ThroughputConfigTest, DefaultIsAutoBytesAndNoFlops) {
  const run::RunSpec spec = parse("module: mod.so\n");
  EXPECT_FALSE(spec.throughput.bytes);
  EXPECT_FALSE(spec.throughput.flops);
  const run::RunSpec autos = parse("module: mod.so\nthroughput:\n  bytes: auto\n");
  EXPECT_FALSE(autos.throughput.bytes);
}

TEST_F(ThroughputConfigTest, GivenBytesAndFlops) {
  const run::RunSpec spec =
      parse("module: mod.so\nthroughput:\n  bytes: 50331648\n  flops: 2.5e9\n");
  ASSERT_TRUE(spec.throughput.bytes);
  EXPECT_DOUBLE_EQ(*spec.throughput.bytes, 50331648);
  ASSERT_TRUE(spec.throughput.flops);
  EXPECT_DOUBLE_EQ(*spec.throughput.flops, 2.5e9);
}

TEST_F(ThroughputConfigTest, BadValuesNameTheirPosition) {
  expect_error("module: mod.so\nthroughput:\n  bytes: -5\n", 3, 10, "throughput.bytes",
               "must be a finite number >= 0, got -5");
  expect_error("module: mod.so\nthroughput:\n  bytes: lots\n", 3, 10, "throughput.bytes",
               "expected a number of bytes per call or 'auto'");
  expect_error("module: mod.so\nthroughput:\n  flops: -1e3\n", 3, 10, "throughput.flops",
               "must be a finite number >= 0");
  expect_error("module: mod.so\nthroughput:\n  flops: auto\n", 3, 10, "throughput.flops",
               "expected a number of floating-point operations per call");
  expect_error("module: mod.so\nthroughput:\n  byte: 5\n", 3, 3, "throughput.byte", "unknown key");
}

}  // namespace
}  // namespace kiln
