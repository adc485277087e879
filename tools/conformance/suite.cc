// SPDX-License-Identifier: Apache-2.0
#include "suite.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "fixture.h"
#include "kernels.h"
#include "kiln/profiling/collector.h"
#include "kiln/sdk/support/sha256.hpp"

namespace kiln::conformance {
namespace {

// The file's SHA-256 in hex, or "" when it cannot be read (the report says "unreadable").
std::string sha256_of_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  sdk::Sha256 hash;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    hash.update(buffer, static_cast<size_t>(in.gcount()));
  }
  return sdk::Sha256::hex(hash.finish());
}

std::string attribute_text(const Any& v) {
  switch (v.type_code()) {
    case KILN_TYPE_NONE:
      return "";
    case KILN_TYPE_BOOL:
      return v.cast<bool>() ? "true" : "false";
    case KILN_TYPE_INT:
      return std::to_string(v.cast<int64_t>());
    case KILN_TYPE_FLOAT:
      return fmt::format("{}", v.cast<double>());
    default:
      return v.str();
  }
}

// The plugin whose manifest declares `provides` ("device:cuda", "collector:perf"): a loaded one
// if any, else the first considered (a failed or disabled one explains why it is missing).
std::optional<PluginStatus> plugin_providing(const Runtime& runtime, const std::string& provides) {
  std::optional<PluginStatus> found;
  for (const PluginStatus& s : runtime.plugins()) {
    if (std::find(s.provides.begin(), s.provides.end(), provides) == s.provides.end()) continue;
    if (!found || s.state == PluginStatus::State::kLoaded) found = s;
  }
  return found;
}

// Marks `t`, which no loaded component serves, as skipped (no plugin, or one that is disabled)
// or failed (its plugin failed to load), with the reason.
void mark_unavailable(Target& t, const char* none_found) {
  if (!t.plugin) {
    t.disposition = Target::Disposition::kSkip;
    t.reason = none_found;
    return;
  }
  t.disposition = t.plugin->state == PluginStatus::State::kFailed ? Target::Disposition::kFail
                                                                  : Target::Disposition::kSkip;
  t.reason = fmt::format("plugin {} is {}: {}", t.plugin->name, to_string(t.plugin->state),
                         t.plugin->reason);
}

void enumerates_devices_with_attributes(ConformanceTest& t) {
  const DeviceBackend& backend = *t.backend_;
  std::string why;
  const int32_t count = backend.device_count(&why);
  EXPECT_GE(count, 1);
  EXPECT_TRUE(why.empty()) << "why_none must be empty when there are devices: " << why;
  for (int32_t id = 0; id < count; ++id) {
    auto attrs = backend.attributes(id);
    ASSERT_FALSE(attrs.empty()) << "device " << id << " reports no attributes";
    bool has_name = false;
    for (const auto& [k, v] : attrs) has_name |= (k == "name" && !v.str().empty());
    EXPECT_TRUE(has_name) << "every device reports a non-empty 'name' attribute";
  }
  EXPECT_THROW(backend.attributes(count), Error) << "an id past the count is an error";
}

void allocates_aligned_memory(ConformanceTest& t) {
  const DeviceBackend& backend = *t.backend_;
  for (size_t alignment : {64u, 256u, 4096u}) {
    void* p = backend.alloc(t.device_.id, 1 << 20, alignment);
    ASSERT_NE(p, nullptr);
    // Device pointers may be handles (OpenCL's cl_mem); only host memory is checked.
    if (t.device_.type == kDLCPU) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u) << "alignment " << alignment;
    }
    backend.free(t.device_.id, p);
  }
  EXPECT_THROW(backend.alloc(backend.device_count() + 5, 64, 64), Error)
      << "allocating on a device id past the count is an error";
}

void copies_both_ways_and_on_device(ConformanceTest& t) {
  const DeviceBackend& backend = *t.backend_;
  constexpr size_t n = 1 << 16;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 7);
  void* a = backend.alloc(t.device_.id, n + 128, 64);
  void* b = backend.alloc(t.device_.id, n + 128, 64);
  backend.copy_to_device(t.device_.id, src.data(), a, 64, n);
  backend.copy_on_device(t.device_.id, a, 64, b, 128, n);
  backend.copy_to_host(t.device_.id, b, 128, back.data(), n);
  backend.synchronize(t.device_.id);
  EXPECT_EQ(src, back) << "host -> device (offset 64) -> device (offset 128) -> host";
  backend.free(t.device_.id, a);
  backend.free(t.device_.id, b);
}

