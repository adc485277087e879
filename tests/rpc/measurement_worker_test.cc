// SPDX-License-Identifier: Apache-2.0
// MeasurementWorker (kiln/measurement_worker.h, issue 28 item 1): runs in a worker process
// that a crashing, aborting, hanging or killed kernel takes down instead of the caller; the
// next run gets a fresh worker; an ordinary error keeps it. The kernels are tests/cli's
// libfaulty.so; the worker is the real kiln-rpc-session.
#include "kiln/measurement_worker.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "example_args.h"
#include "kiln/kiln.h"
#include "rpc/rpc_test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const fs::path kFaulty = KILN_FAULTY_KERNEL;
const fs::path kVectorAdd = fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so";

std::vector<Any> pair_of_tensors(int64_t n) {
  Tensor in = Tensor::empty({n}, DataType::Float(32));
  Tensor out = Tensor::empty({n}, DataType::Float(32));
  for (int64_t i = 0; i < n; ++i) {
    in.host_span<float>()[i] = static_cast<float>(i) * 0.5f;
    out.host_span<float>()[i] = -1.0f;
  }
  return {Any(in), Any(out)};
}

RunHooks calling(const std::string& function) {
  RunHooks hooks;
  hooks.function = function;
  return hooks;
}

const EvaluatorConfig kQuick{2, 3, 0, false};

bool process_exists(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// In a sanitizer build (CI's second pass) ASan would catch the workers' SIGSEGV, print its
// report and exit(1): the workers here die of the signal itself, as in a plain build.
[[maybe_unused]] const bool kWorkersDieOfTheirSignals = [] {
  kiln::test::add_asan_option_for_children("handle_segv=0");
  return true;
}();

// A good run: the outputs come back, the timing has its repeats, and the worker stays for the
// next run (same process, one start).
TEST(MeasurementWorker, RunsAndKeepsTheWorkerAcrossRuns) {
  Runtime& runtime = Runtime::global();
  MeasurementWorker worker(runtime);
  EXPECT_EQ(worker.pid(), -1) << "started lazily";
  std::vector<std::string> steps;
  RunHooks hooks = calling("copy");
  hooks.on_step = [&](const std::string& step, double) { steps.push_back(step); };
  RunResult first = worker.run_artifact(kFaulty, "cpu", pair_of_tensors(64), kQuick, hooks);
  ASSERT_EQ(first.outputs.size(), 2u);
  const Tensor out = first.outputs[1].cast<Tensor>();
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(out.host_span<float>()[i], i * 0.5f) << i;
  EXPECT_EQ(first.profile.results().size(), 3u);
  EXPECT_THAT(steps, ::testing::ElementsAre("start", "upload_module", "upload", "load", "time",
                                            "call", "download"));
  const pid_t pid = worker.pid();
  EXPECT_TRUE(process_exists(pid));
  for (int i = 0; i < 3; ++i) {
    worker.run_artifact(kVectorAdd, "cpu", kiln::test::vector_add_args(16), kQuick);
  }
  EXPECT_EQ(worker.pid(), pid);
  EXPECT_EQ(worker.starts(), 1);
  worker.close();
  EXPECT_EQ(worker.pid(), -1);
  EXPECT_FALSE(process_exists(pid)) << "close() ends the worker";
}

// A kernel's own error is an error of the run; the worker serves the next run.
TEST(MeasurementWorker, AnOrdinaryErrorKeepsTheWorker) {
  MeasurementWorker worker(Runtime::global());
  worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
  const pid_t pid = worker.pid();
  try {
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("no_such_kernel"));
    FAIL() << "a missing function ran";
  } catch (const WorkerError& e) {
    FAIL() << "a missing function is not a worker failure: " << e.what();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no_such_kernel"));
  }
  EXPECT_EQ(worker.pid(), pid);
  worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
  EXPECT_EQ(worker.starts(), 1);
}

