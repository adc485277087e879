// SPDX-License-Identifier: Apache-2.0
// The perf collector plugin (plugins/perf) driven through its raw KilnMetricCollector table:
// metrics around a spinning kernel, nested and concurrent measurements, worker threads,
// unsupported devices, events this machine cannot count, option errors and repeated
// init/teardown cycles. Written to pass both on VMs without a hardware PMU (where only the
// software events can be counted) and on machines with one.
#include <dlpack/dlpack.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ffi/error_object.h"
#include "kiln/c/collector.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Where the build puts the plugins (the plugin itself is not a dependency of this binary).
const std::filesystem::path kPluginDir = KILN_BUILD_DIR "/lib/kiln/plugins";

// Every event the plugin knows, in its order; the metric of event `e` is "perf::e".
const std::vector<std::string> kKnownEvents = {"task-clock",
                                               "page-faults",
                                               "context-switches",
                                               "cpu-migrations",
                                               "cycles",
                                               "instructions",
                                               "cache-misses",
                                               "branch-misses",
                                               "stalled-cycles-frontend",
                                               "stalled-cycles-backend"};

// Skips the test when the perf plugin was not built (it is Linux-only and is not a declared
// dependency of kiln_unit_tests unless tests/CMakeLists.txt adds it).
#define SKIP_WITHOUT_PERF_PLUGIN()                                              \
  if (!std::filesystem::exists(kPluginDir / "libkiln_perf.so") ||               \
      !std::filesystem::exists(kPluginDir / "perf.yaml")) {                     \
    GTEST_SKIP() << "the perf plugin is not built in " << kPluginDir            \
                 << " (build the `perf` target; add it to add_dependencies in " \
                    "tests/CMakeLists.txt)";                                    \
  }

constexpr DLDevice kCpu{kDLCPU, 0};
constexpr DLDevice kCuda{kDLCUDA, 0};

// One metric as the sink received it, copied (the KilnMetric is borrowed for the call).
struct MetricValue {
  int32_t kind = 0;
  int64_t count = 0;
  double value = 0;
};
using Metrics = std::map<std::string, MetricValue>;

// The sink: records each metric into the Metrics map `ctx`; a repeated name is an error.
void collect(void* ctx, const KilnMetric* metric) {
  auto* metrics = static_cast<Metrics*>(ctx);
  ASSERT_NE(metric, nullptr);
  ASSERT_GE(metric->struct_size, sizeof(KilnMetric));
  ASSERT_NE(metric->name, nullptr);
  const bool inserted =
      metrics->emplace(metric->name, MetricValue{metric->kind, metric->count, metric->value})
          .second;
  EXPECT_TRUE(inserted) << metric->name << " reported twice";
}

// The message of `error` (NULL: ""), which it frees: tests own what the plugin returns.
std::string take_error(KilnError* error) {
  if (error == nullptr) return "";
  const KilnHostServices& host = ffi::host_services();
  std::string message = host.error_message(host.host_ctx, error);
  host.error_free(host.host_ctx, error);
  return message;
}

// Busy-waits `ms` milliseconds in the `spin` kernel of the example library libcalls.so,
// called on this thread through Kiln.
void spin_ms(int64_t ms) {
  static const Module calls = load_module(KILN_EXAMPLE_KERNEL_DIR "/libcalls.so");
  calls["spin"](ms * 1000000);
}

// A Runtime that searches only the build's plugin folder, without the environment or the
// install prefix, plus the collector "perf" it loaded (null when it did not).
class PerfRuntime {
 public:
  // `plugin_set_yaml`: the text of a plugin set written to a temporary file; nullopt loads
  // every plugin found (no plugin set).
  explicit PerfRuntime(const std::optional<std::string>& plugin_set_yaml) {
    RuntimeOptions options;
    options.search_paths = {kPluginDir};
    options.read_environment = false;
    options.search_install_prefix = false;
    options.plugin_set = std::filesystem::path();  // empty: none
    if (plugin_set_yaml) {
      options.plugin_set = dir_.path() / "plugins.yaml";
      std::ofstream(*options.plugin_set) << *plugin_set_yaml;
    }
    runtime_ = std::make_unique<Runtime>(options);
    const auto names = runtime_->collector_names();
    if (std::find(names.begin(), names.end(), "perf") != names.end()) {
      std::tie(table_, plugin_) = runtime_->collector("perf");
    }
  }

