// SPDX-License-Identifier: Apache-2.0
// The time evaluator against the SPEC.md §1.3 checklist, BenchmarkResult statistics and
// printed forms, JSON, validation, timers and the noise-based stopping rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

void spin_for(std::chrono::nanoseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// A function that counts its calls.
struct Counter {
  std::shared_ptr<std::atomic<int64_t>> calls = std::make_shared<std::atomic<int64_t>>(0);
  Function f(std::chrono::nanoseconds work = std::chrono::nanoseconds(0)) const {
    auto c = calls;
    return Function::from_typed("counted", [c, work]() {
      c->fetch_add(1);
      if (work.count() > 0) spin_for(work);
    });
  }
};

// Options for a runtime that sees only the stub plugin `name` (tests/plugins).
RuntimeOptions stub_only(const std::string& name) {
  RuntimeOptions ro;
  ro.search_paths = {std::string(KILN_STUB_PLUGIN_DIR) + "/" + name};
  ro.read_environment = false;
  ro.search_install_prefix = false;
  return ro;
}

TimeEvaluatorOptions opts(int32_t number, int32_t repeat, int32_t min_repeat_ms = 0) {
  TimeEvaluatorOptions o;
  o.number = number;
  o.repeat = repeat;
  o.min_repeat_ms = min_repeat_ms;
  return o;
}

TEST(Evaluator, OneWarmupPlusNumberTimesRepeatCalls) {
  Counter c;
  TimeEvaluator e(c.f(), Device::cpu(), opts(1, 1));
  BenchmarkResult r = e({});
  EXPECT_EQ(c.calls->load(), 2) << "warm-up + 1";  // SPEC checklist 1
  ASSERT_EQ(r.results().size(), 1u);
  Counter c2;
  TimeEvaluator e2(c2.f(), Device::cpu(), opts(7, 3));
  BenchmarkResult r2 = e2({});
  EXPECT_EQ(c2.calls->load(), 1 + 7 * 3);
  EXPECT_EQ(r2.results().size(), 3u);  // checklist 3
  EXPECT_EQ(r2.timer, "device") << "the cpu plugin has timer slots";
}

TEST(Evaluator, GrowthFollowsTheGoldenRatioRuleExactly) {
  Counter c;
  TimeEvaluatorOptions o = opts(1, 2, 20);
  o.keep_raw_samples = true;
  TimeEvaluator e(c.f(std::chrono::microseconds(200)), Device::cpu(), o);
  BenchmarkResult r = e({});
  ASSERT_GE(r.raw_samples.size(), 2u);
  int64_t timed_calls = 0;
  for (size_t k = 0; k < r.raw_samples.size(); ++k) {
    timed_calls += r.raw_samples[k].calls;
    if (k + 1 < r.raw_samples.size() && r.raw_samples[k].seconds * 1e3 < 20) {
      const double ms = r.raw_samples[k].seconds * 1e3;
      const double n = static_cast<double>(r.raw_samples[k].calls);
      const auto expected = static_cast<int64_t>(std::max(20 / (ms / n) + 1, n * 1.618));
      EXPECT_NEAR(r.raw_samples[k + 1].calls, expected, 1) << "batch " << k + 1;
    }
  }
  EXPECT_EQ(c.calls->load(), 1 + timed_calls) << "earlier short batches are called too";
  EXPECT_GT(c.calls->load(), 12);  // checklist 2, at a smaller scale
  // Only the final batch of a repeat counts; it lasted at least min_repeat_ms.
  for (size_t i = 0; i < r.results().size(); ++i) {
    EXPECT_GE(r.results()[i] * static_cast<double>(r.numbers[i]) * 1e3, 20.0);
  }
}

TEST(Evaluator, GrownNumberPersistsAcrossCalls) {
  Counter c;
  TimeEvaluatorOptions o = opts(1, 1, 10);
  o.keep_raw_samples = true;
  TimeEvaluator e(c.f(std::chrono::microseconds(100)), Device::cpu(), o);
  e({});
  const int32_t grown = e.number();
  EXPECT_GT(grown, 1);
  BenchmarkResult second = e({});
  ASSERT_FALSE(second.raw_samples.empty());
  EXPECT_GE(second.raw_samples.front().calls, grown);  // checklist 9
}

TEST(Evaluator, PreprocRunsOncePerRepeatWithTheSameArguments) {
  auto seen = std::make_shared<std::vector<int64_t>>();
  registry::set("testing.evaluator_preproc",
                Function::from_typed("testing.evaluator_preproc",
                                     [seen](int64_t a, int64_t b) { seen->push_back(a + b); }),
                true);
  Function f = Function::from_typed("two_args", [](int64_t, int64_t) {});
  TimeEvaluatorOptions o = opts(5, 4);
  o.f_preproc = "testing.evaluator_preproc";
  TimeEvaluator e(f, Device::cpu(), o);
  e({Any(2), Any(40)});
  EXPECT_EQ(*seen, std::vector<int64_t>(4, 42));  // checklist 4
  o.f_preproc = "testing.no_such_preproc";
  EXPECT_THROW(TimeEvaluator(f, Device::cpu(), o), NotFoundError);
}

TEST(Evaluator, CooldownSleepsAfterEveryNthRepeat) {
  // on_repeat runs after each repeat's cooldown, so the gap before each on_repeat call holds
  // that repeat (an empty function) and its sleep, if any. Lower bounds show each sleep
  // happened; a gap without one must be shorter than one sleep, which it is unless a sleep
  // was added there (a structural check, not a speed bound: the sleep is 400 ms).
  using Clock = std::chrono::steady_clock;
  constexpr double kSleep = 0.400;
  const auto gaps_of = [](TimeEvaluatorOptions o) {
    std::vector<Clock::time_point> marks{Clock::now()};
    o.on_repeat = [&](int32_t, int32_t) { marks.push_back(Clock::now()); };
    Counter c;
    TimeEvaluator(c.f(), Device::cpu(), o)({});
    std::vector<double> gaps;
    for (size_t i = 1; i < marks.size(); ++i) {
      gaps.push_back(std::chrono::duration<double>(marks[i] - marks[i - 1]).count());
    }
    return gaps;
  };
  TimeEvaluatorOptions o = opts(1, 2);
  o.cooldown_interval_ms = static_cast<int32_t>(kSleep * 1000);
  std::vector<double> gaps = gaps_of(o);  // checklist 6
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_GE(gaps[0], kSleep) << "sleeps after repeat 0";
  EXPECT_GE(gaps[1], kSleep) << "and after repeat 1";
  o = opts(1, 4);
  o.cooldown_interval_ms = static_cast<int32_t>(kSleep * 1000);
  o.repeats_to_cooldown = 2;
  gaps = gaps_of(o);
  ASSERT_EQ(gaps.size(), 4u);
  EXPECT_GE(gaps[0], kSleep) << "sleeps after repeat 0";
  EXPECT_LT(gaps[1], kSleep) << "not after repeat 1";
  EXPECT_GE(gaps[2], kSleep) << "sleeps after repeat 2";
  EXPECT_LT(gaps[3], kSleep) << "not after repeat 3";
}

TEST(Evaluator, ZeroTimeReadingsStopAfterTheLimit) {
  Runtime rt(stub_only("stub_zero_timer"));
  Counter c;
  TimeEvaluatorOptions o = opts(3, 1, 10);
  o.limit_zero_time_iterations = 7;
  TimeEvaluator e(c.f(), Device{112, 0}, o, rt);
  BenchmarkResult r = e({});
  EXPECT_EQ(c.calls->load(), 1 + 7 * 3) << "number does not grow on a 0 ns reading";  // 7
  EXPECT_EQ(r.results(), std::vector<double>{0.0});
}

TEST(Evaluator, CacheFlushBytesRunsAndDoesNotCountInTheTime) {
  Counter c;
  TimeEvaluatorOptions o = opts(2, 3);
  o.cache_flush_bytes = 8 << 20;
  TimeEvaluator e(c.f(), Device::cpu(), o);
  BenchmarkResult r = e({});
  EXPECT_EQ(c.calls->load(), 1 + 6);
  // Copying 8 MiB takes milliseconds, far longer than two empty calls: were it timed, every
  // repeat would read >= ~0.5 ms per call. The fastest repeat shows it is not (the slowest
  // may be preempted on a loaded machine).
  EXPECT_LT(r.min(), 2.5e-4);
}

TEST(Evaluator, DeviceWithoutTimerFallsBackToWallClock) {
  Runtime rt(stub_only("stub_ok"));
  Counter c;
  TimeEvaluator e(c.f(std::chrono::microseconds(50)), Device{100, 0}, opts(4, 2), rt);
  BenchmarkResult r = e({});
  EXPECT_EQ(r.timer, "wall");
  EXPECT_GT(r.min(), 40e-6);
}

TEST(Evaluator, ValidationNamesTheParameter) {
  Function f = Function::from_typed("f", [] {});
  auto expect_bad = [&](TimeEvaluatorOptions o, const char* parameter) {
    try {
      TimeEvaluator(f, Device::cpu(), o);
      FAIL() << parameter;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(parameter));
    }
  };
  expect_bad(opts(0, 1), "number");
  expect_bad(opts(1, -1), "repeat");
  TimeEvaluatorOptions o = opts(1, 1);
  o.repeats_to_cooldown = 0;
  expect_bad(o, "repeats_to_cooldown");
  o = opts(1, 1);
  o.cache_flush_bytes = -4;
  expect_bad(o, "cache_flush_bytes");
  // repeat == 0 stays allowed and returns an empty result, as in the reference.
  BenchmarkResult empty = TimeEvaluator(f, Device::cpu(), opts(1, 0))({});
  EXPECT_TRUE(empty.results().empty());
  EXPECT_TRUE(std::isnan(empty.mean()));
}

