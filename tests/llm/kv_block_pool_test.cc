// SPDX-License-Identifier: Apache-2.0
// The paged KV cache's host bookkeeping (llm/src/kv_block_pool.h) on its own, without TVM or a
// device. A long seeded random script of adds, removes, forks, pops and forward passes (refused
// calls included) is checked against a model after every step: a simulated page memory receives
// each pass's new tokens at the slots plan() hands out and each page copy the pool asks for, so
// every sequence must read back exactly its own tokens; pages are never both free and used, and
// two sequences share a slot only inside a common prefix. Targeted cases pin forks (at 0, at the
// end, on and inside a page, of a fork), pops into a shared prefix, and plan()'s tables against
// values computed by hand in TVM 0.27's layout (src/runtime/vm/paged_kv_cache.cc). Every refusal
// must leave the pool as it was: the same observable state and the same future (the next pages
// it hands out). The comparison with TVM's cache on real kernels is
// tests/python/test_llm_kv_cache.py.
#include "kv_block_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "llm/error_of.h"
#include "llm/kv_pool_helpers.h"

namespace kiln::llm {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using ::kiln::llm::testing::error_of;

struct PageCopy {
  int32_t src;
  int32_t dst;
  int32_t length;
  bool operator==(const PageCopy&) const = default;
};

void PrintTo(const PageCopy& c, std::ostream* os) {
  *os << "copy(src " << c.src << ", dst " << c.dst << ", length " << c.length << ")";
}

// A copy callback that records its calls.
struct CopyLog {
  std::vector<PageCopy> calls;
  KvBlockPool::CopyPage fn() {
    return [this](int32_t src, int32_t dst, int32_t length) {
      calls.push_back({src, dst, length});
    };
  }
};

using ::kiln::llm::testing::no_copy;

// Everything the pool shows of itself for the sequence ids in `ids` (absent: length -1).
struct Observed {
  int64_t free_pages = 0;
  int64_t total_length = 0;
  bool empty = false;
  std::map<int64_t, std::pair<int64_t, std::vector<int32_t>>> sequences;  // length, slots
  bool operator==(const Observed&) const = default;
};

void PrintTo(const Observed& o, std::ostream* os) {
  *os << "{free " << o.free_pages << ", total " << o.total_length << ", empty " << o.empty;
  for (const auto& [id, seq] : o.sequences) {
    *os << "; " << id << ": length " << seq.first << " slots [";
    for (int32_t s : seq.second) *os << s << " ";
    *os << "]";
  }
  *os << "}";
}

std::optional<int64_t> length_of(const KvBlockPool& pool, int64_t id) {
  try {
    return pool.sequence(id, "test").length;
  } catch (const ValueError&) {
    return std::nullopt;
  }
}

Observed observe(const KvBlockPool& pool, const std::vector<int64_t>& ids) {
  Observed o{pool.free_pages(), pool.total_length(), pool.empty(), {}};
  for (int64_t id : ids) {
    const std::optional<int64_t> length = length_of(pool, id);
    if (!length) {
      o.sequences[id] = {-1, {}};
    } else {
      o.sequences[id] = {*length,
                         *length > 0 ? pool.token_slots(id, 0, *length) : std::vector<int32_t>{}};
    }
  }
  return o;
}

constexpr int64_t kProbe = 1'000'000;

// The pool's future: the slots a new sequence gets when it takes every free page, in passes of
// `chunk` tokens (a multiple of the page size). Runs on a copy; the pool is not touched.
std::vector<int32_t> drain_slots(KvBlockPool pool, int64_t chunk) {
  std::vector<int32_t> slots;
  pool.add_sequence(kProbe);
  while (pool.free_pages() > 0) {
    const int64_t n = std::min(chunk, pool.free_pages() * pool.page_size());
    const ForwardPlan plan = pool.plan(std::vector<int64_t>{kProbe}, std::vector<int64_t>{n});
    slots.insert(slots.end(), plan.append_slots.begin(), plan.append_slots.end());
  }
  return slots;
}

// A refused call must leave `after` exactly like `before` (a copy taken before the call): the
// same state for every id and the same pages handed out next, in the same order.
void expect_unchanged(const KvBlockPool& before, const KvBlockPool& after,
                      const std::vector<int64_t>& ids, int64_t chunk) {
  EXPECT_EQ(observe(after, ids), observe(before, ids));
  EXPECT_EQ(drain_slots(after, chunk), drain_slots(before, chunk));
}

using ::kiln::llm::testing::plan_of;

// plan()'s tables must describe what each sequence holds: the entries of every depth a
// sequence's query rows fall in list, depth after depth, exactly the slots of its cached tokens
// (with the new ones when k/v is appended before attention), each from its RoPE position; the
// new tokens go to the slots the sequence lists for them afterwards.
void check_plan(const KvBlockPool& pool, const ForwardPlan& plan, const std::vector<int64_t>& ids,
                const std::vector<int64_t>& lengths, const std::vector<int64_t>& old_lengths) {
  const int64_t ps = pool.page_size();
  const size_t batch = ids.size();
  bool decode = true;
  std::vector<int32_t> append_indptr{0};
  std::vector<int32_t> q_positions;
  std::vector<int32_t> append_slots;
  for (size_t i = 0; i < batch; ++i) {
    decode = decode && lengths[i] == 1;
    append_indptr.push_back(append_indptr.back() + static_cast<int32_t>(lengths[i]));
    for (int64_t p = old_lengths[i]; p < old_lengths[i] + lengths[i]; ++p) {
      q_positions.push_back(static_cast<int32_t>(p));
    }
    const std::vector<int32_t> s =
        pool.token_slots(ids[i], old_lengths[i], old_lengths[i] + lengths[i]);
    append_slots.insert(append_slots.end(), s.begin(), s.end());
  }
  EXPECT_EQ(plan.append_indptr, append_indptr);
  EXPECT_THAT(plan.k_ragged_rope_offset,
              ElementsAreArray(std::vector<int32_t>(old_lengths.begin(), old_lengths.end())));
  EXPECT_EQ(plan.q_positions, q_positions);
  EXPECT_EQ(plan.append_slots, append_slots);
  ASSERT_GE(plan.depths.size(), 1u);
  ASSERT_LE(plan.depths.size(), static_cast<size_t>(KvBlockPool::kMaxDepth));
  EXPECT_EQ(plan.append_before_attention, plan.depths.back().use_decode_kernel);
  for (const DepthTables& t : plan.depths) {
    const size_t entries = t.last_page_len.size();
    ASSERT_EQ(t.qo_indptr.size(), entries + 1);
    ASSERT_EQ(t.page_indptr.size(), entries + 1);
    ASSERT_EQ(t.k_rope_offset.size(), entries);
    EXPECT_EQ(t.qo_indptr.back(), append_indptr.back());
    EXPECT_EQ(static_cast<size_t>(t.page_indptr.back()), t.page_indices.size());
    if (t.use_decode_kernel) {
      EXPECT_TRUE(decode);
      EXPECT_EQ(entries, batch);
    }
  }
  if (plan.depths.size() == static_cast<size_t>(KvBlockPool::kMaxDepth)) {
    EXPECT_EQ(plan.depths.back().last_page_len.size(), batch) << "the last depth is uncoalesced";
  }
  for (size_t i = 0; i < batch; ++i) {
    const int64_t visible = old_lengths[i] + (plan.append_before_attention ? lengths[i] : 0);
    const std::vector<int32_t> expected =
        visible > 0 ? pool.token_slots(ids[i], 0, visible) : std::vector<int32_t>{};
    std::vector<int32_t> seen;
    for (size_t d = 0; d < plan.depths.size(); ++d) {
      const DepthTables& t = plan.depths[d];
      size_t e = 0;
      while (e < t.last_page_len.size() && t.qo_indptr[e + 1] <= append_indptr[i]) ++e;
      ASSERT_LT(e, t.last_page_len.size()) << "sequence " << ids[i] << " depth " << d;
      ASSERT_LE(t.qo_indptr[e], append_indptr[i]);
      ASSERT_GE(t.qo_indptr[e + 1], append_indptr[i + 1]) << "an entry splits a sequence's rows";
      const int32_t pages = t.page_indptr[e + 1] - t.page_indptr[e];
      if (pages == 0) {
        EXPECT_EQ(t.last_page_len[e], 0);
        continue;
      }
      ASSERT_GE(t.last_page_len[e], 1);
      ASSERT_LE(t.last_page_len[e], ps);
      EXPECT_EQ(t.k_rope_offset[e], static_cast<int32_t>(seen.size()))
          << "sequence " << ids[i] << " depth " << d;
      const int64_t length = (pages - 1) * ps + t.last_page_len[e];
      for (int64_t tok = 0; tok < length; ++tok) {
        seen.push_back(
            static_cast<int32_t>(t.page_indices[t.page_indptr[e] + tok / ps] * ps + tok % ps));
      }
    }
    EXPECT_EQ(seen, expected) << "the pages sequence " << ids[i] << " reads";
  }
}

// ---- targeted cases ----------------------------------------------------------------------------

// Page size 4, 16 pages, at most 8 sequences and 64 tokens a pass; pages are handed out 0, 1, ...
KvBlockPool small_pool() { return KvBlockPool(16, 4, 8, 64); }

TEST(KvBlockPool, StartsEmptyAndHandsOutPagesFromZero) {
  KvBlockPool pool = small_pool();
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.free_pages(), 16);
  EXPECT_EQ(pool.total_length(), 0);
  pool.add_sequence(5);
  EXPECT_FALSE(pool.empty()) << "a sequence, even empty, makes the pool non-empty";
  const ForwardPlan plan = plan_of(pool, {5}, {6});
  EXPECT_THAT(plan.append_slots, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(pool.free_pages(), 14);
  EXPECT_EQ(pool.total_length(), 6);
  pool.remove_sequence(5);
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.free_pages(), 16);
}

