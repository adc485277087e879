// SPDX-License-Identifier: Apache-2.0
#include "kv_block_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "kiln/error.h"

namespace kiln::llm {
namespace {

constexpr const char* kEnableSliding =
    "vm.builtin.attention_kv_cache_enable_sliding_window_for_seq";
// A page a sliding sequence borrows while it grows, before its window frees pages (TVM's
// temporary page): replaced by a real page once the window has slid.
constexpr int32_t kBorrowedPage = -1;

// Slides the last block `block` of `seq` (whose length already counts the new tokens) so that
// the sequence holds no more than its window: the pages wholly outside the sink and the window
// go to `release` (in order), and the window's start moves. Nothing for a sequence that does not
// slide or fits its window. plan() has checked that the block holds the excess.
void slide(KvSequence& seq, KvBlock& block, int64_t page_size,
           const std::function<void(int32_t)>& release) {
  if (seq.window == -1 || seq.length <= seq.window) return;
  const int64_t excess = seq.length - seq.window;
  if (seq.last_block_sink > 0 && block.sink_length == 0) {
    // The first slide pins the sink: the window starts right after it.
    block.sink_length = seq.last_block_sink;
    block.window_offset = seq.last_block_sink;
  }
  const int64_t sink_pages = (block.sink_length + page_size - 1) / page_size;
  int64_t first_page = (block.window_offset + excess) / page_size;
  const int64_t start_in_page = (block.window_offset + excess) % page_size;
  while (first_page > sink_pages) {
    const auto freed = block.pages.begin() + static_cast<std::ptrdiff_t>(sink_pages);
    if (*freed != kBorrowedPage) release(*freed);
    block.pages.erase(freed);
    --first_page;
  }
  seq.length = seq.window;
  block.length -= static_cast<int32_t>(excess);
  block.window_offset = static_cast<int32_t>(first_page * page_size + start_in_page);
}

// Pages `block` needs to hold its tokens and `n` more (sink and window aware).
int64_t pages_for(const KvBlock& block, int64_t n, int64_t page_size) {
  return (block.length - block.sink_length + block.window_offset + n + page_size - 1) / page_size;
}

}  // namespace

KvBlockPool::KvBlockPool(int64_t num_pages, int64_t page_size, int64_t max_sequences,
                         int64_t prefill_chunk, bool sliding_window)
    : num_pages_(num_pages),
      page_size_(page_size),
      max_sequences_(max_sequences),
      prefill_chunk_(prefill_chunk),
      sliding_window_(sliding_window) {
  clear();
}

int64_t KvBlockPool::offset_in_block(const KvBlock& block, int64_t i) {
  return i < block.sink_length ? i : i - block.sink_length + block.window_offset;
}

void KvBlockPool::clear() {
  sequences_.clear();
  blocks_.clear();
  free_blocks_.clear();
  free_pages_.clear();
  // Page 0 is taken first, as in TVM (the page numbers show in debugging dumps).
  for (int64_t page = num_pages_ - 1; page >= 0; --page) {
    free_pages_.push_back(static_cast<int32_t>(page));
  }
}

const KvSequence& KvBlockPool::sequence(int64_t seq_id, const char* who) const {
  auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) {
    throw ValueError(
        fmt::format("vm.builtin.kv_state_{}: sequence {} is not in the KV cache", who, seq_id));
  }
  return it->second;
}

int32_t KvBlockPool::take_page() {
  if (free_pages_.empty()) {
    throw ValueError(
        fmt::format("the KV cache is out of pages (all {} pages are in use)", num_pages_));
  }
  const int32_t page = free_pages_.back();
  free_pages_.pop_back();
  return page;
}

int32_t KvBlockPool::take_block() {
  if (!free_blocks_.empty()) {
    const int32_t block = free_blocks_.back();
    free_blocks_.pop_back();
    blocks_[block] = KvBlock{};
    return block;
  }
  blocks_.emplace_back();
  return static_cast<int32_t>(blocks_.size() - 1);
}

std::vector<int32_t> KvBlockPool::trace(const KvSequence& seq) const {
  std::vector<int32_t> blocks;
  trace_into(seq, blocks);
  return blocks;
}

void KvBlockPool::trace_into(const KvSequence& seq, std::vector<int32_t>& blocks) const {
  blocks.clear();
  for (int32_t b = seq.last_block; b != -1; b = blocks_[b].parent) blocks.push_back(b);
  std::reverse(blocks.begin(), blocks.end());
}