void tensor_round_trip(ConformanceTest& t) {
  Tensor d = Tensor::empty({3, 5}, DataType::Float(32), t.device_, *t.context_);
  std::vector<float> host(15);
  std::iota(host.begin(), host.end(), 1.5f);
  d.copy_from(host.data(), host.size() * sizeof(float));
  Tensor h = d.to_host();
  auto span = h.host_span<float>();
  EXPECT_TRUE(std::equal(span.begin(), span.end(), host.begin()));
  Tensor d2 = d.to(t.device_, *t.context_);
  std::vector<float> back(15);
  d2.copy_to(back.data(), back.size() * sizeof(float));
  EXPECT_EQ(back, host);
}

void streams_order_work(ConformanceTest& t) {
  const DeviceBackend& backend = *t.backend_;
  if (!backend.has_streams()) GTEST_SKIP() << "no stream slots: work runs on the default stream";
  void* stream = backend.stream_create(t.device_.id);
  std::vector<int32_t> src(1024, 42), back(1024, 0);
  void* p = backend.alloc(t.device_.id, 4096, 64);
  backend.copy_to_device(t.device_.id, src.data(), p, 0, 4096, stream);
  backend.copy_to_host(t.device_.id, p, 0, back.data(), 4096, stream);
  backend.synchronize(t.device_.id, stream);
  EXPECT_EQ(src, back);
  backend.free(t.device_.id, p);
  backend.stream_destroy(t.device_.id, stream);
}

void timer_measures_elapsed_time(ConformanceTest& t) {
  const DeviceBackend& backend = *t.backend_;
  if (!backend.has_timer()) {
    GTEST_SKIP() << "no timer slots: the evaluator falls back to sync + wall clock";
  }
  void* timer = backend.timer_create(t.device_.id);
  backend.timer_start(timer);
  if (t.device_.type == kDLCPU) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  backend.timer_stop(timer);
  const int64_t ns = backend.timer_elapsed_ns(timer);
  EXPECT_GE(ns, 0);
  if (t.device_.type == kDLCPU) {
    EXPECT_GT(ns, 9'000'000);  // SPEC 1.5: a CPU timer around a 10 ms sleep reads > 9e6 ns
  }
  backend.timer_destroy(timer);
}

void loads_module_and_launches_kernel(ConformanceTest& t) {
  std::string why_not;
  const ModuleSpec* m = t.conformance_module(why_not);
  if (m == nullptr) GTEST_SKIP() << why_not;
  const DeviceBackend& backend = *t.backend_;
  LoadedKernel kernel(backend, t.device_.id, *m);

  constexpr int64_t n = 10000;
  Tensor a = Tensor::empty({n}, DataType::Float(32), t.device_, *t.context_);
  Tensor b = Tensor::empty({n}, DataType::Float(32), t.device_, *t.context_);
  Tensor out = Tensor::empty({n}, DataType::Float(32), t.device_, *t.context_);
  std::vector<float> ha(n), hb(n), hout(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i) * 0.5f;
    hb[i] = static_cast<float>(n - i);
  }
  a.copy_from(ha.data(), n * 4);
  b.copy_from(hb.data(), n * 4);
  launch_vector_add(backend, kernel, a, b, out, 2.0);
  backend.synchronize(t.device_.id);
  out.copy_to(hout.data(), n * 4);
  const std::string wrong = vector_add_mismatch(m->kernel, ha, hb, hout, 2.0);
  if (!wrong.empty()) FAIL() << wrong << " (module " << m->path << ", " << t.plugin_text() << ")";

  EXPECT_THROW(backend.module_get_kernel(kernel.module(), "no_such_kernel"), NotFoundError);
  KilnAny bad[1] = {Any(int64_t{3}).to_abi()};
  const uint32_t one[3] = {1, 1, 1};
  EXPECT_THROW(backend.launch(kernel.kernel(), bad, 1, one, one, 0), Error)
      << "a launch with the wrong arguments is an error";
}

void rejects_garbage_modules(ConformanceTest& t) {
  std::string why_not;
  const ModuleSpec* m = t.conformance_module(why_not);
  if (m == nullptr) GTEST_SKIP() << why_not;
  const DeviceBackend& backend = *t.backend_;
  const std::string garbage = "this is not device code";
  EXPECT_THROW(backend.module_load(t.device_.id, garbage.data(), garbage.size(), m->format, "{}"),
               Error)
      << "garbage bytes in format " << m->format;
  EXPECT_THROW(
      backend.module_load(t.device_.id, garbage.data(), garbage.size(), "no-such-format", "{}"),
      Error)
      << "an unknown format";
}

