// SPDX-License-Identifier: Apache-2.0
// The host workspace pool TVM-compiled code's scratch comes from (core/src/tvm).
#include "tvm/host_workspace_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace kiln::tvm_interop {
namespace {

TEST(HostWorkspacePool, ReusesAReturnedBlockOfTheSameSizeClass) {
  HostWorkspacePool pool;
  void* a = pool.alloc(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 1, 100);
  EXPECT_TRUE(pool.free(a));
  EXPECT_EQ(pool.alloc(128), a);  // 100 and 128 share the 128-byte class
  void* b = pool.alloc(100);      // a is taken: a new block
  EXPECT_NE(b, a);
  EXPECT_TRUE(pool.free(a));
  EXPECT_TRUE(pool.free(b));
}

TEST(HostWorkspacePool, RefusesPointersItDidNotHandOut) {
  HostWorkspacePool pool;
  int local = 0;
  EXPECT_FALSE(pool.free(&local));
  EXPECT_FALSE(pool.free(nullptr));
  void* a = pool.alloc(0);  // an empty workspace is still a distinct block
  EXPECT_NE(a, nullptr);
  EXPECT_TRUE(pool.free(a));
}

TEST(HostWorkspacePool, LiveBlocksNeverOverlapAndIdleBytesAreCapped) {
  HostWorkspacePool pool(/*max_idle_bytes=*/8192);
  std::vector<void*> live;
  for (size_t n : {1, 64, 65, 4096, 4097, 10000, 1, 64}) live.push_back(pool.alloc(n));
  std::set<void*> distinct(live.begin(), live.end());
  EXPECT_EQ(distinct.size(), live.size());
  for (void* p : live) EXPECT_TRUE(pool.free(p));  // past the cap the blocks are freed
  EXPECT_NE(pool.alloc(16384), nullptr);
}

TEST(HostWorkspacePool, ThreadsTakeAndReturnBlocksConcurrently) {
  HostWorkspacePool pool;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        auto* p = static_cast<unsigned char*>(pool.alloc(static_cast<size_t>(64 * (1 + i % 7))));
        p[0] = static_cast<unsigned char>(t);
        EXPECT_EQ(p[0], t);
        EXPECT_TRUE(pool.free(p));
      }
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace kiln::tvm_interop
