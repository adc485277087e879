// SPDX-License-Identifier: Apache-2.0
// Sliding window in the paged KV cache's host bookkeeping (llm/src/kv_block_pool.h), without TVM
// or a device: the pages, slots and tables of TVM 0.27's EnableSlidingWindowForSeq layout
// (src/runtime/vm/paged_kv_cache.cc: ReserveAppendLengthInSeq, SlideWindowForSequence, the
// 3-row length info) worked out by hand on pages of 4 tokens, the borrowed page a sliding
// sequence takes when no page is free, the refusals (each leaves the pool as it was), and a
// seeded random script checked against a model of what every sequence must still hold: its sink
// and its last tokens, read back through token_slots and through each pass's tables. The
// comparison with TVM's cache on real kernels is tests/python/test_llm_sliding_window.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "kiln/error.h"
#include "kv_block_pool.h"
#include "llm/error_of.h"
#include "llm/kv_pool_helpers.h"

namespace kiln::llm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::kiln::llm::testing::error_of;

using ::kiln::llm::testing::no_copy;

using ::kiln::llm::testing::plan_of;

// Page size 4, `pages` pages, at most 8 sequences and 64 tokens a pass, sliding window on.
KvBlockPool sliding_pool(int64_t pages = 16) { return KvBlockPool(pages, 4, 8, 64, true); }

TEST(KvSlidingWindow, WithoutSinkTheWindowSlidesAndFreesItsFirstPage) {
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 8, 0);
  ForwardPlan p = plan_of(pool, {0}, {6});
  EXPECT_THAT(p.append_slots, ElementsAre(0, 1, 2, 3, 4, 5));
  // A decode step attends before it appends in a sliding-window cache (TVM's rule).
  p = plan_of(pool, {0}, {1});
  EXPECT_FALSE(p.append_before_attention);
  EXPECT_TRUE(p.depths[0].use_decode_kernel);
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 1));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(2));
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(0));
  EXPECT_THAT(p.depths[0].sink_size, ElementsAre(0));
  EXPECT_THAT(p.append_slots, ElementsAre(6));
  // 10 tokens: the window keeps the last 8, which start 2 tokens into page 0.
  p = plan_of(pool, {0}, {3});
  EXPECT_THAT(p.q_positions, ElementsAre(7, 8, 9));
  EXPECT_THAT(p.append_slots, ElementsAre(7, 8, 9));
  EXPECT_EQ(pool.total_length(), 8);
  EXPECT_EQ(pool.free_pages(), 13);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(2, 3, 4, 5, 6, 7, 8, 9));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 1, 2));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(2));  // (8 + 2 - 1) % 4 + 1
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(2));
  EXPECT_THAT(p.depths[0].k_rope_offset, ElementsAre(0));
  EXPECT_THAT(p.k_ragged_rope_offset, ElementsAre(8)) << "positions stay within the window";
  EXPECT_THAT(p.q_positions, ElementsAre(8));
  EXPECT_THAT(p.append_slots, ElementsAre(10));
  // The next token moves the window's start past page 0, which is freed.
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(3));
  EXPECT_THAT(p.append_slots, ElementsAre(11));
  EXPECT_EQ(pool.free_pages(), 14);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(4, 5, 6, 7, 8, 9, 10, 11));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(1, 2));
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(0));
  EXPECT_THAT(p.append_slots, ElementsAre(0)) << "page 0, freed last, is handed out first";
}

TEST(KvSlidingWindow, TheSinkStaysAndTokensSlidOutInTheSamePassAreNotWritten) {
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 8, 2);
  // 10 tokens in one pass: the sink keeps 0-1, tokens 2-3 slide out at once (slot -1), 4-9 stay.
  ForwardPlan p = plan_of(pool, {0}, {10});
  EXPECT_THAT(p.append_slots, ElementsAre(0, 1, -1, -1, 4, 5, 6, 7, 8, 9));
  EXPECT_EQ(pool.total_length(), 8);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(0, 1, 4, 5, 6, 7, 8, 9));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 1, 2));
  EXPECT_THAT(p.depths[0].last_page_len, ElementsAre(2));  // (8 - 2 + 4 - 1) % 4 + 1
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(4));
  EXPECT_THAT(p.depths[0].sink_size, ElementsAre(2));
  EXPECT_THAT(p.append_slots, ElementsAre(10));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.append_slots, ElementsAre(11));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.append_slots, ElementsAre(12)) << "page 3";
  EXPECT_EQ(pool.free_pages(), 12);
  // The window leaves page 1 (the page after the sink page): freed, the sink page stays.
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(7));
  EXPECT_THAT(p.append_slots, ElementsAre(13));
  EXPECT_EQ(pool.free_pages(), 13);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(0, 1, 8, 9, 10, 11, 12, 13));
  p = plan_of(pool, {0}, {1});
  EXPECT_THAT(p.depths[0].page_indices, ElementsAre(0, 2, 3));
  EXPECT_THAT(p.depths[0].window_offset, ElementsAre(4));
  EXPECT_THAT(p.depths[0].sink_size, ElementsAre(2));
}