void KvBlockPool::release_chain(const KvSequence& seq) {
  int32_t b = seq.last_block;
  while (b != -1 && blocks_[b].refs == 1) {
    const int32_t parent = blocks_[b].parent;
    for (int32_t page : blocks_[b].pages) free_pages_.push_back(page);
    blocks_[b] = KvBlock{};
    free_blocks_.push_back(b);
    b = parent;
  }
  if (b != -1) blocks_[b].refs -= 1;
}

void KvBlockPool::add_sequence(int64_t seq_id) {
  if (sequences_.count(seq_id) != 0) {
    throw ValueError(fmt::format(
        "vm.builtin.kv_state_add_sequence: sequence {} is already in the KV cache", seq_id));
  }
  const int32_t block = take_block();
  blocks_[block].refs = 1;
  sequences_.emplace(seq_id, KvSequence{block, 0});
}

void KvBlockPool::remove_sequence(int64_t seq_id) {
  release_chain(sequence(seq_id, "remove_sequence"));
  sequences_.erase(seq_id);
}

int32_t KvBlockPool::fork_checked(const char* who, KvSequence& parent, int64_t fork_pos,
                                  const CopyPage& copy_page) {
  // Where the fork falls, found before anything changes: a cut inside a page needs a free page.
  {
    const std::vector<int32_t> blocks = trace(parent);
    int64_t offset = fork_pos;
    for (int32_t b : blocks) {
      if (b != blocks.back() && blocks_[b].length <= offset) {
        offset -= blocks_[b].length;
        continue;
      }
      break;
    }
    if (offset % page_size_ != 0 && free_pages_.empty()) {
      throw ValueError(
          fmt::format("{}: the KV cache is out of pages (forking at position "
                      "{} copies a partly shared page; all {} pages are in use)",
                      who, fork_pos, num_pages_));
    }
  }
  // A parent forked at its end on a page boundary continues in a new block of its own.
  if (fork_pos == parent.length && fork_pos % page_size_ == 0 &&
      blocks_[parent.last_block].length > 0) {
    const int32_t fresh = take_block();
    blocks_[fresh].start_pos = static_cast<int32_t>(parent.length);
    blocks_[fresh].parent = parent.last_block;
    blocks_[fresh].refs = 1;
    parent.last_block = fresh;
  }
  const int32_t child = take_block();
  const std::vector<int32_t> blocks = trace(parent);
  int64_t offset = fork_pos;
  for (int32_t forked : blocks) {
    if (forked != blocks.back() && blocks_[forked].length <= offset) {
      offset -= blocks_[forked].length;
      continue;
    }
    const int32_t in_page = static_cast<int32_t>(offset % page_size_);
    const int32_t moved = static_cast<int32_t>(offset - in_page);
    const auto moved_pages = static_cast<size_t>(moved / page_size_);
    if (moved_pages == 0) {
      // The fork falls in the block's first page: the child hangs off the block's parent.
      const int32_t shared = blocks_[forked].parent;
      if (shared != -1) blocks_[shared].refs += 1;
      blocks_[child].parent = shared;
    } else {
      // Split the block: its leading full pages become a prefix both sides share.
      const int32_t prefix = take_block();
      KvBlock& f = blocks_[forked];
      KvBlock& p = blocks_[prefix];
      p.parent = f.parent;
      f.parent = prefix;
      blocks_[child].parent = prefix;
      p.refs = 2;
      p.pages.assign(f.pages.begin(), f.pages.begin() + static_cast<std::ptrdiff_t>(moved_pages));
      f.pages.erase(f.pages.begin(), f.pages.begin() + static_cast<std::ptrdiff_t>(moved_pages));
      p.start_pos = f.start_pos;
      f.start_pos += moved;
      p.length = moved;
      f.length -= moved;
      if (parent.window != -1 && forked == parent.last_block) {
        // The moved tokens lie in the sink (fork_sequence checked): the rest of the sink stays.
        parent.last_block_sink -= moved;
        if (f.sink_length > 0) {
          // Its window has slid: the sink and the window start move with the pages. (TVM 0.27
          // keeps both, and reads the wrong slots afterwards.)
          f.sink_length -= moved;
          f.window_offset -= moved;
        }
      }
    }
    blocks_[child].start_pos = static_cast<int32_t>(fork_pos - in_page);
    blocks_[child].length = in_page;
    if (in_page > 0) {
      const int32_t src = blocks_[forked].pages[0];
      const int32_t dst = take_page();
      blocks_[child].pages.push_back(dst);
      copy_page(src, dst, in_page);
    }
    break;
  }
  return child;
}