TEST(KvBlockPool, PrefillThenDecodeTablesByHand) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  pool.add_sequence(1);
  // Prefill: the tables describe the pages before the append (none yet); ragged attention covers
  // the new tokens, then they are written to pages 0-1 (sequence 0) and 2 (sequence 1).
  ForwardPlan p = plan_of(pool, {0, 1}, {6, 3});
  ASSERT_EQ(p.depths.size(), 1u);
  EXPECT_FALSE(p.append_before_attention);
  EXPECT_FALSE(p.depths[0].use_decode_kernel);
  EXPECT_THAT(p.depths[0].qo_indptr, ElementsAre(0, 6, 9));
  EXPECT_THAT(p.depths[0].page_indptr, ElementsAre(0, 0, 0));
  EXPECT_THAT(p.depths[0].page_indices, IsEmpty());
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(0, 0));
  EXPECT_THAT(p.depths[0].k_rope_offset, ElementsAre(0, 0));
  EXPECT_THAT(p.append_indptr, ElementsAre(0, 6, 9));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(0, 0));
  EXPECT_THAT(p.q_positions, ElementsAre(0, 1, 2, 3, 4, 5, 0, 1, 2));
  EXPECT_THAT(p.append_slots, ElementsAre(0, 1, 2, 3, 4, 5, 8, 9, 10));
  EXPECT_EQ(pool.free_pages(), 13);

  // Decode (one token each, listed in another order): k/v is appended first and the decode
  // kernel reads the pages with the new token.
  p = plan_of(pool, {1, 0}, {1, 1});
  ASSERT_EQ(p.depths.size(), 1u);
  EXPECT_TRUE(p.append_before_attention);
  EXPECT_TRUE(p.depths[0].use_decode_kernel);
  EXPECT_THAT(p.depths[0].qo_indptr, ElementsAre(0, 1, 2));
  EXPECT_THAT(p.depths[0].page_indptr, ElementsAre(0, 1, 3));
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(2, 0, 1));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(4, 3));
  EXPECT_THAT(p.depths[0].k_rope_offset, ElementsAre(0, 0));
  EXPECT_THAT(p.append_indptr, ElementsAre(0, 1, 2));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(3, 6));
  EXPECT_THAT(p.q_positions, ElementsAre(3, 6));
  EXPECT_THAT(p.append_slots, ElementsAre(11, 6));
  EXPECT_EQ(pool.free_pages(), 13) << "both fit in their last pages";

  // A second prefill chunk for sequence 0 (length 7): the tables hold its two pages, the new
  // tokens fill page 1 and take page 3.
  p = plan_of(pool, {0}, {5});
  EXPECT_FALSE(p.append_before_attention);
  EXPECT_THAT(p.depths[0].qo_indptr, ElementsAre(0, 5));
  EXPECT_THAT(p.depths[0].page_indptr, ElementsAre(0, 2));
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 1));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(3));
  EXPECT_THAT(p.depths[0].k_rope_offset, ElementsAre(0));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(7));
  EXPECT_THAT(p.q_positions, ElementsAre(7, 8, 9, 10, 11));
  EXPECT_THAT(p.append_slots, ElementsAre(7, 12, 13, 14, 15));
  EXPECT_EQ(pool.total_length(), 16);
  EXPECT_THAT(pool.token_slots(0, 0, 12), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15));
  EXPECT_THAT(pool.token_slots(1, 0, 4), ElementsAre(8, 9, 10, 11));
  EXPECT_THAT(pool.token_slots(0, 5, 9), ElementsAre(5, 6, 7, 12));
}

