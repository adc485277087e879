// SPDX-License-Identifier: Apache-2.0
// `kiln run`: one configuration (a single run or one point of a sweep) checked against the
// runtime, run through local_run or rpc_run, and judged: checks, noise verdict, throughput and
// the optional profile.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "cli_checks.h"
#include "crash_note.h"
#include "kiln/detail/cancellation.h"
#include "kiln/device_backend.h"
#include "kiln/error.h"
#include "kiln/rpc/rpc_config.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

// The peak memory bandwidth the backend reports for `device`, if any
// (kiln/detail/throughput.h). Asks the one backend that runs, so a CPU run starts no GPU driver.
std::optional<double> device_peak_bandwidth(const Runtime& runtime, const Device& device) {
  const Ref<DeviceBackend> backend = runtime.find_backend(device.type);
  if (!backend) return std::nullopt;
  try {
    if (device.id < 0 || device.id >= backend->device_count()) return std::nullopt;
    return peak_memory_bandwidth(backend->attributes(device.id));
  } catch (const Error&) {
    return std::nullopt;  // no figure; the run itself reports why the device fails
  }
}

// The tracker settings of a `remote:` section; missing ones are usage errors.
rpc::RPCConfig remote_config(const run::RunSpec& spec) {
  const run::RemoteSpec& remote = *spec.remote;
  rpc::RPCConfig rpc;
  rpc.tracker_host = remote.tracker_host;
  rpc.tracker_port = remote.tracker_port;
  rpc.tracker_key = remote.key;
  rpc.session_priority = remote.priority;
  rpc.session_timeout_sec = remote.session_timeout;
  rpc.request_wait_sec = remote.wait;
  rpc.token = remote.token;
  rpc.tracker_token = remote.tracker_token;
  try {
    return rpc::RPCConfig::normalized(rpc);
  } catch (const ValueError& e) {
    throw UsageError(fmt::format("{}: remote: {}", spec.file.string(), e.what()));
  }
}

// While a remote run waits for the tracker to grant it a server: after a few seconds, one line
// on stderr (progress or not, once per key per process: a farm's parallel points wait
// together) saying for what it waits and how many servers the key has, and that Ctrl-C stops.
class ServerWaitNotice {
 public:
  explicit ServerWaitNotice(const rpc::RPCConfig& rpc)
      : thread_([this, rpc] {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, std::chrono::seconds(3), [this] { return served_; })) return;
          lock.unlock();
          static std::mutex said_mu;
          static std::set<std::string> said;
          {
            std::lock_guard said_lock(said_mu);
            if (!said.insert(*rpc.tracker_key).second) return;
          }
          std::string servers;
          try {
            const int count = rpc.count_num_servers(/*allow_missing=*/true);
            servers = count == 0
                          ? "no server is registered under it"
                          : fmt::format("its {} server{} are busy", count, count == 1 ? "" : "s");
          } catch (const std::exception& e) {
            servers = fmt::format("the tracker's summary failed: {}", e.what());
          }
          std::fprintf(stderr,
                       "kiln: waiting for a '%s' server from the tracker %s:%d (%s); Ctrl-C "
                       "stops\n",
                       rpc.tracker_key->c_str(), rpc.tracker_host->c_str(), *rpc.tracker_port,
                       servers.c_str());
        }) {}
  ~ServerWaitNotice() {
    served();
    thread_.join();
  }
  ServerWaitNotice(const ServerWaitNotice&) = delete;
  ServerWaitNotice& operator=(const ServerWaitNotice&) = delete;
  // The server was granted (or the run ended): no notice.
  void served() {
    {
      std::lock_guard lock(mu_);
      served_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool served_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

// The deadline of a remote run (--point-timeout), as the thread's interrupt poll
// (kiln/detail/cancellation.h): every wait of the RPC client (tracker, replies, sends) runs the
// poll at least every kInterruptPollPeriod, so the run ends at its deadline whatever the server
// does. The clock starts when the tracker has granted the server (the wait for a free server is
// `remote.wait`'s business).
class RemoteDeadline {
 public:
  explicit RemoteDeadline(double timeout_s) : timeout_s_(timeout_s) {}
  // The server was granted: the clock runs from now.
  void start() {
    if (timeout_s_ > 0) {
      deadline_ = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s_));
    }
  }
  // Whether the deadline passed (the poll then threw).
  bool expired() const { return expired_; }
  double timeout_s() const { return timeout_s_; }
  // The interrupt poll: throws InterruptedError once the deadline has passed.
  static void poll(void* context) {
    auto* self = static_cast<RemoteDeadline*>(context);
    if (!self->deadline_ || std::chrono::steady_clock::now() < *self->deadline_) return;
    self->expired_ = true;
    throw detail::InterruptedError(
        fmt::format("the remote run took longer than --point-timeout {} s", self->timeout_s_));
  }

 private:
  double timeout_s_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  bool expired_ = false;
};

