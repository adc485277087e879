// SPDX-License-Identifier: Apache-2.0
// MeasurementWorker keeps its Runtime (kiln/measurement_worker.h; issue 38 item 4): the caller's
// handle may go first, as with modules and sessions. Under ASan (build-asan-unity) a worker that
// kept a reference to the caller's handle reads freed memory here.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/measurement_worker.h"

namespace kiln::testing {
namespace measurement_worker_runtime_test {

// The caller's Runtime handle is destroyed before the worker is made to start or run: the
// worker starts its process, exports nothing (an artifact), resolves the device and its
// backend through its runtime and measures.
TEST(MeasurementWorkerRuntime, RunsAfterTheCallersRuntimeHandleIsGone) {
  auto runtime = std::make_unique<Runtime>();
  MeasurementWorker worker(*runtime, WorkerOptions{});
  runtime.reset();

  const int64_t n = 32;
  Tensor in = Tensor::empty({n}, DataType::Float(32));
  Tensor out = Tensor::empty({n}, DataType::Float(32));
  for (int64_t i = 0; i < n; ++i) {
    in.host_span<float>()[i] = static_cast<float>(i);
    out.host_span<float>()[i] = -1.0f;
  }
  RunHooks hooks;
  hooks.function = "copy";
  const RunResult result = worker.run_artifact(KILN_FAULTY_KERNEL, "cpu", {Any(in), Any(out)},
                                               EvaluatorConfig{1, 2, 0, false}, hooks);
  ASSERT_EQ(result.outputs.size(), 2u);
  const Tensor copied = result.outputs[1].cast<Tensor>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copied.host_span<float>()[i], i) << i;
  EXPECT_EQ(result.profile.results().size(), 2u);
  EXPECT_EQ(worker.starts(), 1);
  worker.close();
}

}  // namespace measurement_worker_runtime_test
}  // namespace kiln::testing