  Runtime& runtime() { return *runtime_; }
  // The raw collector table (owned by the runtime), or null when perf did not load.
  const KilnMetricCollector* table() const { return table_; }
  // The status of the plugin named perf.
  const PluginStatus* status() const {
    for (const PluginStatus& s : runtime_->plugins()) {
      if (s.name == "perf") return &s;
    }
    return nullptr;
  }

 private:
  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
  const KilnMetricCollector* table_ = nullptr;
  Ref<Object> plugin_;  // keeps the plugin loaded while the table is used
};

// A plugin set that loads only perf with `events` (a YAML flow list) as its option.
std::string perf_only(const std::string& events) {
  return "plugins:\n  - name: perf\n    options: {events: " + events + "}\n";
}

// One collector state (init ... teardown) on the raw table.
class Session {
 public:
  // Calls init with `devices`; check ok() / error() afterwards.
  Session(const KilnMetricCollector* table, std::vector<DLDevice> devices) : table_(table) {
    error_ = take_error(
        table_->init(table_->self, devices.data(), static_cast<int32_t>(devices.size()), &state_));
  }
  ~Session() {
    if (error_.empty()) table_->teardown(table_->self, state_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // start(device): the handle (NULL for an unsupported device); fails the test on error.
  void* start(DLDevice device = kCpu) {
    void* handle = reinterpret_cast<void*>(uintptr_t{1});  // must be overwritten
    const std::string error = take_error(table_->start(table_->self, state_, device, &handle));
    EXPECT_EQ(error, "");
    return handle;
  }
  // stop(handle): the metrics reported; fails the test on error.
  Metrics stop(void* handle) {
    Metrics metrics;
    const std::string error =
        take_error(table_->stop(table_->self, state_, handle, collect, &metrics));
    EXPECT_EQ(error, "");
    return metrics;
  }

 private:
  const KilnMetricCollector* table_;
  void* state_ = nullptr;
  std::string error_;
};

// The task-clock metric of `metrics` in microseconds; fails the test when it is missing or
// not a duration.
double task_clock_us(const Metrics& metrics) {
  const auto it = metrics.find("perf::task-clock");
  EXPECT_NE(it, metrics.end()) << "perf::task-clock missing";
  if (it == metrics.end()) return -1;
  EXPECT_EQ(it->second.kind, KILN_METRIC_DURATION);
  return it->second.value;
}

// The CPU time the calling thread has used, in microseconds, independent of how busy the
// machine is (the wall time of a spin is not, on 2 shared cores). The kernel keeps it without
// the time stolen by the hypervisor, which task-clock includes: it is a lower bound.
double thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The steady clock in microseconds: the upper bound of one thread's task-clock.
double wall_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Expects a task-clock of `us` to be at least the thread CPU time `cpu_inside_us` read inside
// the measured interval and at most the wall time `wall_around_us` read around it, with 5 %
// plus 100 us of slack for the counters' own reads.
void expect_task_clock(double us, double cpu_inside_us, double wall_around_us) {
  EXPECT_GE(us, cpu_inside_us * 0.95 - 100) << "less than the CPU time inside the interval";
  EXPECT_LE(us, wall_around_us * 1.05 + 100) << "more than the wall time around the interval";
}

// Captures stderr (the host's logger) at warn level for the scope; restores the level.
class CapturedWarnings {
 public:
  CapturedWarnings() : level_(log_level()) {
    set_log_level(LogLevel::kWarn);
    ::testing::internal::CaptureStderr();
  }
  ~CapturedWarnings() {
    if (!taken_) ::testing::internal::GetCapturedStderr();
    set_log_level(level_);
  }
  // Everything written since construction; call once.
  std::string take() {
    taken_ = true;
    return ::testing::internal::GetCapturedStderr();
  }

 private:
  LogLevel level_;
  bool taken_ = false;
};

TEST(PerfCollector, LoadsAsCollectorPerf) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock]"));
  ASSERT_NE(rt.status(), nullptr);
  EXPECT_EQ(rt.status()->state, PluginStatus::State::kLoaded) << rt.status()->reason;
  EXPECT_THAT(rt.status()->provides, ::testing::Contains("collector:perf"));
  ASSERT_NE(rt.table(), nullptr);
}