TEST(KvBlockPool, ForkAtTheEndOnAPageBoundaryAndCoalescedPrefill) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {8});  // pages 0, 1, full
  pool.fork_sequence(0, 1, -1, no_copy);
  pool.fork_sequence(0, 2, 8, no_copy);
  EXPECT_EQ(pool.free_pages(), 14) << "forks on a page boundary copy nothing";
  EXPECT_EQ(pool.total_length(), 24);
  for (int64_t id : {0, 1, 2}) {
    EXPECT_THAT(pool.token_slots(id, 0, 8), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7)) << id;
  }
  // Both children read the shared prefix: one prefill entry over it for their five rows at depth
  // 0, then one entry each (empty before the append) at depth 1.
  const ForwardPlan p = plan_of(pool, {1, 2}, {3, 2});
  ASSERT_EQ(p.depths.size(), 2u);
  EXPECT_FALSE(p.append_before_attention);
  EXPECT_THAT(p.depths[0].qo_indptr, ElementsAre(0, 5));
  EXPECT_THAT(p.depths[0].page_indptr, ElementsAre(0, 2));
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 1));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(4));
  EXPECT_THAT(p.depths[0].k_rope_offset, ElementsAre(0));
  EXPECT_THAT(p.depths[1].qo_indptr, ElementsAre(0, 3, 5));
  EXPECT_THAT(p.depths[1].page_indptr, ElementsAre(0, 0, 0));
  EXPECT_THAT(p.depths[1].last_page_len, ElementsAre(0, 0));
  EXPECT_THAT(p.depths[1].k_rope_offset, ElementsAre(8, 8));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(8, 8));
  EXPECT_THAT(p.q_positions, ElementsAre(8, 9, 10, 8, 9));
  EXPECT_THAT(p.append_slots, ElementsAre(8, 9, 10, 12, 13));
  // The parent continues in a block of its own: a new page, not its children's.
  const ForwardPlan q = plan_of(pool, {0}, {1});
  EXPECT_THAT(q.append_slots, ElementsAre(16));
  EXPECT_THAT(pool.token_slots(0, 7, 9), ElementsAre(7, 16));
  EXPECT_THAT(pool.token_slots(1, 7, 11), ElementsAre(7, 8, 9, 10));
  EXPECT_THAT(pool.token_slots(2, 7, 10), ElementsAre(7, 12, 13));
}

TEST(KvBlockPool, ForkAtZeroSharesNothing) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {6});
  pool.fork_sequence(0, 1, 0, no_copy);
  EXPECT_EQ(pool.sequence(1, "test").length, 0);
  EXPECT_EQ(pool.free_pages(), 14);
  const ForwardPlan p = plan_of(pool, {1, 0}, {1, 1});
  ASSERT_EQ(p.depths.size(), 1u);
  EXPECT_THAT(p.append_slots, ElementsAre(8, 6));
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(2, 0, 1));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(1, 3));
  pool.remove_sequence(0);
  pool.remove_sequence(1);
  EXPECT_TRUE(pool.empty());
}

TEST(KvBlockPool, ForkInsideAPageCopiesThePartPage) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {6});  // pages 0 (full), 1 (2 tokens)
  CopyLog log;
  pool.fork_sequence(0, 1, 5, log.fn());
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{1, 2, 1}));
  EXPECT_THAT(pool.token_slots(1, 0, 5), ElementsAre(0, 1, 2, 3, 8));
  EXPECT_THAT(pool.token_slots(0, 0, 6), ElementsAre(0, 1, 2, 3, 4, 5));
  // At the end, inside a page: the two tokens of page 1 are copied.
  log.calls.clear();
  pool.fork_sequence(0, 2, -1, log.fn());
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{1, 3, 2}));
  EXPECT_THAT(pool.token_slots(2, 0, 6), ElementsAre(0, 1, 2, 3, 12, 13));
  EXPECT_EQ(pool.free_pages(), 12);
  // Each grows in its own page; the parent keeps page 1.
  const ForwardPlan p = plan_of(pool, {0, 1, 2}, {1, 1, 1});
  EXPECT_THAT(p.append_slots, ElementsAre(6, 9, 14));
  check_plan(pool, p, {0, 1, 2}, {1, 1, 1}, {6, 5, 6});
  // Removing the parent keeps the children's prefix; removing them frees everything.
  pool.remove_sequence(0);
  EXPECT_EQ(pool.free_pages(), 13);
  EXPECT_THAT(pool.token_slots(1, 0, 6), ElementsAre(0, 1, 2, 3, 8, 9));
  pool.remove_sequence(2);
  pool.remove_sequence(1);
  EXPECT_TRUE(pool.empty());
}

