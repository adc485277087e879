// SPDX-License-Identifier: Apache-2.0
// Profiler (SPEC.md §3.2) and profile_function (§3.9).
#include "kiln/profiling/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "eval/timer.h"
#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/module.h"

namespace kiln::profiling {
namespace {

using Clock = std::chrono::steady_clock;

// The threads the cpu backend of `context` runs kernels on and where that count came from (its
// "threads" and "threads_source" attributes), else the hardware's.
std::pair<int64_t, std::string> runtime_threads(const DeviceContext& context) {
  std::pair<int64_t, std::string> out{static_cast<int64_t>(std::thread::hardware_concurrency()),
                                      "the hardware (no cpu backend reports its threads)"};
  if (auto cpu = context.find_backend(kDLCPU)) {
    try {
      for (const auto& [key, value] : cpu->attributes(0)) {
        if (key == "threads" && value.type_code() == KILN_TYPE_INT) {
          out.first = value.cast<int64_t>();
          out.second = "the " + cpu->plugin_name() + " plugin";
        }
        if (key == "threads_source" && value.type_code() == KILN_TYPE_STRING) {
          out.second = value.cast<std::string>();
        }
      }
    } catch (const Error&) {
      // The hardware count stands.
    }
  }
  return out;
}

}  // namespace

struct Profiler::Impl {
  // First, so that it goes last: the runtime stays while the collectors are released.
  std::shared_ptr<const DeviceContext> context;
  struct Frame {
    Device device;
    std::string name;
    // The open call this one runs inside ("main" for a VM's kernel), none for a top-level call
    // (the device totals do not count as enclosing calls).
    std::optional<std::string> parent;
    std::unique_ptr<eval::Timer> timer;
    double start_us = 0;
    MetricMap metrics;
    std::vector<std::pair<MetricCollector*, std::shared_ptr<void>>> states;
  };
  struct Done {
    Device device;
    std::string name;
    std::optional<std::string> parent;
    int64_t elapsed_ns;
    double start_us;
    MetricMap metrics;
  };