void KvBlockPool::fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos,
                                const CopyPage& copy_page) {
  const KvSequence& found = sequence(parent_id, "fork_sequence");
  if (sequences_.count(child_id) != 0) {
    throw ValueError(fmt::format(
        "vm.builtin.kv_state_fork_sequence: the child sequence {} is already in the KV cache",
        child_id));
  }
  if (fork_pos < -1 || fork_pos > found.length) {
    throw ValueError(fmt::format(
        "vm.builtin.kv_state_fork_sequence: fork position {} is outside [-1, {}] (sequence {} "
        "has {} tokens)",
        fork_pos, found.length, parent_id, found.length));
  }
  KvSequence& parent = sequences_.at(parent_id);
  const int64_t at = fork_pos == -1 ? parent.length : fork_pos;
  if (parent.window != -1) {
    // Its window may have slid: only the prefix and the sink still hold every token.
    const int64_t sink = parent.length - blocks_[parent.last_block].length + parent.last_block_sink;
    if (at > sink) {
      throw ValueError(fmt::format(
          "vm.builtin.kv_state_fork_sequence: sequence {} has a sliding window and can be "
          "forked only within its attention sink ({} tokens), not at position {}",
          parent_id, sink, at));
    }
  }
  // The page copy runs a device kernel after the blocks are split: if it throws, the pool must
  // be as it was (else the split blocks and the copy's page are lost for good).
  const std::vector<KvBlock> saved_blocks = blocks_;
  const std::vector<int32_t> saved_free_blocks = free_blocks_;
  const std::vector<int32_t> saved_free_pages = free_pages_;
  const KvSequence saved_parent = parent;
  int32_t child = -1;
  try {
    child = fork_checked("vm.builtin.kv_state_fork_sequence", parent, at, copy_page);
  } catch (...) {
    blocks_ = saved_blocks;
    free_blocks_ = saved_free_blocks;
    free_pages_ = saved_free_pages;
    parent = saved_parent;
    throw;
  }
  blocks_[child].refs += 1;
  sequences_.emplace(child_id, KvSequence{child, at});
}

void KvBlockPool::pop_tokens(int64_t seq_id, int64_t n, const CopyPage& copy_page) {
  const KvSequence& found = sequence(seq_id, "popn");
  if (n < 0 || n > found.length) {
    throw ValueError(
        fmt::format("vm.builtin.kv_state_popn: cannot pop {} tokens from sequence {} of length {}",
                    n, seq_id, found.length));
  }
  if (n == 0) return;
  if (found.window != -1) {
    const KvBlock& last = blocks_[found.last_block];
    if (n > last.length || last.refs != 1) {
      // Popping into a shared block re-forks the sequence, which would lose its window.
      throw ValueError(fmt::format(
          "vm.builtin.kv_state_popn: cannot pop {} tokens from sequence {}: it has a sliding "
          "window and only the tokens of its last block no other sequence shares ({}) can be "
          "popped",
          n, seq_id, last.refs == 1 ? last.length : 0));
    }
    if (last.sink_length > 0 && last.length - n < last.sink_length) {
      throw ValueError(fmt::format(
          "vm.builtin.kv_state_popn: cannot pop {} tokens from sequence {}: its window has slid "
          "and the cut would fall inside its attention sink of {} tokens",
          n, seq_id, last.sink_length));
    }
  }
  // A refused re-fork (no page for the copy) must leave the pool as it was.
  const std::vector<KvBlock> saved_blocks = blocks_;
  const std::vector<int32_t> saved_free_blocks = free_blocks_;
  const std::vector<int32_t> saved_free_pages = free_pages_;
  const KvSequence saved_seq = found;
  KvSequence& seq = sequences_.at(seq_id);
  try {
    int32_t block = seq.last_block;
    // Tokens in blocks only this sequence holds are dropped in place.
    while (block != -1 && blocks_[block].refs == 1) {
      KvBlock& b = blocks_[block];
      if (n > b.length) {
        n -= b.length;
        seq.length -= b.length;
        const int32_t parent = b.parent;
        for (int32_t page : b.pages) free_pages_.push_back(page);
        b = KvBlock{};
        free_blocks_.push_back(block);
        block = parent;
        seq.last_block = parent;
        continue;
      }
      // Pages still holding the kept tokens (past the sink, a slid window starts later).
      const auto keep = static_cast<size_t>(pages_for(b, -n, page_size_));
      while (b.pages.size() > keep) {
        free_pages_.push_back(b.pages.back());
        b.pages.pop_back();
      }
      b.length -= static_cast<int32_t>(n);
      seq.length -= n;
      n = 0;
      break;
    }
    if (n > 0) {
      // The rest lies in a shared prefix: the sequence becomes a fork of itself, shorter.
      const int64_t new_length = seq.length - n;
      const int32_t child = fork_checked("vm.builtin.kv_state_popn", seq, new_length, copy_page);
      release_chain(seq);
      blocks_[child].refs += 1;
      seq = KvSequence{child, new_length};
    }
  } catch (...) {
    blocks_ = saved_blocks;
    free_blocks_ = saved_free_blocks;
    free_pages_ = saved_free_pages;
    seq = saved_seq;
    throw;
  }
}

