// SPDX-License-Identifier: Apache-2.0
// `kiln run RUN.yaml` with a `sweep:` section: every point of its cross product, with one
// progress display, then one table (sweep_table.cc) or one JSON document, and one Google
// Benchmark document for --benchmark-out.
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/rpc/fan_out.h"
#include "kiln/rpc/rpc_error.h"
#include "output_file.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

// Names every point: the Google Benchmark name of its run, and where two points would share
// one (points that differ only in an evaluator setting, a scalar argument, a second input's
// shape), "/axis=value" for each axis whose value differs among them, so that `kiln compare`
// matches points one to one.
void name_points(const run::SweepSpec& sweep, std::vector<PointRun>* runs) {
  // "/shape=[1024,1024]": axis a's value in a name, without spaces.
  const auto name_part = [&](const PointRun& r, size_t a) {
    std::string value = r.point->values[a];
    value.erase(std::remove(value.begin(), value.end(), ' '), value.end());
    return fmt::format("/{}={}", sweep.axes[a].name, value);
  };
  std::map<std::string, std::vector<size_t>> by_base;
  std::vector<std::string> base(runs->size());
  for (size_t i = 0; i < runs->size(); ++i) {
    PointRun& r = (*runs)[i];
    if (!r.base_name.empty()) {
      base[i] = r.base_name;
    } else if (r.point->spec) {
      const run::RunSpec& spec = *r.point->spec;
      base[i] = fmt::format("{}/{}", spec.function.empty() ? "entry" : spec.function, spec.device);
    } else {
      // No run to name it after: every axis, so that the name still says which point it is.
      base[i] = "invalid";
      for (size_t a = 0; a < sweep.axes.size(); ++a) base[i] += name_part(r, a);
    }
    by_base[base[i]].push_back(i);
  }
  for (const auto& [name, members] : by_base) {
    std::vector<size_t> differing;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      std::set<std::string> values;
      for (size_t i : members) values.insert((*runs)[i].point->values[a]);
      if (values.size() > 1) differing.push_back(a);
    }
    for (size_t i : members) {
      std::string full = name;
      for (size_t a : differing) full += name_part((*runs)[i], a);
      (*runs)[i].name = full;
    }
  }
}

// Records that point `r` failed: the exit code, status ("invalid", "error", "hung", ...) and
// message of its report.
void record_point_failure(PointRun* r, int exit_code, const char* status, std::string error) {
  r->exit_code = exit_code;
  r->status = status;
  r->error = std::move(error);
}

// Checks and loads point `i` of `total` into `r->prepared`; a point that cannot be prepared is
// recorded there (invalid or error) and the sweep goes on.
void prepare_point(Runtime& runtime, const std::optional<Device>& device_option, size_t i,
                   size_t total, Progress& progress, PointRun* r) {
  if (!r->point->spec) {
    record_point_failure(r, kExitUsage, "invalid", r->point->error);
    progress.note(fmt::format("point {}/{} is invalid: {}", i + 1, total, r->error));
    return;
  }
  try {
    r->prepared = prepare(runtime, *r->point->spec, device_option);
  } catch (const UsageError& e) {
    record_point_failure(r, kExitUsage, "invalid", e.what());
  } catch (const std::exception& e) {
    record_point_failure(r, kExitRuntime, "error", e.what());
  }
  if (!r->error.empty()) {
    progress.note(fmt::format("point {}/{} failed: {}", i + 1, total, r->error));
  }
}

// Measures prepared point `i` of `total` into `r` (a remote one tried again, up to
// `execution.retries` times, when its server is lost: rpc::attempt_with_retries); a failing
// point is recorded there and the sweep goes on. `worker`: where a local point is measured
// (nullptr: here).
void measure_point(Runtime& runtime, const SweepExecution& execution, size_t i, size_t total,
                   Progress& progress, testing::MeasurementWorker* worker, PointRun* r) {
  if (!r->prepared) return;
  progress.start_point(i + 1, total, r->point->label, r->prepared->function);
  const bool remote = r->prepared->spec.remote.has_value();
  const auto on_lost = [&](const rpc::ServerLostError& e, int next_attempt) {
    // Said whether progress is shown or not: the run took longer and used another server.
    const std::string note = fmt::format(
        "point {}/{}: server lost ({}); trying again on another server (attempt {} of {})", i + 1,
        total, e.what(), next_attempt, execution.retries + 1);
    if (progress.enabled()) {
      progress.note(note);
    } else {
      std::fprintf(stderr, "[kiln] %s\n", note.c_str());
    }
  };
  const rpc::Attempts attempts = rpc::attempt_with_retries(
      [&] {
        r->outcome = execute(runtime, *r->prepared, progress, remote ? nullptr : worker,
                             execution.point_timeout_s);
      },
      remote ? execution.retries : 0, on_lost);
  r->attempts = attempts.count;
  r->retried = attempts.lost;
  if (attempts.gave_up) r->retried.pop_back();  // the last one is the point's error
  if (!attempts.error) {
    if (!r->outcome->check.ok) {
      r->exit_code = kExitCheckFailed;
      r->status = "check_failed";
    }
  } else {
    try {
      std::rethrow_exception(attempts.error);
    } catch (const testing::WorkerError& e) {
      record_point_failure(r, kExitRuntime, e.kind_name(), e.what());
    } catch (const RemoteTimeoutError& e) {
      // Not tried again: the next server would get the same point and the same bound.
      record_point_failure(r, kExitRuntime, "hung", e.what());
    } catch (const std::exception& e) {
      record_point_failure(
          r, kExitRuntime, "error",
          r->retried.empty()
              ? std::string(e.what())
              : fmt::format("{} (after {} attempts: the server was lost each time before)",
                            e.what(), r->attempts));
    }
  }
  progress.finish();
  if (!r->error.empty()) {
    progress.note(fmt::format("point {}/{} failed: {}", i + 1, total, r->error));
  }
}

