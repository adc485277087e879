// SPDX-License-Identifier: Apache-2.0
// The Kiln C++ API, all of it: every header that `find_package(Kiln)` installs under kiln/
// (values, devices, tensors, modules, the Runtime and its plugins, the evaluator and its
// statistics, profiling, the VM, RPC and kiln::testing). Not the C plugin ABI (kiln/c/, the
// SDK's) and not kiln/detail/ (libkiln's helpers for the kiln tool and the tests, not
// installed).
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include "kiln/any.h"
#include "kiln/config_error.h"
#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/device_code.h"
#include "kiln/device_context.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/held_tensors.h"
#include "kiln/logging.h"
#include "kiln/module.h"
#include "kiln/module_loader.h"
#include "kiln/npy.h"
#include "kiln/object.h"
#include "kiln/plugin_discovery.h"
#include "kiln/profiling/collector.h"
#include "kiln/profiling/metrics.h"
#include "kiln/profiling/profiler.h"
#include "kiln/profiling/report.h"
#include "kiln/rpc/remote_vm.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/rpc_error.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "kiln/runtime.h"
#include "kiln/statistics.h"
#include "kiln/temp_dir.h"
#include "kiln/tensor.h"
#include "kiln/testing.h"
#include "kiln/version.h"
#include "kiln/vm/exec_builder.h"
#include "kiln/vm/executable.h"
#include "kiln/vm/virtual_machine.h"

#endif  // KILN_KILN_H_
