// SPDX-License-Identifier: Apache-2.0
// Bad input on the TVM interop paths: libraries Kiln cannot run (an older TVM, a newer tvm-ffi,
// an unknown runtime service), truncated or corrupt library blobs and ELF files, and device
// code with nothing to run it. Each must be a clear error naming what and where, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <elf.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/private/task_team.h"
#include "test_util.h"
#include "tvm/elf_symbols.h"
#include "tvm/library_blob.h"
#include "tvm_fixtures.h"

namespace kiln::tvm_test {
namespace {

using ::testing::HasSubstr;
using tvm_interop::BlobModule;
using tvm_interop::parse_library_blob;

const fs::path kBad = KILN_TVM_BAD_LIBRARY_DIR;

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The bytes of `library`'s `__tvm_ffi__library_bin`: its address in the library Kiln loaded (as
// the loader finds it) and its size from the ELF symbol table.
// The bytes of the library's __tvm_ffi__library_bin, read from the file: the symbol's section
// maps its address to a file offset. (Kiln loads a private copy, so there is no handle of the
// file to dlsym in.)
std::vector<uint8_t> blob_of(const fs::path& library) {
  load_module(library);  // the loader validated it
  const std::vector<uint8_t> file = read_bytes(library);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(file.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(file.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const char* names =
        reinterpret_cast<const char*>(file.data() + sections[sections[i].sh_link].sh_offset);
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(file.data() + sections[i].sh_offset);
    for (size_t k = 0; k < sections[i].sh_size / sizeof(Elf64_Sym); ++k) {
      if (std::strcmp(names + syms[k].st_name, "__tvm_ffi__library_bin") != 0) continue;
      const Elf64_Shdr& home = sections[syms[k].st_shndx];
      const size_t at = home.sh_offset + (syms[k].st_value - home.sh_addr);
      return std::vector<uint8_t>(file.begin() + static_cast<std::ptrdiff_t>(at),
                                  file.begin() + static_cast<std::ptrdiff_t>(at + syms[k].st_size));
    }
  }
  ADD_FAILURE() << library << " has no __tvm_ffi__library_bin";
  return {};
}

std::vector<uint8_t> u64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

// A blob from its parts: the import tree in CSR form and modules given as (kind, bytes).
std::vector<uint8_t> make_blob(const std::vector<uint64_t>& indptr,
                               const std::vector<uint64_t>& children,
                               const std::vector<std::string>& kinds) {
  std::vector<uint8_t> body;
  auto put = [&](const std::vector<uint8_t>& b) { body.insert(body.end(), b.begin(), b.end()); };
  auto put_str = [&](const std::string& s) {
    put(u64(s.size()));
    body.insert(body.end(), s.begin(), s.end());
  };
  put(u64(indptr.size()));
  for (uint64_t v : indptr) put(u64(v));
  put(u64(children.size()));
  for (uint64_t v : children) put(u64(v));
  for (const std::string& k : kinds) {
    put_str(k);
    if (k != "_lib") put_str("payload");
  }
  body.insert(body.begin(), 8, uint8_t{0});
  const uint64_t length = body.size() - 8;
  std::memcpy(body.data(), &length, 8);
  return body;
}

// `prefix`: "test.so: byte " for errors at one place, "test.so: " for the tree as a whole.
void expect_value_error(const std::vector<uint8_t>& blob, const std::string& message,
                        const std::string& prefix = "test.so: byte ") {
  try {
    parse_library_blob(blob, "test.so");
    ADD_FAILURE() << "accepted a blob that should fail with: " << message;
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr(prefix)) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
}

TEST(TvmBadLibrary, ALibraryOfTheRuntimeBeforeTvmFfiIsRefusedWithTheVersions) {
  try {
    load_module(kBad / "libkiln_tvm_bad_old_abi.so");
    FAIL() << "loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("built by TVM 0.20 or earlier"));
    EXPECT_THAT(e.what(), HasSubstr("tvm-ffi 0.1 ABI (TVM 0.21 and later)"));
  }
}

TEST(TvmBadLibrary, AnImportOutsideKilnsTvmFfiSubsetIsNamed) {
  try {
    load_module(kBad / "libkiln_tvm_bad_newer_ffi.so");
    FAIL() << "loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs TVMFFIFunctionGetGlobal"));
    EXPECT_THAT(e.what(), HasSubstr("another tvm-ffi version"));
  }
}

TEST(TvmBadLibrary, AContextSymbolWithoutAServiceIsNamedBeforeItCanBeCalled) {
  try {
    load_module(kBad / "libkiln_tvm_bad_unknown_service.so");
    FAIL() << "loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("__TVMBackendRunOnHexagon"));
  }
}

TEST(TvmServices, ParallelTasksMeetAtTheBarrier) {
  Module m = load_module(kBad / "libkiln_tvm_bad_parallel_barrier.so");
  for (int round = 0; round < 20; ++round) {
    Tensor slots = Tensor::empty_host({256}, DataType::Int(64));
    std::fill(slots.host_span<int64_t>().begin(), slots.host_span<int64_t>().end(), 0);
    m.get_function("main")(slots);
    const auto s = slots.host_span<const int64_t>();
    const int64_t n = s[255];
    ASSERT_GE(n, 1);
    for (int64_t id = 0; id < n; ++id) {
      ASSERT_EQ(s[128 + id], n * (n + 1) / 2)
          << "task " << id << " of " << n << ", round " << round;
    }
  }
}

// Runs the barrier library's main once on `rt` and checks that every task saw every other;
// returns the number of tasks the launch ran.
int64_t run_barrier_once(const Runtime& rt) {
  Module m = rt.load_module(kBad / "libkiln_tvm_bad_parallel_barrier.so");
  Tensor slots = Tensor::empty({256}, DataType::Int(64), Device::cpu(), rt);
  std::fill(slots.host_span<int64_t>().begin(), slots.host_span<int64_t>().end(), 0);
  m.get_function("main")(slots);
  const auto s = slots.host_span<const int64_t>();
  const int64_t n = s[255];
  for (int64_t id = 0; id < n; ++id) EXPECT_EQ(s[128 + id], n * (n + 1) / 2) << "task " << id;
  return n;
}

// The cpu backend's "threads" and "threads_source" attributes.
std::pair<int64_t, std::string> cpu_threads(const Runtime& rt) {
  int64_t threads = -1;
  std::string source;
  for (const auto& [key, value] : rt.backend(kDLCPU)->attributes(0)) {
    if (key == "threads") threads = value.cast<int64_t>();
    if (key == "threads_source") source = value.cast<std::string>();
  }
  return {threads, source};
}

TEST(TvmServices, ALaunchRunsOnTheCpuPluginsTeamOfEverySize) {
  // One thread, two, and more threads than CPUs: every launch runs one task per team thread
  // and its barrier completes; the plugin reports the count that ran and where it came from.
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  for (const int n : {1, 2, 3, 64}) {
    ScopedEnv threads("KILN_NUM_THREADS", std::to_string(n));
    Runtime rt;
    EXPECT_EQ(run_barrier_once(rt), n);
    EXPECT_EQ(cpu_threads(rt), std::make_pair(int64_t{n}, std::string("KILN_NUM_THREADS")));
  }
}

TEST(TvmServices, ABadThreadCountIsAnErrorNamingIt) {
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  ScopedEnv threads("KILN_NUM_THREADS", "two");
  Runtime rt;
  bool reported = false;
  for (const PluginStatus& s : rt.plugins()) {
    if (s.name != "cpu") continue;
    EXPECT_THAT(s.reason, HasSubstr("KILN_NUM_THREADS='two' is invalid"));
    reported = true;
  }
  EXPECT_TRUE(reported);
}

TEST(TvmServices, AChildMadeByForkRunsLaunchesOnANewTeam) {
  // The parent's team threads do not exist in the child: its launches must not wait for them.
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  ScopedEnv threads("KILN_NUM_THREADS", "2");
  Runtime rt;
  ASSERT_EQ(run_barrier_once(rt), 2);  // the team's worker is running now
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // a hang ends the child with SIGALRM
    const bool ok = run_barrier_once(rt) == 2 && run_barrier_once(rt) == 2;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(run_barrier_once(rt), 2) << "the parent's team still works";
}

// What the nested-launch test's tasks share.
struct NestedLaunches {
  const KilnTaskTeam* team;
  std::atomic<int> outer{0};
  std::atomic<int> inner_single{0};
};

int32_t inner_task(void* closure, int32_t /*task*/, int32_t n) {
  if (n == 1) static_cast<NestedLaunches*>(closure)->inner_single.fetch_add(1);
  return 0;
}

int32_t outer_task(void* closure, int32_t /*task*/, int32_t n) {
  auto* shared = static_cast<NestedLaunches*>(closure);
  shared->outer.fetch_add(1);
  int32_t failed = -1;
  if (shared->team->run(shared->team->self, 0, inner_task, shared, &failed) != nullptr) return 1;
  return failed == 0 && n == 2 ? 0 : 2;
}

TEST(TaskTeam, ANestedLaunchRunsAsOneTaskOnItsCaller) {
  // From every task of a launch, the caller's task 0 included, a launch on the same team: the
  // team is busy, so it runs as one task where it was called, and nothing waits.
  ScopedEnv only_cpu("KILN_PLUGINS", "cpu");
  ScopedEnv threads("KILN_NUM_THREADS", "2");
  Runtime rt;
  const KilnTaskTeam* team = kiln_find_task_team(rt.backend(kDLCPU)->table().next);
  ASSERT_NE(team, nullptr);
  EXPECT_EQ(team->max_tasks, 2);
  NestedLaunches shared{team};
  int32_t failed = -1;
  ASSERT_EQ(team->run(team->self, 0, outer_task, &shared, &failed), nullptr);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(shared.outer.load(), 2);
  EXPECT_EQ(shared.inner_single.load(), 2) << "each nested launch ran as one task";
}

// Pins the calling thread to its first allowed CPU for the scope.
class PinnedToOneCpu {
 public:
  PinnedToOneCpu() {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &saved_)) {
        CPU_SET(c, &one);
        break;
      }
    }
    sched_setaffinity(0, sizeof(one), &one);
  }
  ~PinnedToOneCpu() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  int allowed() const { return CPU_COUNT(&saved_); }

 private:
  cpu_set_t saved_{};
};