TEST(PerfCollector, TaskClockMeasuresASpinningKernel) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock, page-faults]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);  // loads libcalls.so before measuring
  Session session(rt.table(), {kCpu});
  ASSERT_TRUE(session.ok()) << session.error();
  // On a busy machine (2 shared cores) a 20 ms spin may get much less than 20 ms of CPU, so
  // the kernel is called until this thread has spun for 20 ms of CPU time by its own clock.
  const double wall_before = wall_us();
  void* handle = session.start();
  ASSERT_NE(handle, nullptr);
  const double cpu_begin = thread_cpu_us();
  int calls = 0;
  do {
    spin_ms(20);
    ++calls;
  } while (thread_cpu_us() - cpu_begin < 20000 && calls < 50);
  const double cpu_end = thread_cpu_us();
  const Metrics metrics = session.stop(handle);
  const double wall_after = wall_us();
  const double us = task_clock_us(metrics);
  EXPECT_GE(us, 15000) << calls << " calls of spin(20 ms), " << cpu_end - cpu_begin
                       << " us of CPU time";
  expect_task_clock(us, cpu_end - cpu_begin, wall_after - wall_before);
  ASSERT_TRUE(metrics.count("perf::page-faults"));
  EXPECT_EQ(metrics.at("perf::page-faults").kind, KILN_METRIC_COUNT);
  EXPECT_GE(metrics.at("perf::page-faults").count, 0);
  EXPECT_EQ(metrics.size(), 2u) << "only the selected events";
}

TEST(PerfCollector, NestedCallsEachGetTheirOwnCounts) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);
  Session session(rt.table(), {kCpu});
  ASSERT_TRUE(session.ok()) << session.error();
  const double wall_before_outer = wall_us();
  void* outer = session.start();
  const double cpu_outer_begin = thread_cpu_us();
  spin_ms(5);
  const double wall_before_inner = wall_us();
  void* inner = session.start();
  const double cpu_inner_begin = thread_cpu_us();
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_NE(outer, inner);
  spin_ms(20);
  const double cpu_inner_end = thread_cpu_us();
  const double inner_us = task_clock_us(session.stop(inner));
  const double wall_after_inner = wall_us();
  spin_ms(5);
  const double cpu_outer_end = thread_cpu_us();
  const double outer_us = task_clock_us(session.stop(outer));
  const double wall_after_outer = wall_us();
  expect_task_clock(inner_us, cpu_inner_end - cpu_inner_begin,
                    wall_after_inner - wall_before_inner);
  expect_task_clock(outer_us, cpu_outer_end - cpu_outer_begin,
                    wall_after_outer - wall_before_outer);
  EXPECT_GE(outer_us, inner_us) << "the outer call contains the inner one";
  EXPECT_GT(outer_us, inner_us + 0.5 * (cpu_inner_begin - cpu_outer_begin))
      << "plus the spins of its own";
}

TEST(PerfCollector, CountsThreadsCreatedAfterInit) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);
  Session session(rt.table(), {kCpu});
  ASSERT_TRUE(session.ok()) << session.error();
  void* handle = session.start();
  ASSERT_NE(handle, nullptr);
  // inherit=1: a thread started after init counts into this thread's counters.
  double worker_cpu_us = 0;
  std::thread worker([&worker_cpu_us] {
    spin_ms(20);
    worker_cpu_us = thread_cpu_us();  // everything the worker used
  });
  worker.join();
  const double us = task_clock_us(session.stop(handle));
  EXPECT_GT(worker_cpu_us, 1000) << "the worker spun";
  EXPECT_GE(us, worker_cpu_us * 0.95 - 100) << "the worker's CPU time is included";
}