// Sequence 2 is a fork of a fork: its blocks are three deep (prefix [0 1], then [3], then its
// own), and plan() folds the third into the last depth's entry.
TEST(KvBlockPool, ForkOfAForkFoldsTheThirdDepth) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {10});  // pages 0, 1, 2
  pool.fork_sequence(0, 1, 8, no_copy);
  plan_of(pool, {1}, {6});  // pages 3, 4: sequence 1 has 14 tokens
  pool.fork_sequence(1, 2, 12, no_copy);
  EXPECT_THAT(pool.token_slots(2, 0, 12), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15));
  const std::vector<int64_t> ids{2, 0, 1};
  const std::vector<int64_t> ones{1, 1, 1};
  const ForwardPlan p = pool.plan(ids, ones);
  ASSERT_EQ(p.depths.size(), 2u);
  EXPECT_TRUE(p.append_before_attention);
  const DepthTables& d0 = p.depths[0];
  EXPECT_TRUE(d0.use_decode_kernel);
  EXPECT_THAT(d0.qo_indptr, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(d0.page_indptr, ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(d0.page_indices, ElementsAre(0, 1, 0, 1, 0, 1));
  EXPECT_THAT(d0.last_page_len, ElementsAre(4, 4, 4));
  EXPECT_THAT(d0.k_rope_offset, ElementsAre(0, 0, 0));
  const DepthTables& d1 = p.depths[1];
  EXPECT_TRUE(d1.use_decode_kernel);
  EXPECT_THAT(d1.qo_indptr, ElementsAre(0, 1, 2, 3));
  // Sequence 2: [3] and its own new page 5 (5 tokens); 0: [2] (3); 1: [3] and [4] (7).
  EXPECT_THAT(d1.page_indptr, ElementsAre(0, 2, 3, 5));
  EXPECT_THAT(d1.page_indices, ElementsAre(3, 5, 2, 3, 4));
  EXPECT_THAT(d1.last_page_len, ElementsAre(1, 3, 3));
  EXPECT_THAT(d1.k_rope_offset, ElementsAre(8, 8, 8));
  EXPECT_THAT(p.append_indptr, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(12, 10, 14));
  EXPECT_THAT(p.q_positions, ElementsAre(12, 10, 14));
  EXPECT_THAT(p.append_slots, ElementsAre(20, 10, 18));
  check_plan(pool, p, ids, ones, {12, 10, 14});

  // A fork of sequence 1 inside the first page of its own block copies that part page and hangs
  // off the block before it.
  CopyLog log;
  pool.fork_sequence(1, 3, 13, log.fn());
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{4, 6, 1}));
  EXPECT_THAT(pool.token_slots(3, 11, 13), ElementsAre(15, 24));
  const ForwardPlan q = plan_of(pool, {3}, {2});
  EXPECT_FALSE(q.append_before_attention);
  ASSERT_EQ(q.depths.size(), 2u);
  // Depth 1 folds block [3] and the copy: 5 tokens from position 8.
  EXPECT_THAT(q.depths[1].page_indices, ElementsAre(3, 6));
  EXPECT_THAT(q.depths[1].last_page_len, ElementsAre(1));
  EXPECT_THAT(q.depths[1].k_rope_offset, ElementsAre(8));
  EXPECT_THAT(q.append_slots, ElementsAre(25, 26));
}

TEST(KvBlockPool, PopnIntoASharedPrefixReforksAndPopnToZero) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {10});  // pages 0, 1, 2
  CopyLog log;
  pool.fork_sequence(0, 1, -1, log.fn());  // copies 2 tokens of page 2 to page 3
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{2, 3, 2}));
  log.calls.clear();
  // Within its own block: no copy, the page stays.
  pool.pop_tokens(1, 1, log.fn());
  EXPECT_THAT(log.calls, IsEmpty());
  EXPECT_EQ(pool.sequence(1, "test").length, 9);
  EXPECT_EQ(pool.free_pages(), 12);
  // Five more reach into the shared prefix (pages 0-1): its own page is freed and the sequence
  // becomes a fork of itself at position 4, a page boundary: no copy. One more, to 3, cuts
  // inside page 0: the fork copies those 3 tokens.
  pool.pop_tokens(1, 5, log.fn());
  EXPECT_THAT(log.calls, IsEmpty());
  EXPECT_EQ(pool.sequence(1, "test").length, 4);
  EXPECT_THAT(pool.token_slots(1, 0, 4), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(pool.free_pages(), 13);
  pool.pop_tokens(1, 1, log.fn());
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{0, 3, 3}));
  EXPECT_THAT(pool.token_slots(1, 0, 3), ElementsAre(12, 13, 14));
  EXPECT_THAT(pool.token_slots(0, 0, 10), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  EXPECT_EQ(pool.total_length(), 13);
  // It grows in its own copy, the parent in its own page.
  const ForwardPlan p = plan_of(pool, {1, 0}, {2, 3});
  check_plan(pool, p, {1, 0}, {2, 3}, {3, 10});
  EXPECT_THAT(p.append_slots, ElementsAre(15, 16, 10, 11, 20));
  // To zero: nothing of the prefix is left, the sequence is empty and can grow again.
  log.calls.clear();
  pool.pop_tokens(1, 5, log.fn());
  EXPECT_THAT(log.calls, IsEmpty());
  EXPECT_EQ(pool.sequence(1, "test").length, 0);
  EXPECT_EQ(pool.total_length(), 13);
  EXPECT_EQ(pool.free_pages(), 12);
  pool.pop_tokens(1, 0, no_copy);
  const ForwardPlan q = plan_of(pool, {1}, {2});
  EXPECT_EQ(q.depths.size(), 1u) << "no prefix left";
  EXPECT_THAT(q.q_positions, ElementsAre(0, 1));
  // The parent, popped to zero, frees all its pages: nothing is shared any more.
  pool.pop_tokens(0, 13, no_copy);
  EXPECT_EQ(pool.sequence(0, "test").length, 0);
  EXPECT_EQ(pool.free_pages(), 15);
  pool.remove_sequence(0);
  pool.remove_sequence(1);
  EXPECT_TRUE(pool.empty());
}

