// SPDX-License-Identifier: Apache-2.0
// Helpers of the KvBlockPool tests (kv_block_pool_test.cc, kv_sliding_window_test.cc).
#ifndef KILN_TESTS_LLM_KV_POOL_HELPERS_H_
#define KILN_TESTS_LLM_KV_POOL_HELPERS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv_block_pool.h"

namespace kiln::llm::testing {

// A page-copy callback for operations that must not copy a page: any call fails the test.
inline void no_copy(int32_t src, int32_t dst, int32_t length) {
  ADD_FAILURE() << "unexpected page copy " << src << " -> " << dst << " (" << length << ")";
}

// `pool.plan(ids, lengths)` with braced lists at the call site.
inline ForwardPlan plan_of(KvBlockPool& pool, std::vector<int64_t> ids,
                           std::vector<int64_t> lengths) {
  return pool.plan(ids, lengths);
}

}  // namespace kiln::llm::testing

#endif  // KILN_TESTS_LLM_KV_POOL_HELPERS_H_
