// SPDX-License-Identifier: Apache-2.0
// kiln::testing::MeasurementWorker: local_run in a process of its own, so that a kernel or a
// plugin that crashes, hangs or runs out of memory fails one measurement instead of the
// caller (docs/isolation.md).
#ifndef KILN_MEASUREMENT_WORKER_H_
#define KILN_MEASUREMENT_WORKER_H_

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/testing.h"

namespace kiln::testing {

// How a worker runs.
struct WorkerOptions {
  // Seconds one run may take, from the upload of the module to the download of the outputs;
  // past it the worker is killed and the run fails with WorkerError (kHung). 0: no deadline.
  double timeout_s = 0;
  // The worker executable (kiln-rpc-session); empty: $KILN_RPC_SESSION_WORKER, else beside
  // libkiln (<prefix>/libexec/kiln/, the build tree's bin/).
  std::filesystem::path executable;
};

// A run whose worker died or was killed: what happened, and the signal when one ended it.
class WorkerError : public RuntimeError {
 public:
  enum class Kind {
    kCrashed,  // the worker died of a signal of its own (SIGSEGV, SIGBUS, SIGILL, SIGABRT...)
    kHung,     // the run passed WorkerOptions::timeout_s; Kiln killed the worker
    kKilled,   // someone else killed it (SIGKILL: the out-of-memory killer, an operator)
    kExited,   // it exited during the run (a plugin called exit())
  };
  WorkerError(Kind kind, std::optional<int> signal, const std::string& message)
      : RuntimeError(message), kind_(kind), signal_(signal) {}
  Kind kind() const { return kind_; }
  // "crashed", "hung", "killed", "exited".
  const char* kind_name() const;
  std::optional<int> signal() const { return signal_; }

 private:
  Kind kind_;
  std::optional<int> signal_;
};

// A worker process that runs measurements for one caller, started on the first run and
// reused until it dies; the next run after a death starts a fresh one. The worker loads the
// same plugins as `runtime` and serves the devices they serve. Runs are serialised (one at a
// time per worker); use one worker per concurrent caller. The worker ends with the caller
// (it gets SIGKILL when the caller's process dies) and at close() or destruction.
class MeasurementWorker {
 public:
  // The worker keeps a handle to `runtime` (Runtime is a shared handle, as modules and sessions
  // keep theirs): it exports modules and names plugins in errors, and the caller may drop its
  // own handle first.
  explicit MeasurementWorker(const Runtime& runtime, WorkerOptions options = {});
  ~MeasurementWorker();
  MeasurementWorker(const MeasurementWorker&) = delete;
  MeasurementWorker& operator=(const MeasurementWorker&) = delete;

  // local_run (kiln/testing.h) with steps 4-9 in the worker: exports `mod` here, then
  // uploads the artifact to the worker, which loads it, copies `args` to the device, times
  // the function, calls it once more and sends the tensor arguments back. Steps are "export",
  // "start" (only when a worker starts), "upload_module", "upload", "load", "time", "call",
  // "download". Errors of the run itself (a missing function, a kernel's error) are thrown
  // as in local_run and keep the worker; a worker that dies or is killed is a WorkerError
  // naming the signal, the device's plugin, the function and the device.
  RunResult run(const Module& mod, const std::string& device_type, const std::vector<Any>& args,
                const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                const ExportFunc& export_func = std::string("tar"),
                const std::optional<std::string>& output_format = std::nullopt,
                const RunHooks& hooks = {});

  // The same for a module already exported to `artifact` (a .so, .tar or any format a
  // loader of the runtime reads), e.g. a tuner's build artifact; nothing is exported.
  RunResult run_artifact(const std::filesystem::path& artifact, const std::string& device_type,
                         const std::vector<Any>& args,
                         const std::optional<EvaluatorConfig>& evaluator_config = std::nullopt,
                         const RunHooks& hooks = {});

  // Ends the worker (it starts again on the next run). Idempotent.
  void close() noexcept;
  // The running worker's process id; -1 when none runs.
  pid_t pid() const;
  // How many workers this object has started.
  int starts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::testing

#endif  // KILN_MEASUREMENT_WORKER_H_