// ---- metric collectors (docs/plugin-abi.md §10.5), through the wrapper profiling uses ----

// Work for a measured call: a few milliseconds of arithmetic over 4 MiB of fresh pages, so that
// time and fault counters have something to count.
double busy_call() {
  std::vector<double> pages(1 << 19);
  double sum = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
  while (std::chrono::steady_clock::now() < until) {
    for (size_t i = 0; i < pages.size(); i += 512) sum += (pages[i] += 1.0);
  }
  return sum;
}

// `value` as a failure message shows it, with what its kind allows: "150 % (a percentage is
// 0-100)".
std::string metric_text(const profiling::MetricValue& value) {
  if (const auto* c = std::get_if<profiling::Count>(&value)) {
    return fmt::format("{} (a count is >= 0)", c->value);
  }
  if (const auto* d = std::get_if<profiling::Duration>(&value)) {
    return fmt::format("{} us (a duration is >= 0)", d->microseconds);
  }
  if (const auto* p = std::get_if<profiling::Percent>(&value)) {
    return fmt::format("{} % (a percentage is 0-100)", p->percent);
  }
  if (const auto* r = std::get_if<profiling::Ratio>(&value)) return fmt::format("{}", r->ratio);
  return std::get<std::string>(value);
}

// Checks every metric of one call: a non-empty name, and a value possible for its kind (the
// judgement kiln profile marks with "(!)") and finite.
void expect_valid_metrics(const profiling::MetricMap& metrics, const std::string& what) {
  EXPECT_FALSE(metrics.empty()) << what << ": the collector reported no metric for a host call";
  for (const auto& [name, value] : metrics) {
    EXPECT_FALSE(name.empty()) << what << ": a metric without a name";
    if (profiling::impossible_for_its_kind(value)) {
      ADD_FAILURE() << what << ": " << name << " = " << metric_text(value)
                    << " is impossible for its kind";
    }
    double number = 0;
    if (const auto* d = std::get_if<profiling::Duration>(&value)) number = d->microseconds;
    if (const auto* p = std::get_if<profiling::Percent>(&value)) number = p->percent;
    if (const auto* r = std::get_if<profiling::Ratio>(&value)) number = r->ratio;
    if (!std::isfinite(number)) {
      ADD_FAILURE() << what << ": " << name << " = " << metric_text(value) << " is not finite";
    }
  }
}

void reports_metrics_for_a_host_call(CollectorTest& t) {
  auto c = t.make();
  std::shared_ptr<void> handle = c->start(Device::cpu());
  if (!handle) GTEST_SKIP() << t.target_.name << " does not measure host (cpu) calls";
  volatile double sink = busy_call();
  (void)sink;
  expect_valid_metrics(c->stop(handle), "one call");
}

void reports_the_same_metrics_every_call(CollectorTest& t) {
  auto c = t.make();
  std::vector<std::string> first;
  for (int call = 0; call < 20; ++call) {
    std::shared_ptr<void> handle = c->start(Device::cpu());
    if (!handle) GTEST_SKIP() << t.target_.name << " does not measure host (cpu) calls";
    std::vector<std::string> names;
    for (const auto& [name, value] : c->stop(handle)) names.push_back(name);
    if (call == 0) {
      first = names;
    } else {
      ASSERT_EQ(names, first) << "call " << call << " reported other metrics than call 0";
    }
  }
}

void survives_init_and_teardown_cycles(CollectorTest& t) {
  // Each instance inits and tears down its own state, as each profiler run does.
  for (int cycle = 0; cycle < 3; ++cycle) {
    auto c = t.make();
    std::shared_ptr<void> handle = c->start(Device::cpu());
    if (handle) expect_valid_metrics(c->stop(handle), "cycle " + std::to_string(cycle));
  }
}

void declines_devices_it_does_not_measure(CollectorTest& t) {
  // A device type no backend serves: start must decline (a NULL handle) or fail with an error,
  // never crash; the profiler then reports nothing from this collector for that call.
  auto c = t.make();
  try {
    std::shared_ptr<void> handle = c->start(Device{127, 0});
    if (handle) expect_valid_metrics(c->stop(handle), "a device type no backend serves");
  } catch (const Error& e) {
    SUCCEED() << "refused with an error: " << e.what();
  }
}