TEST(KvBlockPool, PopnIntoAPrefixSharedWithARemovedSequence) {
  // Once the other side of a fork is gone, its prefix is the sequence's own: popping into it
  // drops tokens in place, no copy.
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {10});
  pool.fork_sequence(0, 1, 6, CopyLog().fn());
  pool.remove_sequence(0);
  pool.pop_tokens(1, 5, no_copy);
  EXPECT_THAT(pool.token_slots(1, 0, 1), ElementsAre(0));
  EXPECT_EQ(pool.free_pages(), 15);
}

TEST(KvBlockPool, ClearForgetsEverything) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {10});
  pool.fork_sequence(0, 1, 5, CopyLog().fn());
  pool.clear();
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.free_pages(), 16);
  EXPECT_FALSE(length_of(pool, 0).has_value());
  pool.add_sequence(0);
  EXPECT_THAT(plan_of(pool, {0}, {2}).append_slots, ElementsAre(0, 1));
}

// ---- refusals ----------------------------------------------------------------------------------

// Two sequences (0: 14 tokens, 1: a fork of it at 8 with 2 tokens of its own) in 5 pages of 4
// tokens, at most 2 sequences and 8 tokens a pass: one page free.
struct RefusalFixture : ::testing::Test {
  KvBlockPool pool{5, 4, 2, 8};
  const std::vector<int64_t> ids{0, 1, 2, 3};
  void SetUp() override {
    pool.add_sequence(0);
    plan_of(pool, {0}, {8});
    plan_of(pool, {0}, {6});  // pages 0-3
    pool.fork_sequence(0, 1, 8, no_copy);
    ASSERT_EQ(pool.free_pages(), 1);
    plan_of(pool, {1}, {2});  // page 4
    ASSERT_EQ(pool.free_pages(), 0);
    pool.pop_tokens(1, 2, no_copy);  // page 4 back
    ASSERT_EQ(pool.free_pages(), 1);
    ASSERT_EQ(pool.sequence(1, "test").length, 8);
  }
  // Runs `f`, which must throw ValueError mentioning `what` and leave the pool as it was.
  template <typename F>
  void refused(F&& f, const std::string& what) {
    const KvBlockPool before = pool;
    EXPECT_THAT(error_of<ValueError>(f), HasSubstr(what));
    expect_unchanged(before, pool, ids, 8);
  }
};

TEST_F(RefusalFixture, SequenceIdsAndLengths) {
  refused([&] { pool.add_sequence(0); }, "sequence 0 is already in the KV cache");
  refused([&] { pool.remove_sequence(7); },
          "vm.builtin.kv_state_remove_sequence: sequence 7 is not in the KV cache");
  refused([&] { pool.fork_sequence(7, 2, -1, no_copy); },
          "vm.builtin.kv_state_fork_sequence: sequence 7 is not in the KV cache");
  refused([&] { pool.fork_sequence(0, 1, -1, no_copy); },
          "the child sequence 1 is already in the KV cache");
  refused([&] { pool.fork_sequence(0, 0, 4, no_copy); },
          "the child sequence 0 is already in the KV cache");
  refused([&] { pool.fork_sequence(0, 2, 15, no_copy); }, "fork position 15 is outside [-1, 14]");
  refused([&] { pool.fork_sequence(0, 2, -2, no_copy); }, "fork position -2 is outside [-1, 14]");
  refused([&] { pool.pop_tokens(7, 1, no_copy); },
          "vm.builtin.kv_state_popn: sequence 7 is not in the KV cache");
  refused([&] { pool.pop_tokens(1, 9, no_copy); },
          "cannot pop 9 tokens from sequence 1 of length 8");
  refused([&] { pool.pop_tokens(1, -1, no_copy); },
          "cannot pop -1 tokens from sequence 1 of length 8");
  refused([&] { pool.token_slots(0, 0, 15); }, "positions [0, 15) are outside sequence 0");
  refused([&] { pool.token_slots(0, 3, 3); }, "positions [3, 3) are outside sequence 0");
  refused([&] { pool.token_slots(0, -1, 2); }, "positions [-1, 2) are outside sequence 0");
}

TEST_F(RefusalFixture, ForwardPasses) {
  const char* who = "vm.builtin.kv_state_begin_forward: ";
  refused([&] { plan_of(pool, {7}, {1}); },
          "vm.builtin.kv_state_begin_forward: sequence 7 is not in the KV cache");
  refused([&] { plan_of(pool, {1, 7}, {1, 1}); }, "sequence 7 is not in the KV cache");
  refused([&] { plan_of(pool, {1, 1}, {1, 1}); }, std::string(who) + "sequence 1 is listed twice");
  refused([&] { plan_of(pool, {1}, {0}); },
          std::string(who) + "sequence 1 appends 0 tokens (at least 1)");
  refused([&] { plan_of(pool, {0, 1}, {1, -3}); }, "sequence 1 appends -3 tokens");
  refused([&] { plan_of(pool, {}, {}); }, "no sequences given");
  refused([&] { plan_of(pool, {0, 1}, {1}); }, "2 sequence ids but 1 lengths");
  pool.add_sequence(2);
  refused(
      [&] {
        plan_of(pool, {0, 1, 2}, {1, 1, 1});
      },
      "3 sequences in one pass; the KV cache was created for at most 2 (max_batch_size)");
  refused(
      [&] {
        plan_of(pool, {1, 2}, {4, 5});
      },
      "9 new tokens in one pass exceed the prefill chunk of 8 (prefill_chunk_size)");
  // One page free: sequence 0 (14 tokens) has room for 2 more in its page, then needs a page;
  // 1 (8 tokens) and 2 (empty) need a page for any token.
  refused(
      [&] {
        plan_of(pool, {1, 2}, {1, 1});
      },
      "the KV cache is out of pages: this pass needs 2 more, 1 of 5 are free");
  refused([&] { plan_of(pool, {0, 2}, {3, 1}); }, "this pass needs 2 more, 1 of 5 are free");
  refused([&] { plan_of(pool, {2}, {5}); }, "this pass needs 2 more, 1 of 5 are free");
  // What does fit still fits, after all those refusals.
  const ForwardPlan p = plan_of(pool, {0, 1}, {2, 1});
  check_plan(pool, p, {0, 1}, {2, 1}, {14, 8});
  EXPECT_EQ(pool.free_pages(), 0);
}