TEST(Evaluator, NoiseRuleStopsAtTheTarget) {
  Counter c;
  TimeEvaluatorOptions o = opts(20, 1);
  o.noise.enabled = true;
  // A target steady measurements meet by min_repeats; a loaded machine may need more repeats
  // or end on the plateau, never on the caps.
  o.noise.target_rse = 0.5;
  o.noise.min_repeats = 5;
  o.noise.timeout_s = 30;
  BenchmarkResult r = TimeEvaluator(c.f(std::chrono::microseconds(50)), Device::cpu(), o)({});
  EXPECT_THAT(r.stop_reason, ::testing::AnyOf("target", "plateau"));
  EXPECT_GE(r.results().size(), 5u);
}

TEST(Evaluator, NoiseRuleStopsOnTheCapsAndTheTimeout) {
  // Every reading 0 ns: the RSE is undefined, so only the repeat cap ends the loop.
  Runtime rt(stub_only("stub_zero_timer"));
  Counter c;
  TimeEvaluatorOptions o = opts(1, 1);
  o.noise.enabled = true;
  o.noise.min_repeats = 2;
  o.noise.max_repeats = 12;
  BenchmarkResult capped = TimeEvaluator(c.f(), Device{112, 0}, o, rt)({});
  EXPECT_EQ(capped.stop_reason, "max_repeats");
  EXPECT_EQ(capped.results().size(), 12u);

  o.noise.max_repeats = 1000;
  o.noise.timeout_s = 0.001;
  BenchmarkResult timed_out =
      TimeEvaluator(c.f(std::chrono::milliseconds(2)), Device::cpu(), o)({});
  EXPECT_EQ(timed_out.stop_reason, "timeout");
  EXPECT_EQ(timed_out.results().size(), 1u);
}

