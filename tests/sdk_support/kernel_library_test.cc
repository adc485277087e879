// SPDX-License-Identifier: Apache-2.0
// The SDK's kernel-library loader and default kernel environment (KilnSDK::support,
// kiln/sdk/support/kernel_library.hpp), on their own: a fake set of host services stands in for
// the host, and the example kernel library libvector_add.so is loaded from bytes and run with
// the default parallel_for across several threads.
#include "kiln/sdk/support/kernel_library.hpp"

#include <dlpack/dlpack.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"

namespace kiln::sdk {
namespace {

using ::testing::HasSubstr;

// The host side of the test: errors are heap strings with a code; every one made and freed is
// counted so that a leak or a double free shows.
struct TestError {
  int32_t code;
  std::string message;
};
std::atomic<int> g_live_errors{0};
KilnError* test_error_new(void*, int32_t code, const char* message) {
  ++g_live_errors;
  return reinterpret_cast<KilnError*>(new TestError{code, message != nullptr ? message : ""});
}
int32_t test_error_code(void*, const KilnError* e) {
  return reinterpret_cast<const TestError*>(e)->code;
}
const char* test_error_message(void*, const KilnError* e) {
  return reinterpret_cast<const TestError*>(e)->message.c_str();
}
void test_error_free(void*, KilnError* e) {
  --g_live_errors;
  delete reinterpret_cast<TestError*>(e);
}
std::mutex g_log_mu;
std::vector<std::string> g_log_lines;
void test_log(void*, int32_t, const char* plugin, const char* message) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log_lines.push_back(std::string(plugin) + "|" + message);
}

// Installs the fake host services as if a plugin had negotiated with them.
class KernelLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static KilnHostServices services = [] {
      KilnHostServices s = make_table<KilnHostServices>();
      s.error_new = test_error_new;
      s.error_code = test_error_code;
      s.error_message = test_error_message;
      s.error_free = test_error_free;
      s.log = test_log;
      return s;
    }();
    host_services() = &services;
    error_factory() = {nullptr, test_error_new, test_error_free};
    plugin_name() = "testplugin";
  }
  void TearDown() override { EXPECT_EQ(g_live_errors.load(), 0) << "an error leaked"; }
};

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

DLTensor vector_of(std::vector<float>& data, int64_t* shape) {
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

TEST_F(KernelLibraryTest, LoadsALibraryFromBytesAndRunsItAcrossThreads) {
  const std::vector<char> bytes = read_file(KILN_EXAMPLE_KERNEL_DIR "/libvector_add.so");
  ASSERT_FALSE(bytes.empty());
  DefaultKernelEnvs envs(4);
  auto library = KernelLibrary::open_bytes(bytes.data(), bytes.size(), {"test", envs.factory()});
  EXPECT_THAT(library->label(), HasSubstr("in-memory kernel library"));
  EXPECT_STREQ(library->table().entry_name, "vector_add");
  const KilnKernelFunction& f = library->function("vector_add");

  const int64_t n = 1 << 17;  // several chunks of the kernel's grain (2^14)
  std::vector<float> a(n), b(n), out(n);
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<float>(i), b[i] = 1.0f;
  int64_t shape[1] = {n};
  DLTensor ta = vector_of(a, shape), tb = vector_of(b, shape), tout = vector_of(out, shape);
  KilnAny args[4] = {};
  args[0].type_code = args[1].type_code = args[2].type_code = KILN_TYPE_TENSOR;
  args[0].value.v_tensor = &ta;
  args[1].value.v_tensor = &tb;
  args[2].value.v_tensor = &tout;
  args[3].type_code = KILN_TYPE_FLOAT;
  args[3].value.v_float64 = 2.0;
  KilnAny ret{};
  ASSERT_EQ(f.fn(f.self, args, 4, &ret), nullptr);
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(out[i], static_cast<float>(i) + 2.0f) << i;
  EXPECT_EQ(out[n - 1], static_cast<float>(n - 1) + 2.0f);

  // A kernel's own error comes back through the host's factory, with its message.
  args[3].type_code = KILN_TYPE_STRING;
  args[3].value.v_str = "two";
  KilnError* err = f.fn(f.self, args, 4, &ret);
  ASSERT_NE(err, nullptr);
  test_error_free(nullptr, err);
}

TEST_F(KernelLibraryTest, RefusesWhatIsNotAKernelLibraryAndNamesMissingFunctions) {
  DefaultKernelEnvs envs;
  try {
    KernelLibrary::open_file(KILN_MEMFD_TEST_LIBRARY, {"test", envs.factory()});
    FAIL() << "a plain shared library loaded as a kernel library";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    EXPECT_THAT(e.what(), HasSubstr("is not a Kiln kernel library: no kiln_kernel_library"));
  }
  try {
    KernelLibrary::open_file("/nonexistent/libx.so", {"test", envs.factory()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_NOT_FOUND);
  }
  auto library = KernelLibrary::open_file(KILN_EXAMPLE_KERNEL_DIR "/libvector_add.so",
                                          {"test", envs.factory()});
  try {
    library->function("vector_sub");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("no function 'vector_sub'"));
    EXPECT_THAT(e.what(), HasSubstr("available: vector_add"));
  }
  EXPECT_THROW(KernelLibrary::open_file(KILN_EXAMPLE_KERNEL_DIR "/libvector_add.so", {}), Error)
      << "options without an environment factory";
}

// The default parallel_for on its own: coverage, threads, grain, errors.
struct Coverage {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::set<std::thread::id> threads;
  int64_t fail_from = -1;  // chunks starting at or after this index fail
};
KilnError* record(void* closure, int64_t begin, int64_t end) {
  auto* c = static_cast<Coverage*>(closure);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->chunks.emplace_back(begin, end);
    c->threads.insert(std::this_thread::get_id());
  }
  // Keep every chunk busy long enough that the chunks overlap in time.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (c->fail_from >= 0 && begin >= c->fail_from) {
    return test_error_new(nullptr, KILN_ERROR_RUNTIME,
                          ("chunk at " + std::to_string(begin)).c_str());
  }
  return nullptr;
}