// The timer of `p`'s device and who provides it, for messages: "device timer of plugin rocm".
std::string timer_owner(const Runtime& runtime, const Prepared& p, const Outcome& o) {
  const Ref<DeviceBackend> backend = runtime.find_backend(p.device.type);
  return fmt::format("{} timer{}", o.result.profile.timer,
                     p.spec.remote ? std::string(" of the server")
                     : backend     ? fmt::format(" of plugin {}", backend->plugin_name())
                                   : std::string());
}

// A call cannot take no time: repeats that read 0 (or less) per call mean the timer is
// broken, and the run fails naming it (issue 29 item 3) rather than print "median 0.000 ns".
// Nor can the device be busy for longer than the host waited for it: timed calls adding up to
// more than the host's wall time around the whole loop mean a timer in the wrong unit or
// reading garbage.
void check_timer(const Runtime& runtime, const Prepared& p, const Outcome& o) {
  const BenchmarkResult& timing = o.result.profile;
  const std::vector<double>& results = timing.results();
  const char* slot = timing.timer == "device" ? " (its timer_elapsed_ns slot)" : "";
  const auto zero = std::count_if(results.begin(), results.end(),
                                  [](double s) { return !(s > 0) || !std::isfinite(s); });
  if (zero > 0) {
    throw RuntimeError(fmt::format(
        "the timing of '{}' on {} is invalid: the {} read {} for {} of {} repeats, but a call "
        "cannot take no time; the timer is broken{}",
        p.function, runtime.device_str(p.device), timer_owner(runtime, p, o),
        results.empty() ? "nothing" : "0 ns or less", zero, results.size(), slot));
  }
  // The host's clocks around the loop travel with local runs only (a remote run's are 0).
  if (timing.wall_time_s <= 0) return;
  double timed_s = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    timed_s += results[i] * static_cast<double>(i < timing.numbers.size() ? timing.numbers[i] : 1);
  }
  // Generous: clocks of two kinds, rounded differently; a timer off by a unit is 1000x.
  constexpr double kTolerance = 1.5, kSlackS = 0.002;
  if (timed_s > kTolerance * timing.wall_time_s + kSlackS) {
    throw RuntimeError(fmt::format(
        "the timing of '{}' on {} is invalid: the {} adds its {} repeats up to {}, but the host "
        "waited only {} for all of them (its steady clock around the loop); the timer is "
        "broken{}",
        p.function, runtime.device_str(p.device), timer_owner(runtime, p, o), results.size(),
        format_time_ns(timed_s * 1e9), format_time_ns(timing.wall_time_s * 1e9), slot));
  }
}

}  // namespace

std::string running_what(const Runtime& runtime, const Prepared& p) {
  const Ref<DeviceBackend> backend = runtime.find_backend(p.device.type);
  return fmt::format("'{}' on {}{} ({})", p.function, runtime.device_str(p.device),
                     backend ? fmt::format(" (plugin {})", backend->plugin_name()) : "",
                     p.spec.file.string());
}

