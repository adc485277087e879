// SPDX-License-Identifier: Apache-2.0
// The metric collector "perf" (docs/plugin-abi.md §10.5): perf_event counters of the calling
// process, read around each profiled call on a cpu device.
//
// init() opens and enables the selected counters once, for the thread that calls it and the
// threads it creates afterwards (threads that already exist, such as a thread pool started
// earlier, are not counted: the host should init before starting its workers). The counters
// then run continuously; start() only reads them into a handle and stop() reads them again
// and reports the differences, so nested and overlapping calls each get their own figures
// (SPEC.md §3.7, as PAPI does). Metrics are "perf::<event>": perf::task-clock is a duration in
// microseconds, the others counts. An event this machine cannot count is warned about once
// and left out; a counter that went backwards (overflow) reports -1 with a one-time warning.
#ifndef KILN_PLUGINS_PERF_PERF_COLLECTOR_H_
#define KILN_PLUGINS_PERF_PERF_COLLECTOR_H_

#include "kiln/c/kiln.h"

namespace kiln::perf {

class PluginState;

// The collector table, with `self` = `plugin` (borrowed; must outlive every use of the
// table). Slots:
// - init(devices): a state that counts the plugin's events when a kDLCPU device is among
//   `devices`, else a state that counts nothing. Never fails for unavailable events; errors
//   only for bad arguments (KILN_ERROR_VALUE) or lack of memory.
// - start(device): for kDLCPU with at least one counter, a handle holding the current counter
//   values; otherwise NULL. KILN_ERROR_RUNTIME if a counter cannot be read.
// - stop(handle): reports one metric per counter to the sink and frees the handle (also on
//   error; a NULL handle reports nothing). KILN_ERROR_RUNTIME if a counter cannot be read.
// - teardown(state): closes the counters. Every handle of the state must have been stopped.
KilnMetricCollector make_perf_collector(PluginState* plugin);

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_PERF_COLLECTOR_H_