int64_t KvBlockPool::pages_to_append(const KvSequence& seq, int64_t n) const {
  // reserve() on copies, its pages counted, not taken.
  KvSequence s = seq;
  KvBlock b = blocks_[seq.last_block];
  const auto before = static_cast<int64_t>(b.pages.size());
  const int64_t needed = pages_for(b, n, page_size_);
  if (needed > before) b.pages.resize(static_cast<size_t>(needed), kBorrowedPage);
  b.length += static_cast<int32_t>(n);
  s.length += n;
  slide(s, b, page_size_, [](int32_t) {});
  return static_cast<int64_t>(b.pages.size()) - before;
}

void KvBlockPool::reserve(KvSequence& seq, int64_t n) {
  KvBlock& block = blocks_[seq.last_block];
  const int64_t needed = pages_for(block, n, page_size_);
  while (static_cast<int64_t>(block.pages.size()) < needed) {
    // A sliding sequence borrows what its window frees below (TVM's order of pages).
    block.pages.push_back(free_pages_.empty() && seq.window != -1 ? kBorrowedPage : take_page());
  }
  block.length += static_cast<int32_t>(n);
  slide(seq, block, page_size_, [this](int32_t page) { free_pages_.push_back(page); });
  for (int32_t& page : block.pages) {
    if (page == kBorrowedPage) page = take_page();
  }
}

void KvBlockPool::enable_sliding_window(int64_t seq_id, int64_t window, int64_t sink) {
  if (!sliding_window_) {
    throw ValueError(
        fmt::format("{}: the KV cache does not support sliding window (it was created with "
                    "support_sliding_window = 0)",
                    kEnableSliding));
  }
  auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) {
    throw ValueError(fmt::format("{}: sequence {} is not in the KV cache", kEnableSliding, seq_id));
  }
  if (sink < 0) {
    throw ValueError(fmt::format("{}: the attention sink size {} is negative (sequence {})",
                                 kEnableSliding, sink, seq_id));
  }
  if (window < 1 || window > std::numeric_limits<int32_t>::max()) {
    throw ValueError(fmt::format("{}: the sliding window size {} is outside [1, {}] (sequence {})",
                                 kEnableSliding, window, std::numeric_limits<int32_t>::max(),
                                 seq_id));
  }
  if (sink >= window) {
    throw ValueError(
        fmt::format("{}: the attention sink size {} must be less than the sliding window size {} "
                    "(sequence {})",
                    kEnableSliding, sink, window, seq_id));
  }
  KvSequence& seq = it->second;
  if (seq.window != -1) {
    throw ValueError(
        fmt::format("{}: sequence {} already has a sliding window (size {}); it cannot be "
                    "enabled twice",
                    kEnableSliding, seq_id, seq.window));
  }
  // Its shared prefix never slides: it is a sink already, and counts towards the one asked for.
  const int64_t prefix = seq.length - blocks_[seq.last_block].length;
  seq.last_block_sink = static_cast<int32_t>(std::max<int64_t>(sink - prefix, 0));
  seq.window = static_cast<int32_t>(window);
}