  std::vector<Device> devices;
  std::vector<std::shared_ptr<MetricCollector>> collectors;
  MetricMap configuration;
  std::vector<Frame> stack;
  std::vector<Done> done;
  bool running = false;
  Clock::time_point origin;
};

Profiler::Profiler(std::vector<Device> devices,
                   std::vector<std::shared_ptr<MetricCollector>> collectors,
                   MetricMap configuration, const DeviceContext& context)
    : impl_(std::make_unique<Impl>()) {
  impl_->context = context.retain();
  for (const Device& d : devices) context.backend(d.type);  // fail early
  for (const auto& c : collectors) {
    if (!c) throw ValueError("Profiler: a collector is null");
    c->init(devices);
  }
  impl_->devices = std::move(devices);
  impl_->collectors = std::move(collectors);
  impl_->configuration = std::move(configuration);
  const auto [threads, source] = runtime_threads(context);
  impl_->configuration["Number of threads"] = Count{threads};
  impl_->configuration["Threads from"] = source;
}

Profiler::~Profiler() = default;

bool Profiler::running() const { return impl_->running; }

void Profiler::start() {
  if (impl_->running) throw RuntimeError("Profiler::start: already running");
  impl_->running = true;
  impl_->done.clear();
  impl_->origin = Clock::now();
  for (const Device& d : impl_->devices) start_call("Total", d);
}

void Profiler::start_call(std::string name, Device device, MetricMap extra) {
  Impl::Frame frame;
  frame.device = device;
  frame.name = std::move(name);
  frame.metrics = std::move(extra);
  // While running, the first frames are the device totals, which enclose every call.
  const size_t totals = impl_->running ? impl_->devices.size() : 0;
  if (impl_->stack.size() > totals) frame.parent = impl_->stack.back().name;
  for (const auto& c : impl_->collectors) {
    if (auto state = c->start(device)) frame.states.emplace_back(c.get(), std::move(state));
  }
  frame.start_us = std::chrono::duration<double, std::micro>(Clock::now() - impl_->origin).count();
  frame.timer = std::make_unique<eval::Timer>(impl_->context->backend(device.type), device.id);
  frame.timer->start();
  impl_->stack.push_back(std::move(frame));
}

void Profiler::stop_call(MetricMap extra) {
  if (impl_->stack.empty()) throw RuntimeError("Profiler::stop_call: no call is open");
  Impl::Frame frame = std::move(impl_->stack.back());
  impl_->stack.pop_back();
  frame.timer->stop();
  const int64_t ns = frame.timer->elapsed_ns();
  for (auto& [key, value] : extra) frame.metrics[key] = std::move(value);
  for (auto& [collector, state] : frame.states) {
    for (auto& [key, value] : collector->stop(state)) frame.metrics[key] = std::move(value);
  }
  impl_->done.push_back({frame.device, std::move(frame.name), std::move(frame.parent), ns,
                         frame.start_us, std::move(frame.metrics)});
}

void Profiler::stop() {
  if (!impl_->running) throw RuntimeError("Profiler::stop: not running");
  for (size_t i = 0; i < impl_->devices.size(); ++i) stop_call();
  impl_->running = false;
}

Report Profiler::report() const {
  if (impl_->running) throw RuntimeError("Profiler::report: stop() the profiler first");
  Report report;
  std::vector<MetricMap> rows;
  for (const auto& d : impl_->done) {
    MetricMap row;
    row["Duration (us)"] = Duration{static_cast<double>(d.elapsed_ns) / 1e3};
    row["Count"] = Count{1};
    row["Name"] = d.name;
    row["Device"] = device_report_name(d.device, impl_->context->device_types());
    row["Start (us)"] = Duration{d.start_us};
    if (d.parent) row[std::string(kNestedInMetric)] = *d.parent;
    for (const auto& [key, value] : d.metrics) row[key] = value;  // on top, as the reference
    rows.push_back(std::move(row));
  }
  // The last rows are the device totals, closed last.
  const size_t totals = std::min(impl_->devices.size(), rows.size());
  double overall = 0;
  for (size_t i = rows.size() - totals; i < rows.size(); ++i) {
    const MetricMap& row = rows[i];
    if (auto* d = std::get_if<Duration>(&row.at("Duration (us)"))) {
      overall = std::max(overall, d->microseconds);
    }
    report.device_metrics[std::get<std::string>(row.at("Device"))] = row;
  }
  rows.resize(rows.size() - totals);
  for (MetricMap& row : rows) {
    const auto* d = std::get_if<Duration>(&row.at("Duration (us)"));
    row["Percent"] = Percent{d != nullptr && overall > 0 ? d->microseconds / overall * 100 : 0};
  }
  report.calls = std::move(rows);
  report.configuration = impl_->configuration;
  return report;
}

std::function<MetricMap(const std::vector<Any>& args)> profile_function(
    const Module& module, Device device, std::vector<std::shared_ptr<MetricCollector>> collectors,
    const std::string& func_name, int32_t warmup_iters) {
  if (module.kind() == "rpc") {
    throw RuntimeError("Profiling a module over RPC is not yet supported");  // SPEC.md §3.9
  }
  const std::string name = func_name.empty() ? module.entry_name() : func_name;
  if (warmup_iters < 0) throw ValueError("profile_function: warmup_iters must be >= 0");
  if (name.empty() || !module.has_function(name)) {
    throw NotFoundError(fmt::format("There is no function called \"{}\" in the module", name));
  }
  Function f = module.get_function(name);
  return [f, device, collectors, warmup_iters](const std::vector<Any>& args) {
    for (int32_t i = 0; i < warmup_iters; ++i) f.call_packed(args);
    std::vector<std::pair<MetricCollector*, std::shared_ptr<void>>> states;
    for (const auto& c : collectors) c->init({device});  // on every invocation, as §3.9 says
    for (const auto& c : collectors) {
      if (auto state = c->start(device)) states.emplace_back(c.get(), std::move(state));
    }
    f.call_packed(args);
    MetricMap merged;
    for (auto& [collector, state] : states) {
      for (auto& [key, value] : collector->stop(state)) merged[key] = std::move(value);
    }
    return merged;
  };
}

}  // namespace kiln::profiling