TEST(KvSlidingWindow, ASlidingSequenceBorrowsThePageItsWindowFrees) {
  KvBlockPool pool = sliding_pool(3);
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 8, 0);
  plan_of(pool, {0}, {8});                  // pages 0, 1
  ForwardPlan p = plan_of(pool, {0}, {4});  // page 2; page 0 slides out
  EXPECT_THAT(p.append_slots, ElementsAre(8, 9, 10, 11));
  EXPECT_EQ(pool.free_pages(), 1);
  // 5 more need two pages with one free: the second is borrowed until the window frees page 1.
  p = plan_of(pool, {0}, {5});
  EXPECT_THAT(p.append_slots, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(9, 10, 11, 0, 1, 2, 3, 4));
  // A sequence that does not slide cannot borrow: refused, nothing changed.
  pool.add_sequence(1);
  EXPECT_THAT(error_of<ValueError>([&] { plan_of(pool, {1}, {1}); }),
              HasSubstr("out of pages: this pass needs 1 more, 0 of 3 are free"));
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(9, 10, 11, 0, 1, 2, 3, 4));
  EXPECT_EQ(pool.total_length(), 8);
}

TEST(KvSlidingWindow, PagesAreCountedInBatchOrder) {
  // No page is free. Sequence 0's window frees a page as it takes a token, sequence 1 needs one:
  // in that order the pass fits (as in TVM, which reserves in batch order); the other way round
  // it does not, and is refused before anything changes.
  KvBlockPool pool = sliding_pool(4);
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 8, 0);
  plan_of(pool, {0}, {8});
  for (int i = 0; i < 3; ++i) plan_of(pool, {0}, {1});  // pages 0-2, the window 3 tokens in
  pool.add_sequence(1);
  plan_of(pool, {1}, {4});  // page 3
  ASSERT_EQ(pool.free_pages(), 0);
  EXPECT_THAT(error_of<ValueError>([&] {
                plan_of(pool, {1, 0}, {1, 1});
              }),
              HasSubstr("out of pages: this pass needs 1 more, 0 of 4 are free"));
  EXPECT_EQ(pool.total_length(), 12);
  const ForwardPlan p = plan_of(pool, {0, 1}, {1, 1});
  EXPECT_THAT(p.append_slots, ElementsAre(11, 0)) << "sequence 1 gets the page 0 freed";
  EXPECT_EQ(pool.free_pages(), 0);
}

TEST(KvSlidingWindow, EnableIsCheckedAndChangesNothingWhenRefused) {
  KvBlockPool plain(16, 4, 8, 64);
  plain.add_sequence(0);
  EXPECT_THAT(error_of<ValueError>([&] { plain.enable_sliding_window(0, 8, 0); }),
              HasSubstr("vm.builtin.attention_kv_cache_enable_sliding_window_for_seq: the KV "
                        "cache does not support sliding window"));
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(3, 8, 0); }),
              HasSubstr("sequence 3 is not in the KV cache"));
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(0, 8, -1); }),
              HasSubstr("attention sink size -1 is negative"));
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(0, 0, 0); }),
              HasSubstr("sliding window size 0 is outside"));
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(0, 8, 8); }),
              HasSubstr("sink size 8 must be less than the sliding window size 8"));
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(0, int64_t{1} << 31, 0); }),
              HasSubstr("outside [1, 2147483647]"));
  // None of that took: the sequence grows past 8 without sliding.
  plan_of(pool, {0}, {12});
  EXPECT_EQ(pool.total_length(), 12);
  pool.enable_sliding_window(0, 8, 0);
  EXPECT_THAT(error_of<ValueError>([&] { pool.enable_sliding_window(0, 9, 0); }),
              HasSubstr("sequence 0 already has a sliding window (size 8)"));
  // Enabled on a sequence longer than the window: its next pass slides it back to 8.
  plan_of(pool, {0}, {1});
  EXPECT_EQ(pool.total_length(), 8);
  EXPECT_THAT(pool.token_slots(0, 0, 8), ElementsAre(5, 6, 7, 8, 9, 10, 11, 12));
}