bool KvBlockPool::chunk_depth(const std::vector<int32_t>& blocks, bool allow_coalesce,
                              std::span<const int64_t> lengths, bool is_decode,
                              std::vector<std::pair<int32_t, int32_t>>& entries,
                              std::vector<std::pair<int32_t, int32_t>>& coalesced) const {
  // Neighbouring sequences that read the same block can be served as one prefill over it
  // (TVM's rule, kept so the same kernels run on the same tables).
  std::vector<std::pair<int32_t, int32_t>>& separate = entries;
  separate.clear();
  coalesced.clear();
  auto pages_of = [&](int32_t b) {
    return b == -1 ? 0 : static_cast<int64_t>(blocks_[b].pages.size());
  };
  int64_t separate_pages = pages_of(blocks[0]);
  int64_t coalesced_pages = 0;
  int32_t current = blocks[0];
  auto current_rows = static_cast<int32_t>(lengths[0]);
  for (size_t i = 1; i < blocks.size(); ++i) {
    separate_pages += pages_of(blocks[i]);
    separate.emplace_back(blocks[i - 1], static_cast<int32_t>(lengths[i - 1]));
    if (blocks[i] == current) {
      current_rows += static_cast<int32_t>(lengths[i]);
    } else {
      coalesced.emplace_back(current, current_rows);
      coalesced_pages += pages_of(current);
      current = blocks[i];
      current_rows = static_cast<int32_t>(lengths[i]);
    }
  }
  separate.emplace_back(blocks.back(), static_cast<int32_t>(lengths.back()));
  coalesced.emplace_back(current, current_rows);
  coalesced_pages += pages_of(current);
  const double ratio =
      coalesced_pages > 0 ? static_cast<double>(separate_pages) / coalesced_pages : 0.0;
  const bool use_decode = is_decode && ratio < 32;
  if (!use_decode && allow_coalesce) entries.swap(coalesced);
  return use_decode;
}

ForwardPlan KvBlockPool::plan(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths) {
  ForwardPlan out;
  plan(seq_ids, lengths, out);
  return out;
}

size_t KvBlockPool::first_repeat(std::span<const int64_t> seq_ids) {
  // The earliest position whose id came before (where a scan with a set would stop): among the
  // ids listed more than once, the smallest second position. Sorted (id, position) pairs put a
  // group's first two positions first.
  std::vector<std::pair<int64_t, size_t>>& sorted = scratch_.sorted_ids;
  sorted.clear();
  for (size_t i = 0; i < seq_ids.size(); ++i) sorted.emplace_back(seq_ids[i], i);
  std::sort(sorted.begin(), sorted.end());
  size_t first = seq_ids.size();
  for (size_t i = 1; i < sorted.size(); ++i) {
    const bool second_of_group = sorted[i].first == sorted[i - 1].first &&
                                 (i == 1 || sorted[i - 2].first != sorted[i].first);
    if (second_of_group) first = std::min(first, sorted[i].second);
  }
  return first;
}