struct CollectorTestCase {
  const char* name;
  CollectorTest::Body body;
};

// The order is the report's order.
constexpr CollectorTestCase kCollectorTests[] = {
    {"ReportsMetricsForAHostCall", reports_metrics_for_a_host_call},
    {"ReportsTheSameMetricsEveryCall", reports_the_same_metrics_every_call},
    {"SurvivesInitAndTeardownCycles", survives_init_and_teardown_cycles},
    {"DeclinesDevicesItDoesNotMeasure", declines_devices_it_does_not_measure},
};

// ---- device backends ----

struct TestCase {
  const char* name;
  ConformanceTest::Body body;
};

// The order is the report's order.
constexpr TestCase kTests[] = {
    {"EnumeratesDevicesWithAttributes", enumerates_devices_with_attributes},
    {"AllocatesAlignedMemory", allocates_aligned_memory},
    {"CopiesBothWaysAndOnDevice", copies_both_ways_and_on_device},
    {"TensorRoundTrip", tensor_round_trip},
    {"StreamsOrderWork", streams_order_work},
    {"TimerMeasuresElapsedTime", timer_measures_elapsed_time},
    {"LoadsModuleAndLaunchesKernel", loads_module_and_launches_kernel},
    {"RejectsGarbageModules", rejects_garbage_modules},
    // The deeper tests (depth_tests.cc).
    {"ComputesCorrectResults", computes_correct_results},
    {"TimerMeasuresDeviceCopies", timer_measures_device_copies},
    {"TimerMatchesAKernelOfKnownDuration", timer_matches_a_kernel_of_known_duration},
    {"RefusesAllocationsOverTheLimit", refuses_allocations_over_the_limit},
    {"ReturnsFreedMemory", returns_freed_memory},
    {"WorksFromFourThreads", works_from_four_threads},
};

// The tests that launch the conformance kernel and skip without --module. WorksFromFourThreads
// also uses it, but runs without it (on device-to-device copies).
constexpr const char* kModuleTests[] = {"LoadsModuleAndLaunchesKernel", "RejectsGarbageModules",
                                        "ComputesCorrectResults"};

// The module formats of Kiln's own device plugins and the example conformance kernel each
// ships (installed under <prefix>/share/kiln/examples/kernels/, built under
// <build>/examples/kernels/), for the hint of what to add.
struct KilnExample {
  const char* device_type;
  const char* format;
  const char* file;  // relative to the examples/kernels folder
};
constexpr KilnExample kKilnExamples[] = {
    {"cpu", "so", "libvector_add.so"},
    {"opencl", "opencl_c", "opencl/vector_add.cl"},
    {"cuda", "ptx", "cuda/vector_add.ptx"},
    {"rocm", "hsaco", "rocm/vector_add.hsaco"},
};

// Kiln's example for `t`, when Kiln's own plugin of that name serves it.
const KilnExample* kiln_example(const Target& t) {
  if (!t.plugin || t.plugin->name != t.name) return nullptr;
  for (const KilnExample& e : kKilnExamples) {
    if (t.name == e.device_type) return &e;
  }
  return nullptr;
}

}  // namespace

std::optional<MissingInput> missing_input(const Target& target, const std::string& test) {
  if (target.kind != Target::Kind::kDevice || target.disposition != Target::Disposition::kRun ||
      !target.backend) {
    return std::nullopt;
  }
  const DeviceBackend& backend = *target.backend;
  if (!backend.has_modules()) return std::nullopt;
  const bool module_test =
      std::find_if(std::begin(kModuleTests), std::end(kModuleTests),
                   [&](const char* name) { return test == name; }) != std::end(kModuleTests);
  if (module_test && !target.module) {
    MissingInput in;
    in.flag = "--module";
    const KilnExample* example = kiln_example(target);
    in.add = fmt::format("--module {}:PATH:{}:KERNEL", target.name,
                         example != nullptr ? example->format : "FORMAT");
    in.what = "a module whose KERNEL computes out[i] = a[i] + alpha * b[i] for float32 vectors";
    if (example != nullptr) {
      in.what += fmt::format(
          "; Kiln's example is examples/kernels/{} (in the build folder, or under "
          "<prefix>/share/kiln/ when installed), kernel vector_add",
          example->file);
    }
    return in;
  }
  if (test == "TimerMatchesAKernelOfKnownDuration" && backend.has_timer() &&
      !target.timing_kernel) {
    MissingInput in;
    in.flag = "--timing-kernel";
    in.add = fmt::format("--timing-kernel {}:PATH:FORMAT:KERNEL", target.name);
    in.what =
        "a kernel KERNEL(out, ns) that busy-waits ns nanoseconds on the device's clock "
        "(TimerMeasuresDeviceCopies judges the timer without it)";
    in.required = false;
    return in;
  }
  return std::nullopt;
}