// What the reports need of a measured point, kept, and its tensors and module let go: a sweep's
// memory is then bounded by its largest point, not the sum of all (issue 29 item 4).
void summarize_and_release(Runtime& runtime, PointRun* r) {
  if (!r->prepared) return;
  r->base_name = benchmark_name(r->prepared->function, r->prepared->inputs,
                                runtime.device_str(r->prepared->device));
  if (r->outcome) r->document = outcome_json(runtime, *r->prepared, *r->outcome);
  r->prepared->inputs.clear();
  r->prepared->inputs.shrink_to_fit();
  r->prepared->module = Module();
  if (r->outcome) {
    r->outcome->result.outputs.clear();
    r->outcome->result.outputs.shrink_to_fit();
    r->outcome->result.result = Any();
  }
  // And out of this process: once glibc has freed a large mapped block it raises its mmap
  // threshold to that size, so the next points' tensors come from the heap, whose freed pages
  // stay resident (measured: 20 points of two 16 MiB tensors held 450 MiB more than 2).
  ::malloc_trim(0);
}

// Prepares, measures and summarises every point one after another; local points in `workers`
// (one per device, made on first use) when the sweep is isolated.
void measure_in_order(Runtime& runtime, const std::optional<Device>& device_option,
                      const SweepExecution& execution, Progress& progress,
                      std::vector<PointRun>* runs) {
  std::map<std::string, std::unique_ptr<testing::MeasurementWorker>> workers;
  for (size_t i = 0; i < runs->size(); ++i) {
    PointRun& r = (*runs)[i];
    prepare_point(runtime, device_option, i, runs->size(), progress, &r);
    testing::MeasurementWorker* worker = nullptr;
    if (execution.isolated && r.prepared && !r.prepared->spec.remote) {
      auto& slot = workers[runtime.device_str(r.prepared->device)];
      if (!slot) {
        testing::WorkerOptions options;
        options.timeout_s = execution.point_timeout_s;
        slot = std::make_unique<testing::MeasurementWorker>(runtime, options);
      }
      worker = slot.get();
    }
    measure_point(runtime, execution, i, runs->size(), progress, worker, &r);
    summarize_and_release(runtime, &r);
  }
}

// Measures the remote points `execution.jobs` at a time, each on its own server (each rpc_run
// requests one from the tracker); they finish in any order and are reported in point order.
// Points are prepared one at a time (a module's load is not shared between threads).
// Progress is lines of notes only: one redrawn line cannot follow several points.
void measure_at_once(Runtime& runtime, const std::optional<Device>& device_option,
                     const SweepExecution& execution, Progress& progress,
                     std::vector<PointRun>* runs) {
  std::mutex progress_mu;
  std::mutex prepare_mu;
  size_t done = 0;  // under progress_mu
  const size_t total = runs->size();
  rpc::fan_out(total, execution.jobs, [&](size_t i) {
    Progress quiet(Progress::Mode::kOff, "", stderr);
    PointRun& r = (*runs)[i];
    {
      std::lock_guard lock(prepare_mu);
      std::lock_guard progress_lock(progress_mu);
      prepare_point(runtime, device_option, i, total, progress, &r);
    }
    measure_point(runtime, execution, i, total, quiet, nullptr, &r);
    {
      std::lock_guard lock(prepare_mu);
      summarize_and_release(runtime, &r);
    }
    if (!r.prepared) return;
    std::lock_guard lock(progress_mu);
    progress.note(fmt::format(
        "point {}/{} ({}) {} on {} [{} of {} measured]", i + 1, total, r.point->label,
        r.status == "ok" ? "measured" : r.status,
        r.outcome && !r.outcome->server.empty() ? r.outcome->server : "no server", ++done, total));
  });
}