TEST_F(RefusalFixture, OutOfPagesForAPageCopy) {
  // Take the last page.
  pool.add_sequence(2);
  plan_of(pool, {2}, {1});
  ASSERT_EQ(pool.free_pages(), 0);
  refused([&] { pool.fork_sequence(0, 3, 13, no_copy); },
          "vm.builtin.kv_state_fork_sequence: the KV cache is out of pages (forking at position "
          "13 copies a partly shared page; all 5 pages are in use)");
  refused([&] { pool.fork_sequence(0, 3, -1, no_copy); }, "forking at position 14");
  refused([&] { pool.fork_sequence(1, 3, 3, no_copy); }, "forking at position 3");
  // Popping sequence 1 (8 tokens, all shared) to 5 would re-fork it inside page 1.
  refused([&] { pool.pop_tokens(1, 3, no_copy); },
          "vm.builtin.kv_state_popn: the KV cache is out of pages");
  // Forks and pops that cut on page boundaries need no page.
  pool.fork_sequence(0, 3, 12, no_copy);
  pool.pop_tokens(1, 4, no_copy);
  EXPECT_THAT(pool.token_slots(1, 0, 4), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(pool.token_slots(3, 0, 12), ElementsAreArray(pool.token_slots(0, 0, 12)));
}

TEST_F(RefusalFixture, PopnReForkUsesThePagesItFrees) {
  // Sequence 1 grows into page 4 (the last free one); popping it back into the shared prefix at
  // a position inside a page frees page 4 first, and the copy takes it.
  plan_of(pool, {1}, {3});
  ASSERT_EQ(pool.free_pages(), 0);
  CopyLog log;
  pool.pop_tokens(1, 5, log.fn());
  EXPECT_THAT(log.calls, ElementsAre(PageCopy{1, 4, 2}));
  EXPECT_THAT(pool.token_slots(1, 0, 6), ElementsAre(0, 1, 2, 3, 16, 17));
}

// A copy that fails (the device kernel throws) must leave the pool as it was too.
TEST_F(RefusalFixture, AFailedPageCopy) {
  auto failing = [](int32_t, int32_t, int32_t) { throw RuntimeError("copy kernel failed"); };
  for (int64_t at : {5, 14, -1}) {
    const KvBlockPool before = pool;
    EXPECT_THAT(error_of<RuntimeError>([&] { pool.fork_sequence(0, 2, at, failing); }),
                HasSubstr("copy kernel failed"));
    expect_unchanged(before, pool, ids, 8);
  }
  const KvBlockPool before = pool;
  EXPECT_THAT(error_of<RuntimeError>([&] { pool.pop_tokens(1, 2, failing); }),
              HasSubstr("copy kernel failed"));
  expect_unchanged(before, pool, ids, 8);
}

// No call of the public interface leaves a sequence whose last block another refers to (forks
// at a sequence's end give it a fresh block; pops into a shared prefix re-fork), so plan()'s
// "cannot grow: its last block is shared" check is a guard: every fork's parent and child grow.
TEST(KvBlockPool, ForkedSequencesCanAllGrow) {
  KvBlockPool pool = small_pool();
  pool.add_sequence(0);
  pool.fork_sequence(0, 10, -1, no_copy);  // forks of an empty sequence
  pool.fork_sequence(0, 11, 0, no_copy);
  plan_of(pool, {0}, {8});
  pool.fork_sequence(0, 1, -1, no_copy);  // at the end, on a page boundary
  pool.fork_sequence(1, 2, -1, no_copy);  // of a fork, at its (empty) last block
  pool.fork_sequence(0, 3, 4, no_copy);   // splits the parent's first block
  pool.pop_tokens(2, 4, no_copy);         // re-forks into the shared prefix
  pool.fork_sequence(2, 4, -1, no_copy);
  const std::vector<int64_t> ids{0, 1, 2, 3, 4, 10, 11};
  const std::vector<int64_t> ones(ids.size(), 1);
  const ForwardPlan p = pool.plan(ids, ones);
  check_plan(pool, p, ids, ones, {8, 8, 4, 4, 4, 0, 0});
}

// ---- the randomized script ---------------------------------------------------------------------

// The model: each sequence's tokens, every token a distinct number at the moment it is
// appended (a fork inherits its parent's numbers), and a simulated page memory the pool's slots
// and copies act on.
class Script {
 public:
  static constexpr int64_t kPages = 24;
  static constexpr int64_t kPageSize = 4;
  static constexpr int64_t kMaxSeqs = 4;
  static constexpr int64_t kChunk = 40;
  static constexpr int64_t kIds = 10;

  explicit Script(uint32_t seed) : rng_(seed), memory_(kPages * kPageSize, -1) {
    for (int64_t id = 0; id < kIds; ++id) ids_.push_back(id);
  }

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const int op = pick(0, 99);
      if (op < 10) {
        add();
      } else if (op < 18) {
        remove();
      } else if (op < 35) {
        fork();
      } else if (op < 50) {
        popn();
      } else {
        forward();
      }
      check();
      if (::testing::Test::HasFailure()) return;
    }
    for (auto it = tokens_.begin(); it != tokens_.end();) {
      pool_.remove_sequence(it->first);
      it = tokens_.erase(it);
      check();
    }
    EXPECT_TRUE(pool_.empty());
    EXPECT_EQ(pool_.free_pages(), kPages);
  }

  int refusals = 0;
  int successes = 0;
  int copies = 0;
  int max_depth = 0;

 private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  int64_t any_id() { return pick(0, kIds - 1); }
  int64_t length(int64_t id) const {
    auto it = tokens_.find(id);
    return it == tokens_.end() ? -1 : static_cast<int64_t>(it->second.size());
  }
  // Pages a sequence of `len` tokens needs to take `n` more (blocks start on page boundaries,
  // so a partly filled last page is the sequence's own).
  static int64_t pages_needed(int64_t len, int64_t n) {
    const int64_t room = len % kPageSize == 0 ? 0 : kPageSize - len % kPageSize;
    return n <= room ? 0 : (n - room + kPageSize - 1) / kPageSize;
  }

  KvBlockPool::CopyPage copier(std::vector<PageCopy>* calls) {
    return [this, calls](int32_t src, int32_t dst, int32_t n) {
      calls->push_back({src, dst, n});
      for (int32_t i = 0; i < n; ++i) memory_[dst * kPageSize + i] = memory_[src * kPageSize + i];
    };
  }

  // Runs a call that `expect_error` says must be refused (a message fragment) or must succeed
  // (empty); `maybe` allows either. Returns whether it succeeded; a refusal must leave the pool
  // as it was.
  template <typename F>
  bool attempt(F&& f, const std::string& expect_error, bool maybe = false) {
    const KvBlockPool before = pool_;
    const std::vector<int64_t> memory_before = memory_;
    try {
      f();
    } catch (const ValueError& e) {
      ++refusals;
      EXPECT_TRUE(maybe || !expect_error.empty()) << "refused: " << e.what();
      if (!expect_error.empty()) {
        EXPECT_THAT(e.what(), HasSubstr(expect_error));
      }
      expect_unchanged(before, pool_, ids_, kChunk);
      memory_ = memory_before;
      return false;
    }
    ++successes;
    EXPECT_TRUE(maybe || expect_error.empty()) << "not refused; expected: " << expect_error;
    return true;
  }

  void add() {
    const int64_t id = any_id();
    const bool present = tokens_.count(id) != 0;
    if (attempt([&] { pool_.add_sequence(id); }, present ? "already in the KV cache" : "")) {
      tokens_[id] = {};
    }
  }

  void remove() {
    const int64_t id = any_id();
    const bool present = tokens_.count(id) != 0;
    if (attempt([&] { pool_.remove_sequence(id); }, present ? "" : "is not in the KV cache")) {
      tokens_.erase(id);
    }
  }

  void fork() {
    const int64_t parent = any_id();
    const int64_t child = any_id();
    const int64_t plen = length(parent);
    const int64_t pos = pick(-2, std::max<int64_t>(plen, 0) + 1);
    const int64_t at = pos == -1 ? plen : pos;
    std::string expect;
    if (plen < 0) {
      expect = "is not in the KV cache";
    } else if (tokens_.count(child) != 0) {
      expect = "already in the KV cache";
    } else if (pos < -1 || pos > plen) {
      expect = "is outside";
    } else if (at % kPageSize != 0 && pool_.free_pages() == 0) {
      expect = "out of pages";
    }
    // The partly shared page at the fork point: the page of the parent's token at the last page
    // boundary before it.
    std::optional<PageCopy> copy;
    if (expect.empty() && at % kPageSize != 0) {
      const int32_t src = pool_.token_slots(parent, at - at % kPageSize, at)[0] / kPageSize;
      copy = PageCopy{src, -1, static_cast<int32_t>(at % kPageSize)};
    }
    std::vector<PageCopy> calls;
    const std::set<int32_t> used = used_pages();
    if (attempt([&] { pool_.fork_sequence(parent, child, pos, copier(&calls)); }, expect)) {
      tokens_[child] = std::vector<int64_t>(tokens_[parent].begin(), tokens_[parent].begin() + at);
      ASSERT_EQ(calls.size(), copy ? 1u : 0u);
      if (copy) {
        ++copies;
        EXPECT_EQ(calls[0].src, copy->src);
        EXPECT_EQ(calls[0].length, copy->length);
        EXPECT_EQ(used.count(calls[0].dst), 0u) << "the copy overwrote a page in use";
      }
    }
  }

  void popn() {
    const int64_t id = any_id();
    const int64_t len = length(id);
    const int64_t n = pick(-1, std::max<int64_t>(len, 0) + 1);
    std::string expect;
    bool maybe = false;
    if (len < 0) {
      expect = "is not in the KV cache";
    } else if (n < 0 || n > len) {
      expect = "cannot pop";
    } else if ((len - n) % kPageSize != 0 && pool_.free_pages() == 0) {
      // A re-fork into a shared prefix needs a page unless the pop frees one first.
      maybe = true;
    }
    std::vector<PageCopy> calls;
    if (attempt([&] { pool_.pop_tokens(id, n, copier(&calls)); }, expect, maybe)) {
      tokens_[id].resize(static_cast<size_t>(len - n));
      ASSERT_LE(calls.size(), 1u);
      if (!calls.empty()) {
        ++copies;
        EXPECT_EQ(calls[0].length, (len - n) % kPageSize);
      }
    } else if (maybe) {
      EXPECT_EQ(pool_.free_pages(), 0);
    }
  }

  void forward() {
    std::vector<int64_t> ids;
    std::vector<int64_t> lengths;
    const int64_t batch = pick(1, kMaxSeqs + 1);
    const bool decode = pick(0, 1) == 0;
    for (int64_t i = 0; i < batch; ++i) {
      // Mostly present sequences; now and then an absent one, a repeat or a bad length.
      int64_t id = any_id();
      for (int tries = 0; tries < 5 && tokens_.count(id) == 0; ++tries) id = any_id();
      ids.push_back(id);
      lengths.push_back(decode ? 1 : pick(1, 16));
      if (pick(0, 40) == 0) lengths.back() = pick(-1, 0);
    }
    std::string expect;
    int64_t total = 0;
    int64_t pages = 0;
    std::set<int64_t> seen;
    if (batch > kMaxSeqs) expect = "(max_batch_size)";
    for (int64_t i = 0; i < batch && expect.empty(); ++i) {
      if (tokens_.count(ids[i]) == 0) {
        expect = "is not in the KV cache";
      } else if (!seen.insert(ids[i]).second) {
        expect = "is listed twice";
      } else if (lengths[i] < 1) {
        expect = "(at least 1)";
      } else {
        total += lengths[i];
        pages += pages_needed(length(ids[i]), lengths[i]);
      }
    }
    if (expect.empty() && total > kChunk) expect = "(prefill_chunk_size)";
    if (expect.empty() && pages > pool_.free_pages()) expect = "out of pages";
    std::vector<int64_t> old_lengths;
    old_lengths.reserve(ids.size());
    for (int64_t id : ids) old_lengths.push_back(length(id));
    const int64_t free_before = pool_.free_pages();
    ForwardPlan plan;
    if (!attempt([&] { plan = pool_.plan(ids, lengths); }, expect)) return;
    EXPECT_EQ(pool_.free_pages(), free_before - pages);
    size_t next = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t j = 0; j < lengths[i]; ++j) {
        tokens_[ids[i]].push_back(next_token_);
        memory_[plan.append_slots[next++]] = next_token_++;
      }
    }
    check_plan(pool_, plan, ids, lengths, old_lengths);
    max_depth = std::max(max_depth, static_cast<int>(plan.depths.size()));
  }

  std::set<int32_t> used_pages() const {
    std::set<int32_t> pages;
    for (const auto& [id, toks] : tokens_) {
      if (toks.empty()) continue;
      for (int32_t slot : pool_.token_slots(id, 0, static_cast<int64_t>(toks.size()))) {
        pages.insert(slot / static_cast<int32_t>(kPageSize));
      }
    }
    return pages;
  }

  void check() {
    int64_t total = 0;
    std::map<int32_t, std::pair<int64_t, int64_t>> owner;  // slot -> (sequence, position)
    std::map<int64_t, std::vector<int32_t>> slots_of;
    for (const auto& [id, toks] : tokens_) {
      const auto len = static_cast<int64_t>(toks.size());
      total += len;
      ASSERT_EQ(length_of(pool_, id), len) << "sequence " << id;
      if (len == 0) continue;
      const std::vector<int32_t> slots = pool_.token_slots(id, 0, len);
      slots_of[id] = slots;
      std::set<int32_t> pages;
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_EQ(slots[i] % kPageSize, i % kPageSize) << "sequence " << id << " token " << i;
        if (i % kPageSize == 0) {
          EXPECT_TRUE(pages.insert(slots[i] / kPageSize).second)
              << "sequence " << id << " lists page " << slots[i] / kPageSize << " twice";
        } else {
          EXPECT_EQ(slots[i], slots[i - 1] + 1) << "sequence " << id << " token " << i;
        }
        EXPECT_EQ(memory_[slots[i]], toks[i]) << "sequence " << id << " token " << i;
        auto [it, fresh] = owner.emplace(slots[i], std::pair{id, i});
        if (!fresh) {
          // Shared: the same position, and the whole prefix before it shared too.
          const auto [other, pos] = it->second;
          ASSERT_EQ(pos, i) << "sequences " << other << " and " << id << " share slot " << slots[i]
                            << " at different positions";
          EXPECT_TRUE(std::equal(slots.begin(), slots.begin() + i, slots_of[other].begin()))
              << "sequences " << other << " and " << id << " share slot " << slots[i]
              << " but not the prefix before it";
        }
      }
    }
    EXPECT_EQ(pool_.total_length(), total);
    EXPECT_EQ(pool_.empty(), tokens_.empty());
    // Every page is used or free, not both: the free ones are exactly the pages a new sequence
    // takes when it takes them all.
    const std::set<int32_t> used = used_pages();
    const std::vector<int32_t> drained = drain_slots(pool_, kChunk);
    std::set<int32_t> free;
    for (int32_t slot : drained) free.insert(slot / static_cast<int32_t>(kPageSize));
    EXPECT_EQ(static_cast<int64_t>(free.size()), pool_.free_pages());
    EXPECT_EQ(static_cast<int64_t>(used.size()) + pool_.free_pages(), kPages)
        << "pages lost or counted twice";
    for (int32_t page : free) EXPECT_EQ(used.count(page), 0u) << "page " << page;
  }

  std::mt19937 rng_;
  KvBlockPool pool_{kPages, kPageSize, kMaxSeqs, kChunk};
  std::vector<int64_t> memory_;  // token number at each slot, -1: never written
  std::map<int64_t, std::vector<int64_t>> tokens_;
  std::vector<int64_t> ids_;
  int64_t next_token_ = 0;
};

TEST(KvBlockPoolRandom, InvariantsHoldThroughALongScript) {
  for (uint32_t seed : {36u, 1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Script script(seed);
    script.run(1500);
    if (HasFailure()) return;
    // The script did reach what it is for.
    EXPECT_GT(script.refusals, 100);
    EXPECT_GT(script.successes, 400);
    EXPECT_GT(script.copies, 20);
    EXPECT_EQ(script.max_depth, KvBlockPool::kMaxDepth);
  }
}

}  // namespace
}  // namespace kiln::llm