std::string Target::suite() const {
  return (kind == Kind::kDevice ? "DeviceConformance/" : "CollectorConformance/") + name;
}

ModuleSpec parse_module_spec(const std::string& spec, const std::string& flag) {
  // TYPE is everything before the first ':', FORMAT and KERNEL the last two fields, PATH the
  // rest, so that a path with ':' in it still parses.
  const size_t first = spec.find(':');
  const size_t last = spec.rfind(':');
  const size_t second_last =
      last == std::string::npos || last == 0 ? std::string::npos : spec.rfind(':', last - 1);
  if (first == std::string::npos || second_last == std::string::npos || second_last <= first) {
    throw ValueError(fmt::format(
        "{} '{}': expected TYPE:PATH:FORMAT:KERNEL (e.g. cpu:libvector_add.so:so:vector_add)", flag,
        spec));
  }
  ModuleSpec m{spec.substr(0, first), spec.substr(first + 1, second_last - first - 1),
               spec.substr(second_last + 1, last - second_last - 1), spec.substr(last + 1)};
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string&>{"TYPE", m.device_type},
        {"PATH", m.path},
        {"FORMAT", m.format},
        {"KERNEL", m.kernel}}) {
    if (value.empty()) {
      throw ValueError(fmt::format("{} '{}': {} is empty (expected TYPE:PATH:FORMAT:KERNEL)", flag,
                                   spec, field));
    }
  }
  return m;
}

