// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's one pool: a TVM-style parallel kernel (its tasks meet at a barrier, through
// __TVMBackendParallelLaunch and the task team) and an SDK kernel's parallel_for share the same
// threads, so a process runs num_threads threads of Kiln CPU work in total, the caller included.
// Needs no TVM: the barrier library is built from tests/tvm/bad_libraries/parallel_barrier.c.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kBarrierLibrary =
    fs::path(KILN_TVM_BAD_LIBRARY_DIR) / "libkiln_tvm_bad_parallel_barrier.so";
const fs::path kVectorAdd = fs::path(KILN_BUILD_DIR) / "examples/kernels/libvector_add.so";

// Elements of the vector_add calls: 64 chunks of the kernel's grain (2^14), so a parallel_for
// that can use every thread does.
constexpr int64_t kElements = int64_t{1} << 20;

// The thread ids of this process (/proc/self/task), with their names.
std::map<std::string, std::string> process_threads() {
  std::map<std::string, std::string> threads;
  for (const auto& entry : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    threads[entry.path().filename().string()] = name;
  }
  return threads;
}

// The threads in `after` that are not in `before`, as "tid (name)".
std::vector<std::string> new_threads(const std::map<std::string, std::string>& before,
                                     const std::map<std::string, std::string>& after) {
  std::vector<std::string> out;
  for (const auto& [tid, name] : after) {
    if (before.count(tid) != 0) continue;
    std::string entry = tid;
    entry.append(" (").append(name).append(")");
    out.push_back(std::move(entry));
  }
  return out;
}

// The modules and tensors of one caller: the barrier kernel's slots, vector_add's operands.
struct Kernels {
  explicit Kernels(const Runtime& rt)
      : barrier(rt.load_module(kBarrierLibrary)),
        vector_add(rt.load_module(kVectorAdd)),
        slots(Tensor::empty({256}, DataType::Int(64), Device::cpu(), rt)),
        a(Tensor::empty({kElements}, DataType::Float(32), Device::cpu(), rt)),
        b(Tensor::empty({kElements}, DataType::Float(32), Device::cpu(), rt)),
        out(Tensor::empty({kElements}, DataType::Float(32), Device::cpu(), rt)) {
    std::fill(a.host_span<float>().begin(), a.host_span<float>().end(), 1.0f);
    std::fill(b.host_span<float>().begin(), b.host_span<float>().end(), 2.0f);
  }

  // Runs the barrier kernel once; every task must have seen every other. Returns its task count.
  int64_t run_barrier() {
    std::fill(slots.host_span<int64_t>().begin(), slots.host_span<int64_t>().end(), 0);
    barrier.get_function("main")(slots);
    const auto s = slots.host_span<const int64_t>();
    const int64_t n = s[255];
    for (int64_t id = 0; id < n; ++id) EXPECT_EQ(s[128 + id], n * (n + 1) / 2) << "task " << id;
    return n;
  }

  // Runs vector_add once (out = a + 0.5 b) and checks every element.
  void run_vector_add() {
    std::fill(out.host_span<float>().begin(), out.host_span<float>().end(), 0.0f);
    vector_add.get_function("vector_add")(a, b, out, 0.5);
    const auto o = out.host_span<const float>();
    const auto wrong = std::find_if(o.begin(), o.end(), [](float v) { return v != 2.0f; });
    EXPECT_EQ(wrong, o.end()) << "element " << (wrong - o.begin());
  }

  Module barrier;
  Module vector_add;
  Tensor slots, a, b, out;
};

TEST(CpuPool, ATvmParallelKernelAndAParallelForRunOnNumThreadsThreadsInTotal) {
  ASSERT_TRUE(fs::exists(kVectorAdd)) << kVectorAdd << " is missing (target kiln_example_kernels)";
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  ScopedEnv threads("KILN_NUM_THREADS", "4");
  Runtime rt;
  Kernels k(rt);
  const auto before = process_threads();
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(k.run_barrier(), 4) << "round " << round;
    k.run_vector_add();
  }
  // The caller is one of the 4: the plugin may have started 3 more, for both kinds of work.
  EXPECT_THAT(new_threads(before, process_threads()), ::testing::SizeIs(3))
      << "threads started while both kernels ran";
}

TEST(CpuPool, CallersOnSeveralThreadsAtOnceAllFinishCorrectly) {
  // Launches from several threads at once: one gets the pool, the others find it busy and run
  // their work on their own thread (a barrier launch as one task), and nothing waits for a
  // thread that cannot come. Every result is checked; at most 3 pool threads are started.
  ASSERT_TRUE(fs::exists(kVectorAdd)) << kVectorAdd << " is missing (target kiln_example_kernels)";
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  ScopedEnv threads("KILN_NUM_THREADS", "4");
  Runtime rt;
  constexpr int kCallers = 3;
  std::vector<std::unique_ptr<Kernels>> kernels;
  kernels.reserve(kCallers);
  for (int i = 0; i < kCallers; ++i) kernels.push_back(std::make_unique<Kernels>(rt));
  const auto before = process_threads();
  std::vector<std::thread> callers;
  callers.reserve(kCallers);
  std::vector<std::set<int64_t>> task_counts(kCallers);
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&kernels, &task_counts, i] {
      for (int round = 0; round < 30; ++round) {
        task_counts[i].insert(kernels[i]->run_barrier());
        kernels[i]->run_vector_add();
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (const auto& counts : task_counts) {
    for (const int64_t n : counts) EXPECT_TRUE(n == 1 || n == 4) << n << " tasks";
  }
  // The callers are joined, so what is new is the pool's workers: at most 3.
  std::vector<std::string> started = new_threads(before, process_threads());
  EXPECT_LE(started.size(), 3u) << ::testing::PrintToString(started);
}

}  // namespace
}  // namespace kiln