// Crashes (SIGSEGV, SIGABRT) are WorkerErrors naming the signal, the function, the device and
// the plugin; the caller lives on and the next run starts a fresh worker.
TEST(MeasurementWorker, ACrashIsAFailedRunAndTheNextRunGetsAFreshWorker) {
  MeasurementWorker worker(Runtime::global());
  for (const auto& [function, signal, name] :
       {std::tuple{"segfault", SIGSEGV, "SIGSEGV"}, std::tuple{"abort", SIGABRT, "SIGABRT"}}) {
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
    const pid_t pid = worker.pid();
    try {
      worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling(function));
      FAIL() << function << " returned";
    } catch (const WorkerError& e) {
      EXPECT_EQ(e.kind(), WorkerError::Kind::kCrashed) << e.what();
      EXPECT_STREQ(e.kind_name(), "crashed");
      EXPECT_EQ(e.signal(), signal);
      EXPECT_THAT(e.what(), AllOf(HasSubstr(name), HasSubstr(fmt::format("'{}'", function)),
                                  HasSubstr("cpu:0"), HasSubstr("plugin")));
    }
    EXPECT_FALSE(process_exists(pid)) << "the dead worker is reaped";
    RunResult after =
        worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
    EXPECT_EQ(after.outputs[1].cast<Tensor>().host_span<float>()[3], 1.5f);
    EXPECT_NE(worker.pid(), pid);
  }
  EXPECT_EQ(worker.starts(), 3);
}

// A run past the worker's timeout: the worker is killed, the error says so, the next run works.
// The timeout bounds the next run too, in a fresh worker: 3 s, not 1, so that a sanitizer build
// on a loaded machine starts it in time (the fresh-Debian run saw 'copy' killed at 1 s).
TEST(MeasurementWorker, AHangPastTheTimeoutKillsTheWorker) {
  WorkerOptions options;
  options.timeout_s = 3;
  MeasurementWorker worker(Runtime::global(), options);
  const auto start = std::chrono::steady_clock::now();
  try {
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("hang"));
    FAIL() << "hang returned";
  } catch (const WorkerError& e) {
    EXPECT_EQ(e.kind(), WorkerError::Kind::kHung) << e.what();
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'hang'"), HasSubstr("did not finish within 3 s")));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
  EXPECT_EQ(worker.starts(), 2);
}

// SIGKILL from outside (what the out-of-memory killer sends) is told apart from a crash.
TEST(MeasurementWorker, AWorkerKilledFromOutsideIsReportedAsKilled) {
  MeasurementWorker worker(Runtime::global());
  worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
  const pid_t pid = worker.pid();
  auto run = std::async(std::launch::async, [&] {
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("hang"));
  });
  std::this_thread::sleep_for(300ms);  // into the hang (a kill sooner fails the run the same way)
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  try {
    run.get();
    FAIL() << "hang returned";
  } catch (const WorkerError& e) {
    EXPECT_EQ(e.kind(), WorkerError::Kind::kKilled) << e.what();
    EXPECT_EQ(e.signal(), SIGKILL);
    EXPECT_THAT(e.what(), HasSubstr("killed by SIGKILL"));
  }
}