TEST_F(KernelLibraryTest, DefaultParallelForCoversTheRangeOnSeveralThreadsAndReturnsTheFirstError) {
  DefaultKernelEnvs envs(4);
  KernelLibraryEnv env = envs.factory()(reinterpret_cast<void*>(0x1), "lib");
  ASSERT_NE(env.env, nullptr);
  EXPECT_EQ(env.env->num_threads, 4);
  EXPECT_EQ(envs.factory()(reinterpret_cast<void*>(0x1), "lib").env, env.env)
      << "one environment per dlopen handle while it is in use";

  Coverage all;
  ASSERT_EQ(env.env->parallel_for(env.env->ctx, 10, 1010, 100, record, &all), nullptr);
  std::sort(all.chunks.begin(), all.chunks.end());
  ASSERT_EQ(all.chunks.size(), 4u);
  EXPECT_EQ(all.chunks.front().first, 10);
  EXPECT_EQ(all.chunks.back().second, 1010);
  for (size_t i = 1; i < all.chunks.size(); ++i) {
    EXPECT_EQ(all.chunks[i].first, all.chunks[i - 1].second) << "no gap, no overlap";
  }
  EXPECT_EQ(all.threads.size(), 4u);

  Coverage coarse;  // the grain limits the split: 1000 elements, grain 400 -> 2 chunks
  ASSERT_EQ(env.env->parallel_for(env.env->ctx, 0, 1000, 400, record, &coarse), nullptr);
  EXPECT_EQ(coarse.chunks.size(), 2u);

  Coverage failing;
  failing.fail_from = 500;
  KilnError* err = env.env->parallel_for(env.env->ctx, 0, 1000, 1, record, &failing);
  ASSERT_NE(err, nullptr);
  EXPECT_STREQ(test_error_message(nullptr, err), "chunk at 500") << "the first in range order";
  test_error_free(nullptr, err);  // the chunk at 750's error was freed by parallel_for

  EXPECT_EQ(env.env->parallel_for(env.env->ctx, 5, 5, 1, record, &all), nullptr) << "empty range";
  env.env->log(env.env->ctx, KILN_LOG_INFO, "hello");
  std::lock_guard<std::mutex> lock(g_log_mu);
  EXPECT_THAT(g_log_lines, ::testing::Contains("testplugin|lib: hello"));
}

}  // namespace
}  // namespace kiln::sdk