void KvBlockPool::plan(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths,
                       ForwardPlan& out) {
  constexpr const char* who = "vm.builtin.kv_state_begin_forward";
  if (seq_ids.size() != lengths.size()) {
    throw ValueError(
        fmt::format("{}: {} sequence ids but {} lengths", who, seq_ids.size(), lengths.size()));
  }
  if (seq_ids.empty()) throw ValueError(fmt::format("{}: no sequences given", who));
  if (static_cast<int64_t>(seq_ids.size()) > max_sequences_) {
    throw ValueError(
        fmt::format("{}: {} sequences in one pass; the KV cache was created for at "
                    "most {} (max_batch_size)",
                    who, seq_ids.size(), max_sequences_));
  }
  int64_t total = 0;
  // Pages taken so far in the pass (reservations run in order; a sliding sequence may give
  // pages back), and the most taken at any point: what must be free.
  int64_t pages_taken = 0;
  int64_t pages_needed = 0;
  const size_t repeat = first_repeat(seq_ids);
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const KvSequence& seq = sequence(seq_ids[i], "begin_forward");
    if (i == repeat) {
      throw ValueError(fmt::format("{}: sequence {} is listed twice", who, seq_ids[i]));
    }
    if (lengths[i] < 1) {
      throw ValueError(fmt::format("{}: sequence {} appends {} tokens (at least 1)", who,
                                   seq_ids[i], lengths[i]));
    }
    if (blocks_[seq.last_block].refs != 1) {
      throw ValueError(fmt::format(
          "{}: sequence {} cannot grow: its last block is shared with {} forked sequence(s)", who,
          seq_ids[i], blocks_[seq.last_block].refs - 1));
    }
    if (seq.window != -1 && seq.length + lengths[i] > seq.window) {
      // Only the last block slides: the prefix and the sink must leave room for the rest.
      const KvBlock& last = blocks_[seq.last_block];
      const int64_t prefix = seq.length - last.length;
      const int64_t sink = last.sink_length == 0 ? seq.last_block_sink : last.sink_length;
      if (prefix + sink > seq.window) {
        throw ValueError(fmt::format(
            "{}: sequence {} cannot slide its window of {} tokens: its shared prefix ({} "
            "tokens) and attention sink ({}) do not fit in it",
            who, seq_ids[i], seq.window, prefix, sink));
      }
    }
    total += lengths[i];
    pages_taken += pages_to_append(seq, lengths[i]);
    pages_needed = std::max(pages_needed, pages_taken);
  }
  if (total > prefill_chunk_) {
    throw ValueError(
        fmt::format("{}: {} new tokens in one pass exceed the prefill chunk of {} "
                    "(prefill_chunk_size)",
                    who, total, prefill_chunk_));
  }
  if (pages_needed > free_pages()) {
    throw ValueError(
        fmt::format("{}: the KV cache is out of pages: this pass needs {} more, {} "
                    "of {} are free",
                    who, pages_needed, free_pages(), num_pages_));
  }

  // From here on nothing throws. `out`'s vectors are cleared, not freed: their storage serves
  // the next pass.
  ForwardPlan& plan = out;
  PlanScratch& s = scratch_;
  const size_t batch = seq_ids.size();
  std::vector<KvSequence*>& seqs = s.seqs;
  seqs.clear();
  plan.k_ragged_rope_offset.clear();
  bool is_decode = true;
  for (size_t i = 0; i < batch; ++i) {
    KvSequence& seq = sequences_.at(seq_ids[i]);
    seqs.push_back(&seq);
    plan.k_ragged_rope_offset.push_back(static_cast<int32_t>(seq.length));
    seq.length += lengths[i];
    if (lengths[i] != 1) is_decode = false;
  }
  // The blocks each sequence reads, depth by depth; deeper ones fold into the last depth.
  size_t depths = 0;
  s.trailing.resize(std::max(s.trailing.size(), batch));
  for (size_t i = 0; i < batch; ++i) {
    s.trailing[i].clear();
    trace_into(*seqs[i], s.trace);
    for (size_t d = 0; d < s.trace.size(); ++d) {
      if (d >= static_cast<size_t>(kMaxDepth)) {
        s.trailing[i].push_back(s.trace[d]);
        continue;
      }
      if (depths <= d) {
        if (s.on_depth.size() <= d) s.on_depth.emplace_back();
        s.on_depth[d].assign(batch, -1);
        depths = d + 1;
      }
      s.on_depth[d][i] = s.trace[d];
    }
  }
  if (s.chunks.size() < depths) s.chunks.resize(depths);
  plan.depths.resize(depths);
  for (size_t d = 0; d < depths; ++d) {
    plan.depths[d].use_decode_kernel = chunk_depth(s.on_depth[d], d != kMaxDepth - 1, lengths,
                                                   is_decode, s.chunks[d], s.coalesced);
  }
  // A sliding-window cache always attends before appending (TVM's rule, whatever the kernel).
  plan.append_before_attention = !sliding_window_ && plan.depths.back().use_decode_kernel;
  std::vector<int32_t>& length_before = s.length_before;
  length_before.resize(batch);
  for (size_t i = 0; i < batch; ++i) length_before[i] = blocks_[seqs[i]->last_block].length;
  if (plan.append_before_attention) {
    for (size_t i = 0; i < batch; ++i) reserve(*seqs[i], lengths[i]);
  }
  for (size_t d = 0; d < depths; ++d) {
    DepthTables& t = plan.depths[d];
    for (std::vector<int32_t>* column :
         {&t.qo_indptr, &t.page_indptr, &t.page_indices, &t.last_page_len, &t.window_offset,
          &t.sink_size, &t.k_rope_offset}) {
      column->clear();
    }
    t.qo_indptr.push_back(0);
    t.page_indptr.push_back(0);
    for (size_t i = 0; i < s.chunks[d].size(); ++i) {
      const auto [block, rows] = s.chunks[d][i];
      t.qo_indptr.push_back(t.qo_indptr.back() + rows);
      if (block == -1) {
        t.page_indptr.push_back(t.page_indptr.back());
        t.last_page_len.push_back(0);
        t.window_offset.push_back(0);
        t.sink_size.push_back(0);
        t.k_rope_offset.push_back(0);
        continue;
      }
      int64_t pages = 0;
      int64_t length = 0;
      int32_t last = block;
      auto add = [&](int32_t b) {
        t.page_indices.insert(t.page_indices.end(), blocks_[b].pages.begin(),
                              blocks_[b].pages.end());
        pages += static_cast<int64_t>(blocks_[b].pages.size());
        length += blocks_[b].length;
        last = b;
      };
      add(block);
      // At the last depth the entries are uncoalesced, one per sequence: its deeper blocks.
      if (d == static_cast<size_t>(kMaxDepth) - 1) {
        for (int32_t b : s.trailing[i]) add(b);
      }
      // Only the last block may slide; the blocks before it hold whole pages.
      const KvBlock& tail = blocks_[last];
      t.page_indptr.push_back(t.page_indptr.back() + static_cast<int32_t>(pages));
      t.last_page_len.push_back(
          length == 0 ? 0
                      : static_cast<int32_t>(
                            (length - tail.sink_length + tail.window_offset - 1) % page_size_ + 1));
      t.window_offset.push_back(tail.window_offset);
      t.sink_size.push_back(tail.sink_length);
      t.k_rope_offset.push_back(blocks_[block].start_pos);
    }
  }
  if (!plan.append_before_attention) {
    for (size_t i = 0; i < batch; ++i) reserve(*seqs[i], lengths[i]);
  }
  plan.append_indptr.assign(1, 0);
  plan.q_positions.clear();
  plan.append_slots.clear();
  for (size_t i = 0; i < batch; ++i) {
    const KvBlock& block = blocks_[seqs[i]->last_block];
    plan.append_indptr.push_back(plan.append_indptr.back() + static_cast<int32_t>(lengths[i]));
    for (int64_t pos = 0; pos < lengths[i]; ++pos) {
      plan.q_positions.push_back(static_cast<int32_t>(plan.k_ragged_rope_offset[i] + pos));
      // Where the token lands after the window slid: in the sink, nowhere (slid out already in
      // this pass), or in the window.
      const int64_t in_block = block.length - lengths[i] + pos;
      int64_t offset = -1;
      if (length_before[i] + pos < block.sink_length) {
        offset = length_before[i] + pos;
      } else if (in_block >= block.sink_length) {
        offset = in_block - block.sink_length + block.window_offset;
      }
      plan.append_slots.push_back(
          offset < 0 ? -1
                     : static_cast<int32_t>(block.pages[offset / page_size_] * page_size_ +
                                            offset % page_size_));
    }
  }
}

std::vector<int32_t> KvBlockPool::token_slots(int64_t seq_id, int64_t begin, int64_t end) const {
  const KvSequence& seq = sequence(seq_id, "debug_get_kv");
  if (begin < 0 || end > seq.length || begin >= end) {
    throw ValueError(fmt::format(
        "vm.builtin.attention_kv_cache_debug_get_kv: positions [{}, {}) are outside sequence {} "
        "of length {}",
        begin, end, seq_id, seq.length));
  }
  std::vector<int32_t> slots;
  for (int32_t b : trace(seq)) {
    for (int32_t i = 0; i < blocks_[b].length; ++i) {
      const int64_t offset = offset_in_block(blocks_[b], i);
      slots.push_back(static_cast<int32_t>(blocks_[b].pages[offset / page_size_] * page_size_ +
                                           offset % page_size_));
    }
  }
  return {slots.begin() + begin, slots.begin() + end};
}

int64_t KvBlockPool::total_length() const {
  int64_t total = 0;
  for (const auto& [id, seq] : sequences_) total += seq.length;
  return total;
}

bool KvBlockPool::empty() const {
  return sequences_.empty() && free_blocks_.size() == blocks_.size() && free_pages() == num_pages_;
}

}  // namespace kiln::llm
