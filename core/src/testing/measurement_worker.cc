// SPDX-License-Identifier: Apache-2.0
// kiln::testing::MeasurementWorker (kiln/measurement_worker.h): an RPC session with a
// kiln-rpc-session process over a socket pair. The worker is the RPC server's session process
// (rpc/session_process.h), so what a session can do (upload, load, time, call, copy) is what
// a measurement can do, and the RPC code paths that hold remote runs together hold this one.
#include "kiln/measurement_worker.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/detail/wait_status.h"
#include "kiln/device_backend.h"
#include "kiln/logging.h"
#include "kiln/rpc/rpc_error.h"
#include "kiln/rpc/server.h"
#include "kiln/runtime.h"
#include "kiln/temp_dir.h"
#include "rpc/client.h"
#include "rpc/connection.h"
#include "rpc/session_process.h"
#include "rpc/session_server.h"
#include "testing/run_steps.h"

namespace kiln::testing {
namespace fs = std::filesystem;
using detail::step;

const char* WorkerError::kind_name() const {
  // Indexed by Kind, in its order.
  static constexpr const char* kKindNames[] = {"crashed", "hung", "killed", "exited"};
  const auto index = static_cast<size_t>(kind_);
  return index < std::size(kKindNames) ? kKindNames[index] : "crashed";
}

namespace {

// The out-of-memory kills counted in this process's memory cgroup, which the worker shares:
// cgroup v2's memory.events or v1's memory.oom_control (both have an "oom_kill" line); nullopt
// where neither is readable (an older kernel, no memory controller).
std::optional<uint64_t> oom_kills() {
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  std::vector<std::string> files;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) {
      files.push_back("/sys/fs/cgroup" + line.substr(3) + "/memory.events");
    } else if (const size_t at = line.find(":memory:"); at != std::string::npos) {
      files.push_back("/sys/fs/cgroup/memory" + line.substr(at + 8) + "/memory.oom_control");
    }
  }
  for (const std::string& file : files) {
    std::ifstream events(file);
    std::string key;
    uint64_t value = 0;
    while (events >> key >> value) {
      if (key == "oom_kill") return value;
    }
  }
  return std::nullopt;
}

