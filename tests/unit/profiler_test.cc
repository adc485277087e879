// SPDX-License-Identifier: Apache-2.0
// Profiler lifecycle (SPEC.md §3.2), collectors (§3.6) and profile_function (§3.9).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "kiln/kiln.h"
#include "kiln/profiling/profiler.h"

namespace kiln::profiling {
namespace {

using ::testing::ElementsAre;

// Counts what the profiler asks of it, and reports the number of calls it saw stop.
// It handles devices of `handled_type` only (the cpu unless told otherwise): for others its
// start() answers null, and the profiler must then neither stop it nor report its metrics.
// Its metrics are named "<prefix> Calls", "<prefix> Label" and "<prefix> Ratio".
class TestCollector : public MetricCollector {
 public:
  explicit TestCollector(int32_t handled_type = kDLCPU, std::string prefix = "Test")
      : handled_type_(handled_type), prefix_(std::move(prefix)) {}
  std::string name() const override { return "test"; }
  void init(const std::vector<Device>& devices) override {
    ++inits;
    devices_seen = devices.size();
  }
  std::shared_ptr<void> start(Device device) override {
    ++asked;
    if (device.type != handled_type_) return nullptr;
    ++starts;
    return std::make_shared<int>(starts);
  }
  MetricMap stop(std::shared_ptr<void> state) override {
    ++stops;
    return {{prefix_ + " Calls", Count{*static_cast<int*>(state.get())}},
            {prefix_ + " Label", std::string("from the test collector")},
            {prefix_ + " Ratio", Ratio{0.5}}};
  }
  int inits = 0, asked = 0, starts = 0, stops = 0;
  size_t devices_seen = 0;