TEST(PerfCollector, OnlyCpuDevicesGetAHandle) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  {
    Session session(rt.table(), {kCpu, kCuda});
    ASSERT_TRUE(session.ok()) << session.error();
    EXPECT_EQ(session.start(kCuda), nullptr);
    EXPECT_EQ(session.start(DLDevice{kDLOpenCL, 1}), nullptr);
    EXPECT_TRUE(session.stop(nullptr).empty()) << "stopping a NULL handle reports nothing";
    void* cpu = session.start(kCpu);
    EXPECT_NE(cpu, nullptr);
    EXPECT_EQ(session.stop(cpu).size(), 1u);
  }
  {
    // No cpu device to profile: the state counts nothing, not even on cpu.
    Session session(rt.table(), {kCuda});
    ASSERT_TRUE(session.ok()) << session.error();
    EXPECT_EQ(session.start(kCpu), nullptr);
    EXPECT_EQ(session.start(kCuda), nullptr);
  }
  {
    Session session(rt.table(), {});
    ASSERT_TRUE(session.ok()) << session.error();
    EXPECT_EQ(session.start(kCpu), nullptr);
  }
}

TEST(PerfCollector, UnavailableEventsAreLeftOutNotReportedAsZero) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock, cycles, instructions]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);
  std::string warnings;
  Metrics metrics;
  double spun_us = 0;
  {
    CapturedWarnings capture;
    Session session(rt.table(), {kCpu});
    warnings = capture.take();
    ASSERT_TRUE(session.ok()) << session.error() << "\n" << warnings;
    void* handle = session.start();
    ASSERT_NE(handle, nullptr);
    const double cpu_begin = thread_cpu_us();
    spin_ms(20);
    spun_us = thread_cpu_us() - cpu_begin;
    metrics = session.stop(handle);
  }
  expect_task_clock(task_clock_us(metrics), spun_us, 1e9);
  for (const std::string event : {"cycles", "instructions"}) {
    const auto it = metrics.find("perf::" + event);
    if (it != metrics.end()) {
      // A hardware PMU is present: 20 ms of spinning runs millions of both.
      EXPECT_EQ(it->second.kind, KILN_METRIC_COUNT);
      EXPECT_GT(it->second.count, 0) << event;
      EXPECT_THAT(warnings, Not(HasSubstr("event '" + event + "' unavailable")));
    } else {
      // Not countable here (no PMU in most VMs): absent, with one warning saying why.
      EXPECT_THAT(warnings, HasSubstr("event '" + event + "' unavailable: "));
      EXPECT_THAT(warnings, HasSubstr("perf_event_paranoid"));
      std::cout << "[   INFO   ] perf::" << event << " is not countable here\n";
    }
  }
  EXPECT_THAT(warnings, Not(HasSubstr("task-clock' unavailable")));
  std::cout << "[   INFO   ] warnings at init:\n" << warnings;

  // The warnings are given once per plugin, not again at the next init.
  CapturedWarnings again;
  {
    Session session(rt.table(), {kCpu});
    ASSERT_TRUE(session.ok()) << session.error();
  }
  EXPECT_THAT(again.take(), Not(HasSubstr("unavailable")));
}

TEST(PerfCollector, NothingCountableMeansNoHandle) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[cycles]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);
  CapturedWarnings capture;
  Session session(rt.table(), {kCpu});
  const std::string warnings = capture.take();
  ASSERT_TRUE(session.ok()) << "init never fails for unavailable events: " << session.error();
  void* handle = session.start();
  if (handle == nullptr) {
    // No PMU: nothing to count, so no handle and no metrics at all (not cycles = 0).
    EXPECT_THAT(warnings, HasSubstr("event 'cycles' unavailable: "));
    EXPECT_THAT(warnings, HasSubstr("none of the selected perf events can be counted"));
  } else {
    spin_ms(5);
    const Metrics metrics = session.stop(handle);
    ASSERT_EQ(metrics.size(), 1u);
    EXPECT_GT(metrics.at("perf::cycles").count, 0);
  }
}