std::vector<Target> resolve_targets(const Runtime& runtime,
                                    const std::vector<std::string>& device_types,
                                    const std::vector<ModuleSpec>& modules,
                                    const ResolveOptions& options) {
  std::vector<Target> targets;
  for (const std::string& type : device_types) {
    Target t;
    t.name = type;
    for (const ModuleSpec& m : modules) {
      if (m.device_type == type) {
        t.module = m;
        t.module_sha256 = sha256_of_file(m.path);
        break;
      }
    }
    t.thread_deadline_s = options.thread_deadline_s;
    for (const ModuleSpec& m : options.timing_kernels) {
      if (m.device_type == type) {
        t.timing_kernel = m;
        t.timing_kernel_sha256 = sha256_of_file(m.path);
        break;
      }
    }
    // The plugin meant to serve the type, loaded or not (a failed one explains the type).
    t.plugin = plugin_providing(runtime, "device:" + type);
    const std::optional<int32_t> code = runtime.device_types().find(type);
    t.backend = code ? runtime.find_backend(*code) : Ref<DeviceBackend>();
    if (t.backend) {
      // The loaded plugin that serves the type (the manifest may not say it provides it).
      for (const PluginStatus& s : runtime.plugins()) {
        if (s.name == t.backend->plugin_name() && s.state == PluginStatus::State::kLoaded) {
          t.plugin = s;
        }
      }
    }
    if (t.plugin) t.library_sha256 = sha256_of_file(t.plugin->library);
    if (!t.backend) {
      mark_unavailable(t, "no plugin serving it was found in the search paths");
      targets.push_back(std::move(t));
      continue;
    }
    try {
      t.device_count = t.backend->device_count(&t.why_none);
    } catch (const std::exception& e) {
      t.disposition = Target::Disposition::kFail;
      t.reason = std::string("device_count failed: ") + e.what();
      targets.push_back(std::move(t));
      continue;
    }
    if (t.device_count == 0) {
      t.disposition =
          options.require_device ? Target::Disposition::kFail : Target::Disposition::kSkip;
      t.reason =
          "has no devices: " + (t.why_none.empty() ? "the plugin gave no reason" : t.why_none);
    }
    for (int32_t id = 0; id < t.device_count; ++id) {
      std::vector<std::pair<std::string, std::string>> attrs;
      try {
        for (const auto& [k, v] : t.backend->attributes(id))
          attrs.emplace_back(k, attribute_text(v));
      } catch (const std::exception& e) {
        attrs.emplace_back("error", e.what());  // EnumeratesDevicesWithAttributes fails on it
      }
      t.devices.push_back(std::move(attrs));
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

std::vector<Target> resolve_broken_manifests(const Runtime& runtime) {
  std::vector<Target> targets;
  for (const PluginStatus& s : runtime.plugins()) {
    if (s.state != PluginStatus::State::kFailed || !s.provides.empty()) continue;
    Target t;
    // A GoogleTest suite name: letters, digits and underscores.
    t.name = "manifest_" + s.name;
    for (char& c : t.name) {
      if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
    }
    t.plugin = s;
    t.disposition = Target::Disposition::kFail;
    t.reason = fmt::format("plugin {} is failed: {}", s.name, s.reason);
    targets.push_back(std::move(t));
  }
  return targets;
}

std::vector<Target> resolve_collectors(const Runtime& runtime,
                                       const std::vector<std::string>& names) {
  std::vector<Target> targets;
  const std::vector<std::string> loaded = runtime.collector_names();
  for (const std::string& name : names) {
    Target t;
    t.kind = Target::Kind::kCollector;
    t.name = name;
    t.plugin = plugin_providing(runtime, "collector:" + name);
    if (t.plugin) t.library_sha256 = sha256_of_file(t.plugin->library);
    if (std::find(loaded.begin(), loaded.end(), name) == loaded.end()) {
      mark_unavailable(t, "no plugin providing it was found in the search paths");
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

void register_tests(const Runtime& runtime, const std::vector<Target>& targets) {
  // No value parameter: the target is in the suite name already, and ctest would show it again
  // as "# GetParam() = ...".
  for (const Target& target : targets) {
    const std::string suite = target.suite();
    if (target.kind == Target::Kind::kCollector) {
      for (const CollectorTestCase& test : kCollectorTests) {
        CollectorTest::Body body = test.body;
        ::testing::RegisterTest(suite.c_str(), test.name, nullptr, nullptr, __FILE__, __LINE__,
                                [&runtime, &target, body]() -> ::testing::Test* {
                                  return new CollectorTest(runtime, target, body);
                                });
      }
      continue;
    }
    for (const TestCase& test : kTests) {
      ConformanceTest::Body body = test.body;
      ::testing::RegisterTest(suite.c_str(), test.name, nullptr, nullptr, __FILE__, __LINE__,
                              [&runtime, &target, body]() -> ::testing::Test* {
                                return new ConformanceTest(runtime, target, body);
                              });
    }
  }
}

const char* to_string(TestOutcome::Status status) {
  switch (status) {
    case TestOutcome::Status::kPassed:
      return "pass";
    case TestOutcome::Status::kFailed:
      return "fail";
    case TestOutcome::Status::kSkipped:
      return "skip";
    case TestOutcome::Status::kCrashed:
      return "crash";
  }
  return "?";
}

std::optional<TestOutcome::Status> status_from_string(const std::string& text) {
  for (TestOutcome::Status s : {TestOutcome::Status::kPassed, TestOutcome::Status::kFailed,
                                TestOutcome::Status::kSkipped, TestOutcome::Status::kCrashed}) {
    if (text == to_string(s)) return s;
  }
  return std::nullopt;
}

TestOutcome outcome_of(const ::testing::TestInfo& info) {
  const ::testing::TestResult& result = *info.result();
  TestOutcome o;
  o.suite = info.test_suite_name();
  o.name = info.name();
  o.target = o.suite.substr(o.suite.find('/') + 1);
  o.elapsed_ms = result.elapsed_time();
  o.status = result.Failed()    ? TestOutcome::Status::kFailed
             : result.Skipped() ? TestOutcome::Status::kSkipped
                                : TestOutcome::Status::kPassed;
  for (int k = 0; k < result.total_part_count(); ++k) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(k);
    if (part.type() == ::testing::TestPartResult::kSuccess) continue;
    if (!o.message.empty()) o.message += "\n";
    if (part.failed() && part.file_name() != nullptr) {
      o.message +=
          fmt::format("{}:{}: ", std::filesystem::path(part.file_name()).filename().string(),
                      part.line_number());
    }
    o.message += part.message();
  }
  return o;
}

std::vector<TestOutcome> collect_outcomes() {
  std::vector<TestOutcome> out;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(j);
      if (info.should_run()) out.push_back(outcome_of(info));
    }
  }
  return out;
}

}  // namespace kiln::conformance