// A memory cgroup below this process's, limited to `limit_bytes`, that this process joins while
// the object lives (its children, a worker started meanwhile, are then charged to it). cgroup v1
// (memory.limit_in_bytes) or v2 (memory.max); `why_not` says why none could be made (no
// memory controller, not writable: an unprivileged container), and then nothing was changed.
class LimitedMemoryCgroup {
 public:
  LimitedMemoryCgroup(uint64_t limit_bytes, std::string* why_not) {
    std::ifstream self("/proc/self/cgroup");
    std::string line;
    while (std::getline(self, line)) {
      if (const size_t at = line.find(":memory:"); at != std::string::npos) {
        parent_ = fs::path("/sys/fs/cgroup/memory") / line.substr(at + 9);
        limit_file_ = "memory.limit_in_bytes";
        swap_file_ = "memory.memsw.limit_in_bytes";
      } else if (line.rfind("0::", 0) == 0 && parent_.empty()) {
        parent_ = fs::path("/sys/fs/cgroup") / line.substr(4);
        limit_file_ = "memory.max";
        swap_file_ = "memory.swap.max";
      }
    }
    std::error_code ec;
    dir_ = parent_ / fmt::format("kiln-oom-test-{}", ::getpid());
    if (parent_.empty() || !fs::create_directory(dir_, ec) || ec) {
      *why_not = fmt::format("cannot make a memory cgroup under '{}' ({})", parent_.string(),
                             ec ? ec.message() : "no memory controller");
      dir_.clear();
      return;
    }
    if (!write(limit_file_, std::to_string(limit_bytes))) {
      *why_not = fmt::format("cannot set {} in {}", limit_file_, dir_.string());
      return;
    }
    write(swap_file_, limit_file_ == "memory.max" ? "0" : std::to_string(limit_bytes));
    if (!write("cgroup.procs", std::to_string(::getpid()))) {
      *why_not = fmt::format("cannot move this process into {}", dir_.string());
      return;
    }
    joined_ = true;
  }
  ~LimitedMemoryCgroup() {
    if (joined_) {
      std::ofstream(parent_ / "cgroup.procs") << ::getpid() << std::endl;
    }
    if (!dir_.empty()) {
      // Its last process (the killed worker) may take a moment to leave.
      kiln::test::wait_until([&] { return ::rmdir(dir_.c_str()) == 0; }, 5s);
    }
  }
  LimitedMemoryCgroup(const LimitedMemoryCgroup&) = delete;
  LimitedMemoryCgroup& operator=(const LimitedMemoryCgroup&) = delete;
  bool joined() const { return joined_; }

 private:
  bool write(const std::string& file, const std::string& value) {
    std::ofstream out(dir_ / file);
    out << value << std::endl;
    return static_cast<bool>(out);
  }

  fs::path parent_;
  fs::path dir_;
  std::string limit_file_;
  std::string swap_file_;
  bool joined_ = false;
};

// A worker the out-of-memory killer ends (in a cgroup limited to 256 MiB, a kernel that touches
// memory until it is killed) is a `killed` failure that says it was the out-of-memory killer.
TEST(MeasurementWorker, AWorkerKilledByTheOutOfMemoryKillerIsSaidToBe) {
  std::string why_not;
  LimitedMemoryCgroup cgroup(uint64_t{256} << 20, &why_not);
  if (!cgroup.joined()) GTEST_SKIP() << why_not;
  MeasurementWorker worker(Runtime::global());
  try {
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("hog"));
    GTEST_SKIP() << "4 GiB touched without an out-of-memory kill (swap without a limit?)";
  } catch (const WorkerError& e) {
    EXPECT_EQ(e.kind(), WorkerError::Kind::kKilled) << e.what();
    EXPECT_EQ(e.signal(), SIGKILL);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'hog'"), HasSubstr("from the out-of-memory killer")));
  }
}

// Nothing is left behind: no worker process, no temporary directory.
TEST(MeasurementWorker, LeavesNoProcessOrDirectoryBehind) {
  // A $TMPDIR of its own: other processes' workers come and go in the shared one.
  const fs::path tmp = fs::temp_directory_path() / fmt::format("kiln-worker-test-{}", getpid());
  fs::create_directories(tmp);
  const char* inherited = std::getenv("TMPDIR");
  const std::string previous = inherited ? inherited : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const auto workers = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(tmp)) {
      if (e.path().filename().string().rfind("kiln_worker_", 0) == 0) ++n;
    }
    return n;
  };
  const size_t before = workers();
  pid_t pid = -1;
  {
    MeasurementWorker worker(Runtime::global());
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
    pid = worker.pid();
    EXPECT_EQ(workers(), before + 1);
    EXPECT_THROW(
        worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("segfault")),
        WorkerError);
    EXPECT_EQ(workers(), before) << "a dead worker's directory goes with it";
    worker.run_artifact(kFaulty, "cpu", pair_of_tensors(8), kQuick, calling("copy"));
  }
  EXPECT_FALSE(process_exists(pid));
  EXPECT_EQ(workers(), before);
  EXPECT_EQ(before, 0u);
  if (inherited) {
    ::setenv("TMPDIR", previous.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln::testing