TEST(Evaluator, ErrorsInTheFunctionPropagateWithTheirType) {
  Function f = Function::from_typed("fails", []() { throw ValueError("boom"); });
  EXPECT_THROW(TimeEvaluator(f, Device::cpu(), opts(1, 1))({}), ValueError);
}

TEST(Evaluator, ModuleTimeEvaluatorOnAKernel) {
  Module m = load_module(std::string(KILN_EXAMPLE_KERNEL_DIR) + "/libcalls.so");
  TimeEvaluator e = time_evaluator(m, "add3", Device::cpu(), 100, 3);
  BenchmarkResult r = e.call(1, 2, 3);
  EXPECT_EQ(r.results().size(), 3u);
  // No upper bound on the time: speed belongs in bench/, and a loaded CI machine (or a
  // sanitizer build) can be arbitrarily slow.
  for (double t : r.results()) EXPECT_GT(t, 0);
  EXPECT_EQ(r.numbers, std::vector<int64_t>(3, 100)) << "no growth without min_repeat_ms";
  EXPECT_THROW(time_evaluator(m, "missing", Device::cpu()), NotFoundError);
}

TEST(BenchmarkResult, StatisticsMatchNumpy) {
  BenchmarkResult r({1, 2, 2, 5});
  EXPECT_DOUBLE_EQ(r.mean(), 2.5);
  EXPECT_DOUBLE_EQ(r.median(), 2.0);
  EXPECT_DOUBLE_EQ(r.min(), 1);
  EXPECT_DOUBLE_EQ(r.max(), 5);
  EXPECT_DOUBLE_EQ(r.std(), 1.5);
  EXPECT_DOUBLE_EQ(BenchmarkResult({3, 1, 2}).median(), 2);
}