// The JSON document of a point: its run's (outcome_json) as far as it got, and where it sits in
// the sweep.
nlohmann::json point_json(const Runtime& runtime, const run::SweepSpec& sweep, const PointRun& r) {
  nlohmann::json point;
  if (r.document) {
    point = *r.document;
  } else if (r.point->spec) {
    // It failed before or while running: still say what was to run where (the device as
    // configured when it was not checked).
    point["config"] = sweep.file.string();
    point["module"] = r.point->spec->module.string();
    point["function"] = r.prepared ? r.prepared->function : r.point->spec->function;
    point["device"] = r.prepared ? runtime.device_str(r.prepared->device) : r.point->spec->device;
  }
  point["index"] = r.point->index;
  point["point"] = r.point->label;
  nlohmann::json settings = nlohmann::json::object();
  for (size_t a = 0; a < sweep.axes.size(); ++a) {
    settings[sweep.axes[a].name] = r.point->values[a];
  }
  point["settings"] = settings;
  point["name"] = r.name;
  if (r.outcome && !r.outcome->server.empty()) point["server"] = r.outcome->server;
  if (r.attempts > 1) {
    point["attempts"] = r.attempts;
    point["retried_because"] = r.retried;
  }
  point["status"] = r.status;
  point["exit_code"] = r.exit_code;
  if (!r.error.empty()) point["error"] = r.error;
  return point;
}

// The sweep's `kiln run --json` document: the axes, every point, the exit code and the Google
// Benchmark document of all points.
nlohmann::json sweep_json(const Runtime& runtime, const run::SweepSpec& sweep,
                          const std::vector<PointRun>& runs, int exit_code, size_t failed,
                          const nlohmann::json& benchmark) {
  nlohmann::json out;
  out["config"] = sweep.file.string();
  nlohmann::json axes = nlohmann::json::array();
  for (const run::SweepAxis& axis : sweep.axes) {
    axes.push_back({{"name", axis.name}, {"values", axis.values}});
  }
  out["sweep"] = {{"axes", axes}, {"points", runs.size()}, {"failed", failed}};
  out["points"] = nlohmann::json::array();
  for (const PointRun& r : runs) out["points"].push_back(point_json(runtime, sweep, r));
  out["exit_code"] = exit_code;
  out["benchmark"] = benchmark;
  return out;
}

}  // namespace

void refuse_swept_device(const run::SweepSpec& sweep, const std::string& device_text) {
  for (const run::SweepAxis& axis : sweep.axes) {
    if (axis.name == "device") {
      throw UsageError(fmt::format(
          "--device {}: {} sweeps the device (sweep.device); leave --device out or the axis",
          device_text, sweep.file.string()));
    }
  }
}

SweepExecution sweep_execution(const run::SweepSpec& sweep, const RunOptions& options) {
  SweepExecution execution;
  execution.isolated = options.isolation.value_or("process") == "process";
  execution.point_timeout_s = options.point_timeout_s;
  execution.jobs = options.jobs;
  execution.retries = options.retries;
  if (execution.jobs > 1) {
    for (const run::SweepPoint& point : sweep.points) {
      if (point.spec && !point.spec->remote) {
        throw UsageError(fmt::format(
            "--jobs {}: {} measures its points on this machine, one at a time so that they do "
            "not disturb each other's timing; --jobs runs the points of a sweep with a "
            "remote: section on several servers at once",
            execution.jobs, sweep.file.string()));
      }
    }
  }
  return execution;
}

int run_sweep(Runtime& runtime, const run::SweepSpec& sweep,
              const std::optional<Device>& device_option, const RunOptions& options) {
  const SweepExecution execution = sweep_execution(sweep, options);
  const size_t total = sweep.points.size();
  const bool at_once = execution.jobs > 1;
  // Several points at once cannot share one redrawn line: plain lines instead.
  Progress::Mode mode = Progress::choose(options.progress, options.json, stderr);
  if (at_once && mode == Progress::Mode::kRedraw) mode = Progress::Mode::kLines;
  Progress progress(mode, "", stderr);
  std::vector<PointRun> runs(total);
  for (size_t i = 0; i < total; ++i) runs[i].point = &sweep.points[i];
  if (at_once) {
    measure_at_once(runtime, device_option, execution, progress, &runs);
  } else {
    measure_in_order(runtime, device_option, execution, progress, &runs);
  }
  name_points(sweep, &runs);

  const nlohmann::json benchmark = sweep_benchmark_document(runtime, runs);
  if (options.benchmark_out) write_output_file(*options.benchmark_out, benchmark.dump(2) + "\n");

  int exit_code = kExitOk;
  size_t failed = 0;
  for (const PointRun& r : runs) {
    exit_code = std::max(exit_code, r.exit_code);
    if (r.exit_code != kExitOk) ++failed;
  }
  if (options.json) {
    std::cout << sweep_json(runtime, sweep, runs, exit_code, failed, benchmark).dump(2) << "\n";
  } else {
    print_sweep_table(sweep, runs, exit_code, failed);
  }
  return exit_code;
}

}  // namespace kiln::tool