TEST(PerfCollector, DefaultSelectsEveryKnownEvent) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(std::nullopt);  // no plugin set: every plugin found, perf with options {}
  ASSERT_NE(rt.table(), nullptr) << (rt.status() ? rt.status()->reason : "perf not found");
  spin_ms(1);
  std::string warnings;
  Metrics metrics;
  double spun_us = 0;
  {
    CapturedWarnings capture;
    Session session(rt.table(), {kCpu});
    warnings = capture.take();
    ASSERT_TRUE(session.ok()) << session.error();
    void* handle = session.start();
    ASSERT_NE(handle, nullptr);
    const double cpu_begin = thread_cpu_us();
    spin_ms(20);
    spun_us = thread_cpu_us() - cpu_begin;
    metrics = session.stop(handle);
  }
  expect_task_clock(task_clock_us(metrics), spun_us, 1e9);
  EXPECT_TRUE(metrics.count("perf::page-faults")) << "software events work without a PMU";
  std::string counted;
  for (const std::string& event : kKnownEvents) {
    const auto it = metrics.find("perf::" + event);
    // Each known event is either reported or explained, never silently dropped.
    if (it == metrics.end()) {
      EXPECT_THAT(warnings, HasSubstr("event '" + event + "' unavailable: "));
      continue;
    }
    counted += " " + event;
    if (event == "task-clock") continue;
    EXPECT_EQ(it->second.kind, KILN_METRIC_COUNT) << event;
    EXPECT_GE(it->second.count, 0) << event;
    if (event == "cycles" || event == "instructions") {
      EXPECT_GT(it->second.count, 0) << event;
    }
  }
  for (const auto& [name, value] : metrics) {
    EXPECT_THAT(kKnownEvents, ::testing::Contains(name.substr(6))) << name;
    EXPECT_EQ(name.substr(0, 6), "perf::");
  }
  std::cout << "[   INFO   ] counted here:" << counted << "\n";
  std::cout << "[   INFO   ] warnings at init:\n" << warnings;
}

TEST(PerfCollector, BadOptionsFailThePluginWithTheKnownEvents) {
  SKIP_WITHOUT_PERF_PLUGIN();
  {
    PerfRuntime rt(perf_only("[task-clock, cyclez]"));
    ASSERT_NE(rt.status(), nullptr);
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kFailed);
    EXPECT_THAT(rt.status()->reason, HasSubstr("unknown event 'cyclez'"));
    EXPECT_THAT(rt.status()->reason,
                HasSubstr("known events: task-clock, page-faults, context-switches, "
                          "cpu-migrations, cycles, instructions, cache-misses, branch-misses, "
                          "stalled-cycles-frontend, stalled-cycles-backend"));
    EXPECT_EQ(rt.table(), nullptr);
    EXPECT_THROW(rt.runtime().collector("perf"), NotFoundError);
  }
  {
    PerfRuntime rt(perf_only("cycles"));
    ASSERT_NE(rt.status(), nullptr);
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kFailed);
    EXPECT_THAT(rt.status()->reason, HasSubstr("expected a list of event names"));
  }
  {
    PerfRuntime rt(perf_only("[task-clock, task-clock]"));
    ASSERT_NE(rt.status(), nullptr);
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kFailed);
    EXPECT_THAT(rt.status()->reason, HasSubstr("'task-clock' is listed twice"));
  }
}

TEST(PerfCollector, SurvivesRepeatedInitTeardownAndConcurrentStates) {
  SKIP_WITHOUT_PERF_PLUGIN();
  PerfRuntime rt(perf_only("[task-clock, page-faults, cycles]"));
  ASSERT_NE(rt.table(), nullptr) << rt.status()->reason;
  spin_ms(1);
  for (int cycle = 0; cycle < 5; ++cycle) {
    Session session(rt.table(), {kCpu});
    ASSERT_TRUE(session.ok()) << session.error();
    void* handle = session.start();
    ASSERT_NE(handle, nullptr);
    const double cpu_begin = thread_cpu_us();
    spin_ms(3);
    const double cpu_end = thread_cpu_us();
    expect_task_clock(task_clock_us(session.stop(handle)), cpu_end - cpu_begin, 1e9);
  }
  // Two states at once (two profilers): each has its own counters.
  Session a(rt.table(), {kCpu});
  Session b(rt.table(), {kCpu});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  void* ha = a.start();
  void* hb = b.start();
  const double cpu_begin = thread_cpu_us();
  spin_ms(20);
  const double cpu_end = thread_cpu_us();
  const double a_us = task_clock_us(a.stop(ha));
  spin_ms(5);
  const double b_us = task_clock_us(b.stop(hb));
  expect_task_clock(a_us, cpu_end - cpu_begin, 1e9);
  EXPECT_GE(b_us, a_us) << "b's interval contains a's";
}

}  // namespace
}  // namespace kiln