Prepared prepare(Runtime& runtime, run::RunSpec spec, const std::optional<Device>& device_option) {
  Prepared p;
  try {
    // Refused here, not replaced by device 0: the run uses and reports the device named.
    p.device = checked_device(runtime, spec, device_option);
    check_exporter(runtime, spec);
    p.inputs = run::make_inputs(spec);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  p.module = runtime.load_module(spec.module);
  p.function = spec.function.empty() ? p.module.entry_name() : spec.function;
  if (p.function.empty()) {
    throw ValueError(
        fmt::format("{}: the module {} has no entry function; name one with "
                    "`function:`",
                    spec.file.string(), spec.module.string()));
  }
  // Before the export, and naming the module the config gives rather than the exported copy.
  if (!spec.function.empty()) {
    try {
      check_function(p.module, p.function, spec);
    } catch (const ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  p.evaluator = run::evaluator_settings(spec);
  p.spec = std::move(spec);
  return p;
}

Outcome execute(Runtime& runtime, const Prepared& p, Progress& progress,
                testing::MeasurementWorker* worker, double remote_timeout_s) {
  const run::RunSpec& spec = p.spec;
  Outcome o;
  testing::RunHooks hooks;
  hooks.function = p.function;
  hooks.evaluator = p.evaluator.options;
  hooks.device_index = p.device.id;
  hooks.on_step = [&](const std::string& step, double seconds) {
    o.steps.emplace_back(step, seconds);
    progress.step_done();
  };
  if (progress.enabled()) {
    const double timeout_s = p.evaluator.options.noise.timeout_s;
    hooks.on_repeat = [&progress, timeout_s](int32_t done, int32_t total) {
      progress.repeat(done, total, timeout_s);
    };
  }
  // local_run and rpc_run take the device by name (their index comes from hooks.device_index):
  // the name of the Device parsed once, not the text it was parsed from.
  const std::string device = runtime.device_str(p.device);
  if (spec.remote) {
    const rpc::RPCConfig rpc = remote_config(spec);
    o.where = fmt::format("remote, key '{}' via tracker {}:{}", *rpc.tracker_key, *rpc.tracker_host,
                          *rpc.tracker_port);
    progress.note(fmt::format("requesting a '{}' server from {}:{}", *rpc.tracker_key,
                              *rpc.tracker_host, *rpc.tracker_port));
    ServerWaitNotice notice(rpc);
    RemoteDeadline deadline(remote_timeout_s);
    const auto on_step = hooks.on_step;
    hooks.on_step = [&](const std::string& step, double seconds) {
      if (step == "connect") {
        notice.served();
        deadline.start();
      }
      on_step(step, seconds);
    };
    try {
      const detail::InterruptScope scope(&RemoteDeadline::poll, &deadline);
      o.result = testing::rpc_run(runtime, p.module, device, p.inputs, p.evaluator.config, rpc,
                                  spec.exporter, std::nullopt, hooks);
    } catch (const std::exception& e) {
      // Whatever the deadline ended (a reply, a send, the cleanup), it is the timeout.
      if (!deadline.expired()) throw;
      throw RemoteTimeoutError(fmt::format(
          "'{}' on the server took longer than --point-timeout {} s (from the server's grant); "
          "its session was closed: {}",
          p.function, deadline.timeout_s(), e.what()));
    }
    o.server = o.result.server;
    o.where += fmt::format(", server {}", o.server);
  } else if (worker != nullptr) {
    o.where = "local, in a worker process";
    const auto on_step = hooks.on_step;
    hooks.on_step = [&](const std::string& step, double seconds) {
      on_step(step, seconds);
      if (step == "load") progress.timing_elsewhere("in a worker process");
    };
    o.result = worker->run(p.module, device, p.inputs, p.evaluator.config, spec.exporter,
                           std::nullopt, hooks);
  } else {
    const CrashNoteScope note(running_what(runtime, p));
    o.result = testing::local_run(runtime, p.module, device, p.inputs, p.evaluator.config,
                                  spec.exporter, std::nullopt, hooks);
  }
  progress.finish();
  check_timer(runtime, p, o);
  o.check = run::check_outputs(spec, o.result.outputs);
  const run::CheckResult result_check = run::check_result(spec, o.result.result);
  o.check.ok = o.check.ok && result_check.ok;
  if (!result_check.summary.empty()) {
    o.check.summary += (o.check.summary.empty() ? "" : "\n") + result_check.summary;
  }
  const BenchmarkResult& timing = o.result.profile;
  // This machine's load says nothing about a remote server's measurement.
  o.verdict = noise_verdict(timing, spec.remote ? std::nullopt : host_load());
  // From the median; a remote server's device attributes are not known here: no peak.
  o.throughput =
      compute_throughput(spec.throughput, argument_bytes(p.inputs), timing.median(),
                         spec.remote ? std::nullopt : device_peak_bandwidth(runtime, p.device));
  // Nothing to say for a function of scalars without given bytes or flops.
  o.show_throughput = o.throughput.bytes > 0 || o.throughput.flops.has_value();
  if (spec.profile) {
    const CrashNoteScope note(running_what(runtime, p) + " (its profile: section)");
    o.profile = profile_run(spec, *spec.profile, p.device, runtime);
  }
  return o;
}

}  // namespace kiln::tool