TEST(TvmServices, OneCpuRunsALaunchAsOneTaskAndNeverHangs) {
  // As under `taskset -c 0` or a one-CPU cgroup: every thread of the process has one CPU.
  // (ctest runs each test in a process of its own, and this test starts no thread first.)
  ScopedEnv threads("KILN_NUM_THREADS", std::nullopt);
  PinnedToOneCpu pin;
  Runtime rt;
  EXPECT_EQ(run_barrier_once(rt), 1);
  const auto [count, source] = cpu_threads(rt);
  EXPECT_EQ(count, 1);
  EXPECT_THAT(source, HasSubstr("CPU affinity (1 CPU)"));
}

TEST(TvmServices, AMainThreadAnotherRuntimePinnedDoesNotShrinkTheTeam) {
  // TVM pins its main thread to one CPU; its other threads keep the rest. The union of the
  // process's threads' masks is what Kiln sizes from.
  ScopedEnv threads("KILN_NUM_THREADS", std::nullopt);
  std::atomic<bool> done{false};
  std::thread other([&] {
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  int allowed = 0;
  std::pair<int64_t, std::string> reported;
  {
    PinnedToOneCpu pin;
    allowed = pin.allowed();
    Runtime rt;
    reported = cpu_threads(rt);
    EXPECT_EQ(run_barrier_once(rt), allowed);
  }
  done = true;
  other.join();
  EXPECT_EQ(reported.first, allowed);
  EXPECT_THAT(reported.second, HasSubstr("CPU affinity"));
}

// A stand-in for another runtime's launch service (TVM's): counts its calls.
std::atomic<int> g_foreign_launches{0};
int foreign_launch(int (*lambda)(int, void*, void*), void* cdata, int /*num_task*/) {
  g_foreign_launches.fetch_add(1);
  struct {
    void* sync;
    int32_t num_task;
  } env{nullptr, 1};
  return lambda(0, &env, cdata);
}

TEST(TvmServices, AFileAnotherRuntimeLoadedKeepsItsSlotsAndKilnKeepsItsOwn) {
  // What TVM's loader does: dlopen the file and fill its context symbols with its services.
  const fs::path path = kBad / "libkiln_tvm_bad_parallel_barrier.so";
  void* theirs = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(theirs, nullptr) << dlerror();
  auto** slot = static_cast<void**>(dlsym(theirs, "__TVMBackendParallelLaunch"));
  ASSERT_NE(slot, nullptr);
  *slot = reinterpret_cast<void*>(&foreign_launch);
  g_foreign_launches = 0;

  ScopedEnv threads("KILN_NUM_THREADS", "2");
  Runtime rt;
  EXPECT_EQ(run_barrier_once(rt), 2) << "Kiln's call ran on Kiln's team";
  EXPECT_EQ(g_foreign_launches.load(), 0) << "Kiln's call reached the other runtime's service";
  EXPECT_EQ(*slot, reinterpret_cast<void*>(&foreign_launch)) << "Kiln overwrote their slot";

  // ...and a file Kiln loaded first is not shared with a later loader either.
  void* again = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_EQ(again, theirs) << "the dynamic loader hands out one object per file";
  dlclose(again);
  dlclose(theirs);
}

TEST(TvmBadLibrary, TruncatedElfFilesAreErrorsAtEveryLength) {
  const std::vector<uint8_t> file = read_bytes(kBad / "libkiln_tvm_bad_newer_ffi.so");
  ASSERT_GT(file.size(), 1000u);
  for (size_t n = 0; n < file.size(); n += 7) {
    const std::span<const uint8_t> part(file.data(), n);
    try {
      tvm_interop::read_dynamic_symbols(part, "cut.so");
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cut.so: "));
    }
    EXPECT_FALSE(tvm_interop::is_tvm_library(part) && n < 64) << n;
  }
}

TEST(TvmBadBlob, ACorruptImportTreeIsAnErrorNamingTheByte) {
  expect_value_error(std::vector<uint8_t>{1, 2, 3}, "truncated");
  expect_value_error(make_blob({0, 2, 1}, {1, 0}, {"_lib", "opencl"}), "index runs from 0 to 1");
  expect_value_error(make_blob({0, 2, 1}, {1}, {"_lib", "opencl"}), "decreases at module 1");
  expect_value_error(make_blob({0, 1, 1}, {7}, {"_lib", "opencl"}), "imports module 7");
  expect_value_error(make_blob({0, 1, 2}, {1, 0}, {"opencl", "cuda"}),
                     "the import tree has a cycle through module 0 ('opencl')", "test.so: ");
  expect_value_error(make_blob({0, 0, 0}, {}, {"_lib", "_lib"}), "a second '_lib'");
  expect_value_error(make_blob({0}, {}, {}), "no module");
  // The length covers 16 bytes: an index count of 2^64 - 1, then 8 more bytes.
  std::vector<uint8_t> huge(24, 0);
  huge[0] = 16;
  std::fill(huge.begin() + 8, huge.begin() + 16, uint8_t{0xff});
  expect_value_error(huge, "count");
  std::vector<uint8_t> too_long = make_blob({0, 0}, {}, {"_lib"});
  too_long[0] += 1;  // the length says one byte more than the symbol holds
  expect_value_error(too_long, "says it has");
}

class TvmBadFixtureBlob : public TvmFixtureTest {};

TEST_F(TvmBadFixtureBlob, ATarOfObjectFilesWithoutACompilerSaysWhatItNeeds) {
  const char* old = std::getenv("CXX");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("CXX", "/nonexistent/c++", 1);
  try {
    load_module(library("vadd_tar"));
    ADD_FAILURE() << "loaded";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds TVM object files"));
    EXPECT_THAT(e.what(), HasSubstr("host C++ compiler (set CXX)"));
  }
  if (old != nullptr) {
    ::setenv("CXX", saved.c_str(), 1);
  } else {
    ::unsetenv("CXX");
  }
  Module m = load_module(library("vadd_tar"));  // with the compiler back
  EXPECT_TRUE(m.has_function("vadd"));
}

TEST_F(TvmBadFixtureBlob, EveryTruncationOfARealBlobIsAnError) {
  const std::vector<uint8_t> blob = blob_of(library("vadd_opencl"));
  const auto modules = parse_library_blob(blob, "vadd_opencl.so");
  ASSERT_EQ(modules.size(), 2u);
  EXPECT_EQ(modules[0].kind, "_lib");
  EXPECT_EQ(modules[1].kind, "opencl");
  EXPECT_EQ(modules[0].imports, std::vector<size_t>{1});
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_THROW(parse_library_blob(std::span<const uint8_t>(blob.data(), n), "cut"), ValueError)
        << n;
  }
  // The device module itself, cut anywhere (the length prefix adjusted so the tree parses).
  const std::vector<uint8_t>& code = modules[1].bytes;
  for (size_t n = 0; n < code.size(); ++n) {
    BlobModule cut{"opencl", std::vector<uint8_t>(code.begin(), code.begin() + n), {}};
    EXPECT_THROW(tvm_interop::device_code_from_tvm(cut, "cut"), ValueError) << n;
  }
  const DeviceCode whole = tvm_interop::device_code_from_tvm(modules[1], "vadd_opencl.so");
  EXPECT_EQ(whole.format, "opencl_c");
  EXPECT_EQ(whole.target, "opencl");
  EXPECT_THAT(
      whole.metadata_json,
      HasSubstr(
          R"("vadd_kernel":{"args":["tensor","tensor","tensor"],"launch":["blockIdx.x","threadIdx.x"]})"));
}

TEST_F(TvmBadFixtureBlob, AnUnknownModuleKindOrCodeFormatIsNamed) {
  BlobModule vulkan{"vulkan", {1, 2, 3}, {}};
  EXPECT_THAT([&] { tvm_interop::device_code_from_tvm(vulkan, "x.so"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("kind 'vulkan'")));
  const auto modules = parse_library_blob(blob_of(library("vadd_opencl")), "vadd_opencl.so");
  BlobModule binary = modules[1];
  binary.bytes[8] = 'x';  // the format string "cl" -> "xl"
  EXPECT_THAT([&] { tvm_interop::device_code_from_tvm(binary, "x.so"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("code format 'xl'")));
}

TEST_F(TvmBadFixtureBlob, AKernelNameOrLaunchTagThatIsNotTextIsNamed) {
  // vadd_opencl's device module: format "cl" (8 + 2 bytes), the function count (8), then the
  // first name's length (8) and its text at byte 26; its first launch tag follows the two names
  // and the argument types. A byte that is not text made the metadata's JSON writer throw a
  // foreign exception (found by kiln_fuzz_tvm_blob).
  const auto modules = parse_library_blob(blob_of(library("vadd_opencl")), "vadd_opencl.so");
  BlobModule bad_name = modules[1];
  ASSERT_EQ(bad_name.bytes[26], 'v');
  bad_name.bytes[29] = 0x9c;
  EXPECT_THAT([&] { tvm_interop::device_code_from_tvm(bad_name, "x.so"); },
              ::testing::ThrowsMessage<ValueError>(
                  HasSubstr("x.so: byte 18: the function name has byte 0x9c at position 3")));
  BlobModule bad_tag = modules[1];
  const std::string tag = "blockIdx.x";
  auto at = std::search(bad_tag.bytes.begin(), bad_tag.bytes.end(), tag.begin(), tag.end());
  ASSERT_NE(at, bad_tag.bytes.end());
  *(at + 5) = '\n';
  EXPECT_THAT([&] { tvm_interop::device_code_from_tvm(bad_tag, "x.so"); },
              ::testing::ThrowsMessage<ValueError>(
                  HasSubstr("the launch tag has byte 0x0a at position 5, not printable ASCII")));
}

TEST_F(TvmBadFixtureBlob, DeviceCodeWithoutItsBackendSaysWhy) {
  // A runtime with no plugins: the library loads (the host reads it), its kernel cannot run.
  RuntimeOptions o;
  o.plugin_set = fs::path();
  o.read_environment = false;
  o.search_install_prefix = false;
  Runtime bare(o);
  Module m = bare.load_module(library("vadd_opencl"));
  Tensor a = Tensor::empty_host({4096}, DataType::Float(32));
  try {
    m.get_function("vadd")(a, a, a);
    FAIL() << "ran";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("vadd_opencl.so: vadd: "));
  }
  DLTensor view{};
  int64_t shape[1] = {4096};
  view.data = reinterpret_cast<void*>(0x1000);
  view.device = DLDevice{kDLOpenCL, 0};
  view.ndim = 1;
  view.dtype = DLDataType{kDLFloat, 32, 1};
  view.shape = shape;
  EXPECT_THAT([&] { m.imports()[0].get_function("vadd_kernel")(&view, &view, &view, 64, 64); },
              ::testing::ThrowsMessage<Error>(HasSubstr("opencl")));
}

}  // namespace
}  // namespace kiln::tvm_test
