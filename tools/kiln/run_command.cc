// SPDX-License-Identifier: Apache-2.0
// `kiln run RUN.yaml`: run a module's function on a device through local_run, print its
// outputs, return value and timing, check them against expected values. A config with a
// `sweep:` section runs every point of its cross product, with one progress display, one
// table and one JSON document. This file reads the config and --device and picks the job
// (run_command.h lists the files that do each).
#include <optional>
#include <utility>

#include "kiln/error.h"
#include "run_command.h"

namespace kiln::tool {

int run_run(const RunOptions& options, const GlobalOptions& global) {
  Runtime runtime(runtime_options(global));
  // Everything about the config itself is a usage error (exit 2); what happens when it runs
  // is a runtime error (exit 3).
  run::SweepSpec sweep;
  try {
    sweep = run::parse_sweep_config(options.config, runtime.device_types());
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (options.device && sweep.is_sweep()) refuse_swept_device(sweep, *options.device);
  // --device, parsed here once for the run or every point of the sweep; a bad one is the
  // command line's fault (exit 2), and an unknown type names its plugin.
  std::optional<Device> device;
  if (options.device) {
    try {
      device = runtime.parse_device(*options.device);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (!sweep.is_sweep()) {
    return run_single(runtime, std::move(*sweep.points[0].spec), device, options);
  }
  return run_sweep(runtime, sweep, device, options);
}

}  // namespace kiln::tool