 private:
  int32_t handled_type_;
  std::string prefix_;
};

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(Profiler, LifecycleNestedCallsTotalsAndPercent) {
  auto collector = std::make_shared<TestCollector>();
  Profiler p({Device::cpu()}, {collector}, {{"Executor", std::string("VM")}});
  EXPECT_EQ(collector->inits, 1);
  EXPECT_EQ(collector->devices_seen, 1u);
  p.start();
  p.start_call("outer", Device::cpu());
  sleep_ms(5);
  p.start_call("inner", Device::cpu(), {{"Hash", std::string("abc")}});
  sleep_ms(10);
  p.stop_call({{"Argument Shapes", std::string("float32[4]")}});
  p.stop_call();
  p.stop();
  EXPECT_EQ(collector->starts, 3) << "Total + outer + inner";
  EXPECT_EQ(collector->stops, 3);
  Report r = p.report();
  ASSERT_EQ(r.calls.size(), 2u);
  // Calls are in the order they ended: inner first.
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Name")), "inner");
  EXPECT_EQ(std::get<std::string>(r.calls[1].at("Name")), "outer");
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Hash")), "abc");
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Argument Shapes")), "float32[4]");
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Device")), "cpu0");
  EXPECT_EQ(std::get<Count>(r.calls[0].at("Count")).value, 1);
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Test Label")), "from the test collector");
  // inner ran inside outer; outer inside the device total only, which encloses no row.
  EXPECT_EQ(std::get<std::string>(r.calls[0].at("Nested in")), "outer");
  EXPECT_EQ(r.calls[1].count("Nested in"), 0u);
  const double inner = std::get<Duration>(r.calls[0].at("Duration (us)")).microseconds;
  const double outer = std::get<Duration>(r.calls[1].at("Duration (us)")).microseconds;
  EXPECT_GE(inner, 9000);
  EXPECT_GE(outer, inner + 4000);
  ASSERT_EQ(r.device_metrics.count("cpu0"), 1u);
  const double total =
      std::get<Duration>(r.device_metrics.at("cpu0").at("Duration (us)")).microseconds;
  EXPECT_GE(total, outer);
  EXPECT_EQ(r.device_metrics.at("cpu0").count("Percent"), 0u) << "device rows get no Percent";
  EXPECT_NEAR(std::get<Percent>(r.calls[1].at("Percent")).percent, outer / total * 100, 1e-9);
  EXPECT_GE(std::get<Duration>(r.calls[0].at("Start (us)")).microseconds,
            std::get<Duration>(r.calls[1].at("Start (us)")).microseconds);
  EXPECT_EQ(std::get<std::string>(r.configuration.at("Executor")), "VM");
  EXPECT_GE(std::get<Count>(r.configuration.at("Number of threads")).value, 1);
  // The Sum row counts outer only (inner is part of it), so it never passes the total.
  EXPECT_NE(r.table().find(fmt::format("Sum         {:>13}", format_metric(Duration{outer}))),
            std::string::npos)
      << r.table();
  // The formats read the same rows.
  EXPECT_NE(r.table().find("inner"), std::string::npos);
  EXPECT_NE(r.table().find("Total"), std::string::npos);
  EXPECT_NE(r.csv().find("Test Calls"), std::string::npos);
}

TEST(Profiler, MisuseIsAnError) {
  Profiler p({Device::cpu()}, {});
  EXPECT_THROW(p.stop_call(), RuntimeError);
  EXPECT_THROW(p.stop(), RuntimeError);
  p.start();
  EXPECT_THROW(p.start(), RuntimeError);
  EXPECT_THROW(p.report(), RuntimeError);
  p.stop();
  EXPECT_TRUE(p.report().calls.empty());
  EXPECT_THROW(Profiler({Device{kDLVulkan, 0}}, {}), NotFoundError);
}

TEST(Profiler, CollectorSkipsDevicesItDoesNotHandle) {
  // Beside a collector of the cpu, one that handles only CUDA devices: it is asked for every
  // cpu frame, declines each, and is never stopped; its metrics appear nowhere.
  auto cpu = std::make_shared<TestCollector>(kDLCPU, "Cpu");
  auto cuda_only = std::make_shared<TestCollector>(kDLCUDA, "Cuda");
  Profiler p({Device::cpu()}, {cpu, cuda_only});
  p.start();
  p.start_call("call", Device::cpu());
  p.stop_call();
  p.stop();
  EXPECT_EQ(cuda_only->asked, 2) << "Total + call";
  EXPECT_EQ(cuda_only->starts, 0);
  EXPECT_EQ(cuda_only->stops, 0) << "a collector that declined a frame is not stopped";
  EXPECT_EQ(cpu->starts, 2);
  EXPECT_EQ(cpu->stops, 2);
  const Report r = p.report();
  ASSERT_EQ(r.calls.size(), 1u);
  for (const MetricMap* row : {&r.calls[0], &r.device_metrics.at("cpu0")}) {
    EXPECT_EQ(row->count("Cpu Calls"), 1u);
    EXPECT_EQ(row->count("Cuda Calls"), 0u);
    EXPECT_EQ(row->count("Cuda Label"), 0u);
  }
}

TEST(ProfileFunction, ReturnsTheCollectorsMetrics) {
  Module m = load_module(std::string(KILN_EXAMPLE_KERNEL_DIR) + "/libcalls.so");
  auto collector = std::make_shared<TestCollector>();
  auto prof = profile_function(m, Device::cpu(), {collector}, "add3", 4);
  MetricMap metrics = prof({Any(1), Any(2), Any(3)});
  EXPECT_EQ(collector->inits, 1) << "init on every invocation";
  EXPECT_EQ(std::get<Count>(metrics.at("Test Calls")).value, 1);
  EXPECT_DOUBLE_EQ(std::get<Ratio>(metrics.at("Test Ratio")).ratio, 0.5);
  EXPECT_EQ(metrics.count("Duration (us)"), 0u) << "profile_function adds no timing";
  prof({Any(1), Any(2), Any(3)});
  EXPECT_EQ(collector->inits, 2);
  try {
    profile_function(m, Device::cpu(), {collector}, "nope");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_STREQ(e.what(), "There is no function called \"nope\" in the module");
  }
}

TEST(ProfileFunction, RefusesRemoteModules) {
  Module remote(make_object<ModuleObj>("rpc", "main"));
  try {
    profile_function(remote, Device::cpu(), {});
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_STREQ(e.what(), "Profiling a module over RPC is not yet supported");
  }
}

}  // namespace
}  // namespace kiln::profiling