// Arms a deadline for one run: past it, `on_expiry` runs once (on the watchdog's thread).
class Watchdog {
 public:
  template <typename OnExpiry>
  Watchdog(double timeout_s, OnExpiry on_expiry) {
    if (timeout_s <= 0) return;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    thread_ = std::thread([this, deadline, on_expiry] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_until(lock, deadline, [this] { return done_; })) {
        expired_ = true;
        on_expiry();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  bool expired() {
    std::lock_guard lock(mu_);
    return expired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool expired_ = false;
  std::thread thread_;
};

}  // namespace

struct MeasurementWorker::Impl {
  Impl(const Runtime& r, WorkerOptions o) : runtime(r), options(std::move(o)) {}

  // A handle of its own, not a reference: the runtime lives as long as the worker, whoever
  // else lets go of it (issue 38 item 4).
  Runtime runtime;
  WorkerOptions options;
  std::mutex mu;  // one run at a time; guards everything below
  // The worker's sessions root (its work directory is inside): removed with the worker, and
  // by the temporary-directory cleanup when this process dies of a signal.
  std::optional<TemporaryDirectory> root;
  std::unique_ptr<rpc::SessionProcess> process;
  rpc::RPCSession session;
  int starts = 0;
  uint64_t runs = 0;

  void start();
  void stop() noexcept;
  RunResult run_artifact(const fs::path& artifact, const std::string& device_type,
                         const std::vector<Any>& args,
                         const std::optional<EvaluatorConfig>& evaluator_config,
                         const RunHooks& hooks);
  // The error for a run whose session was lost: what became of the worker.
  [[noreturn]] void worker_lost(const std::string& what, bool hung, std::optional<uint64_t> ooms,
                                const std::string& cause);
};

void MeasurementWorker::Impl::start() {
  const fs::path executable = rpc::find_session_worker(options.executable);
  root.emplace("kiln_worker_");
  rpc::WorkerConfig config;
  config.sessions_root = root->path();
  config.work_dir = rpc::make_session_directory(root->path());
  config.id = static_cast<uint64_t>(starts + 1);
  config.peer = "measurement worker";
  // The RPC server's limits, less the idle timeout: a worker waits for its next run.
  const rpc::ServerOptions defaults;
  config.max_memory_bytes = defaults.max_session_memory;
  config.max_handles = defaults.max_handles;
  config.max_upload_bytes = defaults.max_upload_bytes;
  config.idle_timeout_ms = 0;
  config.write_timeout_ms = static_cast<int64_t>(defaults.write_timeout_s * 1000);
  config.plugin_set = runtime.plugin_set_path();
  config.search_paths = runtime.search_paths();
  config.log_level = log_level();
  config.server_pid = ::getpid();
  int pair[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw RuntimeError(
        fmt::format("cannot start a measurement worker: socketpair: {}", std::strerror(errno)));
  }
  try {
    process = std::make_unique<rpc::SessionProcess>(executable, config, pair[1]);
  } catch (...) {
    ::close(pair[0]);
    ::close(pair[1]);
    root.reset();
    throw;
  }
  ::close(pair[1]);
  ++starts;
  auto impl = std::make_shared<rpc::RPCSession::Impl>();
  impl->peer = fmt::format("measurement worker {}", process->pid());
  impl->server_key = "worker";
  session =
      rpc::attach_session(std::move(impl), rpc::Connection::adopt(pair[0], "worker"), runtime);
}

void MeasurementWorker::Impl::stop() noexcept {
  if (process) {
    try {
      session.close();  // the worker's session ends and it exits
    } catch (...) {
    }
    if (!process->wait(std::chrono::seconds(2))) process->signal(SIGKILL);
    process.reset();  // kills and reaps what is left
  }
  session = rpc::RPCSession();
  root.reset();
}

void MeasurementWorker::Impl::worker_lost(const std::string& what, bool hung,
                                          std::optional<uint64_t> ooms, const std::string& cause) {
  std::optional<int> status = process->wait(std::chrono::seconds(5));
  if (!status) {
    // Alive but its session is gone (a protocol error): it cannot serve another run.
    process->signal(SIGKILL);
    status = process->wait(std::nullopt);
  }
  const pid_t pid = process->pid();
  stop();
  if (hung) {
    throw WorkerError(WorkerError::Kind::kHung, SIGKILL,
                      fmt::format("{} did not finish within {} s: the measurement worker "
                                  "(pid {}) was killed",
                                  what, options.timeout_s, pid));
  }
  if (WIFSIGNALED(*status)) {
    const int sig = WTERMSIG(*status);
    if (sig == SIGKILL) {
      const std::optional<uint64_t> after = oom_kills();
      const bool oom = ooms && after && *after > *ooms;
      throw WorkerError(
          WorkerError::Kind::kKilled, sig,
          fmt::format("the measurement worker (pid {}) running {} was killed by SIGKILL{}", pid,
                      what,
                      oom ? " from the out-of-memory killer (its cgroup counted an OOM kill)"
                          : " (not by Kiln: the out-of-memory killer or an operator)"));
    }
    throw WorkerError(WorkerError::Kind::kCrashed, sig,
                      fmt::format("the measurement worker (pid {}) running {} {}", pid, what,
                                  kiln::detail::describe_wait_status(*status)));
  }
  throw WorkerError(WorkerError::Kind::kExited, std::nullopt,
                    fmt::format("the measurement worker (pid {}) running {} {} ({})", pid, what,
                                kiln::detail::describe_wait_status(*status), cause));
}

RunResult MeasurementWorker::Impl::run_artifact(
    const fs::path& artifact, const std::string& device_type, const std::vector<Any>& args,
    const std::optional<EvaluatorConfig>& evaluator_config, const RunHooks& hooks) {
  const EvaluatorConfig config = EvaluatorConfig::normalized(evaluator_config);
  detail::check_run_args(args);
  TimeEvaluatorOptions evaluator = detail::run_evaluator_options(config, hooks);
  evaluator.on_repeat = nullptr;  // the loop runs in the worker
  const Device local_device = runtime.parse_device(device_type);
  const int32_t index = hooks.device_index.value_or(0);
  // What the errors name: the function, the device and the plugin that serves it.
  const Ref<DeviceBackend> backend = runtime.find_backend(local_device.type);
  const std::string what =
      fmt::format("{} on {}{}",
                  hooks.function.empty() ? std::string("the entry function")
                                         : fmt::format("'{}'", hooks.function),
                  runtime.device_str(Device{local_device.type, index}),
                  backend ? fmt::format(" (plugin {})", backend->plugin_name()) : std::string());

  if (!process) step(hooks, "start", [&] { start(); });
  // A fresh name per run: a loader may keep what it loaded by path (dlopen does while the
  // last run's library is still open).
  const std::string remote_path =
      fmt::format("kiln_tmp_mod_{}{}", ++runs, artifact.extension().string());
  const auto remove_files = [&]() noexcept {
    for (const std::string& path : {remote_path, remote_path + ".so"}) {
      try {
        session.remove(path);
      } catch (const std::exception&) {
      }
    }
  };
  const std::optional<uint64_t> ooms = oom_kills();
  RunResult result;
  bool hung = false;
  try {
    rpc::SessionProcess& worker = *process;
    Watchdog watchdog(options.timeout_s, [&worker] { worker.signal(SIGKILL); });
    try {
      const Device device = session.device(local_device.type, index);
      result = detail::run_in_session(session, device, artifact, remote_path, args, evaluator,
                                      hooks, runtime);
    } catch (...) {
      hung = watchdog.expired();
      throw;
    }
    hung = watchdog.expired();
  } catch (const std::exception& e) {
    if (hung || session.closed()) worker_lost(what, hung, ooms, e.what());
    remove_files();
    // The session is up, so this is the run's own error, raised in the worker: thrown with
    // the message local_run would have thrown, not wrapped as a remote call's (its kind where
    // the reply kept it; a code does not survive the evaluator's packed-function boundary).
    if (const auto* remote = dynamic_cast<const rpc::RPCError*>(&e)) {
      throw_error(remote->remote_code() != 0 ? remote->remote_code() : KILN_ERROR_RUNTIME,
                  remote->remote_message());
    }
    throw;
  }
  remove_files();
  return result;
}

MeasurementWorker::MeasurementWorker(const Runtime& runtime, WorkerOptions options)
    : impl_(std::make_unique<Impl>(runtime, std::move(options))) {
  if (impl_->options.timeout_s < 0) throw ValueError("a worker's timeout must be >= 0 seconds");
}

MeasurementWorker::~MeasurementWorker() { close(); }

RunResult MeasurementWorker::run(const Module& mod, const std::string& device_type,
                                 const std::vector<Any>& args,
                                 const std::optional<EvaluatorConfig>& evaluator_config,
                                 const ExportFunc& export_func,
                                 const std::optional<std::string>& output_format,
                                 const RunHooks& hooks) {
  const ExportPlan plan = normalize_export_func(export_func, output_format, impl_->runtime);
  const TemporaryDirectory temp("kiln_worker_run_");
  const fs::path artifact = temp.path() / ("kiln_tmp_mod." + plan.output_format);
  step(hooks, "export", [&] { detail::export_module(plan, mod, artifact, impl_->runtime); });
  return run_artifact(artifact, device_type, args, evaluator_config, hooks);
}

RunResult MeasurementWorker::run_artifact(const fs::path& artifact, const std::string& device_type,
                                          const std::vector<Any>& args,
                                          const std::optional<EvaluatorConfig>& evaluator_config,
                                          const RunHooks& hooks) {
  std::lock_guard lock(impl_->mu);
  return impl_->run_artifact(artifact, device_type, args, evaluator_config, hooks);
}

void MeasurementWorker::close() noexcept {
  std::lock_guard lock(impl_->mu);
  impl_->stop();
}

pid_t MeasurementWorker::pid() const {
  std::lock_guard lock(impl_->mu);
  return impl_->process ? impl_->process->pid() : -1;
}

int MeasurementWorker::starts() const {
  std::lock_guard lock(impl_->mu);
  return impl_->starts;
}

}  // namespace kiln::testing