TEST(KvSlidingWindow, ForksOnlyWithinTheSinkAndKeepsTheParentsSlots) {
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 12, 6);
  plan_of(pool, {0}, {16});  // pages 0-3; tokens 6-9 slide out at once
  const std::vector<int32_t> parent = pool.token_slots(0, 0, 12);
  EXPECT_THAT(parent, ElementsAre(0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(error_of<ValueError>([&] { pool.fork_sequence(0, 1, 7, no_copy); }),
              HasSubstr("vm.builtin.kv_state_fork_sequence: sequence 0 has a sliding window and "
                        "can be forked only within its attention sink (6 tokens), not at "
                        "position 7"));
  EXPECT_THAT(error_of<ValueError>([&] { pool.fork_sequence(0, 1, -1, no_copy); }),
              HasSubstr("not at position 12"));
  // At 5: page 0 becomes a prefix both share, token 4 is copied for the child. The parent still
  // reads its sink and window where they are (TVM 0.27 would not: it keeps the block's sink
  // length and window offset, which no longer fit its pages).
  std::vector<std::vector<int32_t>> copies;
  pool.fork_sequence(0, 1, 5, [&](int32_t src, int32_t dst, int32_t length) {
    copies.push_back({src, dst, length});
  });
  EXPECT_THAT(copies, ElementsAre(ElementsAre(1, 4, 1)));
  EXPECT_EQ(pool.token_slots(0, 0, 12), parent);
  EXPECT_THAT(pool.token_slots(1, 0, 5), ElementsAre(0, 1, 2, 3, 16));
  // The rest of the sink (tokens 4-5) stays in the parent's last block as it slides on.
  ForwardPlan p = plan_of(pool, {0}, {1});
  ASSERT_EQ(p.depths.size(), 2u);
  EXPECT_THAT(p.depths[1].page_indices, ElementsAre(1, 2, 3));
  EXPECT_THAT(p.depths[1].sink_size, ElementsAre(2));
  EXPECT_THAT(p.depths[1].window_offset, ElementsAre(6));
  EXPECT_THAT(p.depths[1].last_page_len, ElementsAre(4));  // (8 - 2 + 6 - 1) % 4 + 1
  EXPECT_THAT(p.append_slots, ElementsAre(20)) << "page 5, the next free one";
  EXPECT_THAT(pool.token_slots(0, 0, 12), ElementsAre(0, 1, 2, 3, 4, 5, 11, 12, 13, 14, 15, 20));
}

TEST(KvSlidingWindow, PopnWithinTheWindowAndItsRefusals) {
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  pool.enable_sliding_window(0, 8, 2);
  plan_of(pool, {0}, {10});
  for (int i = 0; i < 4; ++i) plan_of(pool, {0}, {1});
  const std::vector<int32_t> before = pool.token_slots(0, 0, 8);
  EXPECT_THAT(before, ElementsAre(0, 1, 8, 9, 10, 11, 12, 13));
  // The window starts at page 2: popping 3 frees page 3 (slots 12-13), page 2 keeps 8-10.
  pool.pop_tokens(0, 3, no_copy);
  EXPECT_EQ(pool.total_length(), 5);
  EXPECT_THAT(pool.token_slots(0, 0, 5), ElementsAre(0, 1, 8, 9, 10));
  EXPECT_EQ(pool.free_pages(), 14) << "page 3 (tokens 12-13) is freed, page 2 kept";
  ForwardPlan p = plan_of(pool, {0}, {3});
  EXPECT_THAT(p.append_slots, ElementsAre(11, 12, 13));
  EXPECT_EQ(pool.token_slots(0, 0, 8), before);
  EXPECT_THAT(error_of<ValueError>([&] { pool.pop_tokens(0, 7, no_copy); }),
              HasSubstr("vm.builtin.kv_state_popn: cannot pop 7 tokens from sequence 0: its "
                        "window has slid and the cut would fall inside its attention sink of 2"));
  pool.pop_tokens(0, 6, no_copy);  // down to the sink
  EXPECT_THAT(pool.token_slots(0, 0, 2), ElementsAre(0, 1));
  p = plan_of(pool, {0}, {2});
  EXPECT_THAT(p.append_slots, ElementsAre(8, 9));
  // A sliding sequence with a shared prefix cannot pop into it.
  pool.add_sequence(1);
  plan_of(pool, {1}, {8});
  pool.fork_sequence(1, 2, -1, no_copy);
  pool.enable_sliding_window(2, 16, 0);
  plan_of(pool, {2}, {2});
  EXPECT_THAT(error_of<ValueError>([&] { pool.pop_tokens(2, 3, no_copy); }),
              HasSubstr("it has a sliding window and only the tokens of its last block no other "
                        "sequence shares (2) can be popped"));
  pool.pop_tokens(2, 2, no_copy);
  EXPECT_EQ(pool.total_length(), 4 + 8 + 8);
}

TEST(KvSlidingWindow, APrefixAndSinkLongerThanTheWindowCannotSlide) {
  KvBlockPool pool = sliding_pool();
  pool.add_sequence(0);
  plan_of(pool, {0}, {12});
  pool.fork_sequence(0, 1, -1, no_copy);
  // The 12 shared tokens never slide, and a window of 8 cannot hold them. TVM accepts the
  // window and fails a check in the middle of the pass that would slide it; Kiln refuses that
  // pass before it changes anything.
  pool.enable_sliding_window(1, 8, 0);
  EXPECT_THAT(error_of<ValueError>([&] { plan_of(pool, {1}, {1}); }),
              HasSubstr("vm.builtin.kv_state_begin_forward: sequence 1 cannot slide its window "
                        "of 8 tokens: its shared prefix (12 tokens) and attention sink (0) do "
                        "not fit in it"));
  EXPECT_EQ(pool.total_length(), 24);
  EXPECT_EQ(pool.free_pages(), 13);
}

// ---- a random script against a model ---------------------------------------------------------

// What a sequence must hold: the ids of its tokens, in order (its sink, then its window).
struct ModelSequence {
  std::vector<int64_t> kept;
  int64_t window = -1;
  int64_t sink = 0;
  bool slid = false;  // its window has moved (the sink is pinned from then on)
};

// The slots the pass's tables give sequence `i` (one depth: no forks here), read the way the
// sliding-window kernels read them: kv length and token offsets from the 3-row length info.
std::vector<int32_t> table_slots(const ForwardPlan& plan, size_t i, int64_t ps) {
  const DepthTables& t = plan.depths.at(0);
  const int32_t pages = t.page_indptr[i + 1] - t.page_indptr[i];
  if (pages == 0) return {};
  const int64_t length =
      (pages - 1) * ps + t.last_page_len[i] - t.window_offset[i] + t.sink_size[i];
  std::vector<int32_t> slots;
  for (int64_t r = 0; r < length; ++r) {
    const int64_t offset = r < t.sink_size[i] ? r : r - t.sink_size[i] + t.window_offset[i];
    slots.push_back(
        static_cast<int32_t>(t.page_indices[t.page_indptr[i] + offset / ps] * ps + offset % ps));
  }
  return slots;
}

TEST(KvSlidingWindowRandom, EverySequenceHoldsItsSinkAndItsLastTokens) {
  constexpr int64_t kPages = 24;
  constexpr int64_t kPage = 4;
  KvBlockPool pool(kPages, kPage, 4, 40, true);
  std::mt19937 rng(36);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::map<int64_t, ModelSequence> model;
  std::map<int32_t, int64_t> memory;  // slot -> the token id written there
  int64_t next_token = 0;
  int64_t next_id = 0;
  int passes = 0;
  int refusals = 0;
  auto read = [&](int64_t id) {
    std::vector<int64_t> ids;
    const int64_t length = static_cast<int64_t>(model[id].kept.size());
    if (length == 0) return ids;
    for (int32_t slot : pool.token_slots(id, 0, length)) ids.push_back(memory.at(slot));
    return ids;
  };
  for (int step = 0; step < 3000; ++step) {
    const int64_t action = uniform(0, 9);
    if (model.size() < 2 || (action == 0 && model.size() < 4)) {
      pool.add_sequence(next_id);
      model[next_id++] = {};
    } else if (action == 1 && model.size() > 2) {
      auto it = std::next(model.begin(), uniform(0, static_cast<int64_t>(model.size()) - 1));
      pool.remove_sequence(it->first);
      model.erase(it);
    } else if (action == 2) {
      auto& [id, seq] =
          *std::next(model.begin(), uniform(0, static_cast<int64_t>(model.size()) - 1));
      if (seq.window == -1) {
        seq.window = uniform(1, 20);
        seq.sink = uniform(0, seq.window - 1);
        pool.enable_sliding_window(id, seq.window, seq.sink);
      }
    } else if (action == 3) {
      auto& [id, seq] =
          *std::next(model.begin(), uniform(0, static_cast<int64_t>(model.size()) - 1));
      const auto length = static_cast<int64_t>(seq.kept.size());
      const int64_t n = uniform(0, length);
      if (seq.window != -1 && seq.slid && seq.sink > 0 && length - n < seq.sink) {
        // A copy: a lambda may not capture a structured binding (C++17; clang-tidy's clang 14).
        const int64_t seq_id = id;
        EXPECT_THAT(error_of<ValueError>([&] { pool.pop_tokens(seq_id, n, no_copy); }),
                    HasSubstr("inside its attention sink"));
      } else {
        pool.pop_tokens(id, n, no_copy);
        seq.kept.resize(static_cast<size_t>(length - n));
      }
    } else {
      // A pass over a random subset, in a random order.
      std::vector<int64_t> ids;
      for (const auto& [id, seq] : model) {
        if (uniform(0, 1) == 1) ids.push_back(id);
      }
      if (ids.empty()) continue;
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int64_t> lengths;
      for (size_t i = 0; i < ids.size(); ++i) {
        lengths.push_back(uniform(0, 3) == 0 ? uniform(1, 40 / static_cast<int64_t>(ids.size()))
                                             : 1);
      }
      std::vector<std::vector<int32_t>> before;
      for (int64_t id : ids) {
        const auto length = static_cast<int64_t>(model[id].kept.size());
        before.push_back(length > 0 ? pool.token_slots(id, 0, length) : std::vector<int32_t>{});
      }
      const int64_t free = pool.free_pages();
      ForwardPlan plan;
      try {
        plan = pool.plan(ids, lengths);
      } catch (const ValueError& e) {
        EXPECT_THAT(e.what(), HasSubstr("out of pages"));
        EXPECT_EQ(pool.free_pages(), free);
        for (const int64_t id : ids) {
          EXPECT_EQ(read(id), model[id].kept) << "sequence " << id << " after a refusal";
        }
        ++refusals;
        continue;
      }
      ++passes;
      EXPECT_FALSE(plan.append_before_attention);
      int64_t row = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        ModelSequence& seq = model[ids[i]];
        EXPECT_EQ(table_slots(plan, i, kPage), before[i]) << "the tables of sequence " << ids[i];
        for (int64_t k = 0; k < lengths[i]; ++k, ++row) {
          const int32_t slot = plan.append_slots[static_cast<size_t>(row)];
          if (slot != -1) memory[slot] = next_token;
          seq.kept.push_back(next_token++);
        }
        if (seq.window != -1 && static_cast<int64_t>(seq.kept.size()) > seq.window) {
          const int64_t excess = static_cast<int64_t>(seq.kept.size()) - seq.window;
          const auto from = seq.kept.begin() + seq.sink;
          seq.kept.erase(from, from + excess);
          seq.slid = true;
        }
      }
    }
    // Every sequence reads back exactly its tokens; no slot is held twice and no page is lost.
    std::set<int32_t> used_pages;
    std::set<int32_t> slots;
    int64_t total = 0;
    for (const auto& [id, seq] : model) {
      ASSERT_EQ(read(id), seq.kept) << "sequence " << id << " at step " << step;
      total += static_cast<int64_t>(seq.kept.size());
      if (seq.kept.empty()) continue;
      for (int32_t slot : pool.token_slots(id, 0, static_cast<int64_t>(seq.kept.size()))) {
        ASSERT_TRUE(slots.insert(slot).second) << "slot " << slot << " held twice";
        used_pages.insert(slot / static_cast<int32_t>(kPage));
      }
    }
    ASSERT_EQ(pool.total_length(), total);
    const auto held = static_cast<int64_t>(used_pages.size()) + pool.free_pages();
    // A sequence popped down to its sink may keep one page its window no longer uses.
    ASSERT_LE(held, kPages) << "step " << step;
    ASSERT_GE(held + static_cast<int64_t>(model.size()), kPages) << "pages lost at step " << step;
  }
  EXPECT_GT(passes, 1000);
  EXPECT_GT(refusals, 0) << "the script should run out of pages now and then";
  for (const auto& [id, seq] : model) pool.remove_sequence(id);
  EXPECT_TRUE(pool.empty());
}

}  // namespace
}  // namespace kiln::llm