TEST(BenchmarkResult, PrintedFormsMatchTheReference) {
  BenchmarkResult r({0.001, 0.002, 0.002, 0.005});
  EXPECT_EQ(r.to_string(),
            "Execution time summary:\n"
            " mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)  \n"
            "   2.5000       2.0000       5.0000       1.0000       1.5000                  ");
  EXPECT_EQ(r.repr(),
            "BenchmarkResult(min=0.001, mean=0.0025, median=0.002, max=0.005, std=0.0015, "
            "results=(0.001, 0.002, 0.002, 0.005))");
  EXPECT_EQ(BenchmarkResult({1e-5}).repr(),
            "BenchmarkResult(min=1e-05, mean=1e-05, median=1e-05, max=1e-05, std=0.0, "
            "results=(1e-05,))");
}

TEST(BenchmarkResult, GoogleBenchmarkJsonRoundTrip) {
  BenchmarkResult r({1e-6, 2e-6, 4e-6});
  r.name = "vector_add";
  r.numbers = {10, 10, 16};
  r.timer = "device";
  const std::string text = r.to_json();
  auto doc = nlohmann::json::parse(text);
  ASSERT_TRUE(doc.contains("context"));
  const auto& b = doc["benchmarks"];
  ASSERT_EQ(b.size(), 7u) << "3 repeats + mean, median, stddev, cv";
  EXPECT_EQ(b[0]["run_type"], "iteration");
  EXPECT_EQ(b[0]["time_unit"], "ns");
  EXPECT_DOUBLE_EQ(b[2]["real_time"].get<double>(), 4000);
  EXPECT_EQ(b[2]["iterations"], 16);
  EXPECT_EQ(b[3]["aggregate_name"], "mean");
  EXPECT_EQ(b[4]["aggregate_name"], "median");
  EXPECT_EQ(b[5]["aggregate_name"], "stddev");
  BenchmarkResult back = BenchmarkResult::from_json(text);
  ASSERT_EQ(back.results().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(back.results()[i], r.results()[i], 1e-15);
  EXPECT_EQ(back.timer, "device");
  EXPECT_EQ(back.name, "vector_add");
  EXPECT_THROW(BenchmarkResult::from_json("{\"x\": 1}"), ValueError);
  EXPECT_THROW(BenchmarkResult::from_json("not json"), ValueError);
}

TEST(EvaluatorConfig, NormalizationAndCacheFlushMapping) {
  EvaluatorConfig d = EvaluatorConfig::normalized(std::nullopt);
  EXPECT_EQ(d.number, 3);
  EXPECT_EQ(d.repeat, 1);
  EXPECT_EQ(d.min_repeat_ms, 100);
  EXPECT_FALSE(d.enable_cpu_cache_flush);
  EXPECT_EQ(d.to_options().f_preproc, "");
  EvaluatorConfig flush{5, 2, 0, true};
  EXPECT_EQ(EvaluatorConfig::normalized(flush).to_options().f_preproc,
            "cache_flush_cpu_non_first_arg");
}

TEST(CacheFlush, FlushesEveryTensorButTheFirst) {
  Function flush = registry::require("cache_flush_cpu_non_first_arg");
  Tensor a = Tensor::empty({1024}, DataType::Float(32));
  Tensor b = Tensor::empty({1 << 16}, DataType::Float(32));
  for (float& x : b.host_span<float>()) x = 1.0f;
  flush(a, b, b);
  EXPECT_EQ(b.host_span<float>()[100], 1.0f) << "flushing keeps the data";
  EXPECT_THROW(flush(a, 3), TypeError);
  flush(42);  // the first argument is never looked at
}

}  // namespace
}  // namespace kiln
