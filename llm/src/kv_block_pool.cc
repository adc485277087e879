// SPDX-License-Identifier: Apache-2.0
#include "kv_block_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"

namespace kiln::llm {

KvBlockPool::KvBlockPool(int64_t num_pages, int64_t page_size, int64_t max_sequences,
                         int64_t prefill_chunk)
    : num_pages_(num_pages),
      page_size_(page_size),
      max_sequences_(max_sequences),
      prefill_chunk_(prefill_chunk) {
  clear();
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
  for (int32_t b = seq.last_block; b != -1; b = blocks_[b].parent) blocks.push_back(b);
  std::reverse(blocks.begin(), blocks.end());
  return blocks;
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
      const auto keep = static_cast<size_t>((b.length - n + page_size_ - 1) / page_size_);
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

int64_t KvBlockPool::pages_to_append(const KvBlock& block, int64_t n) const {
  const int64_t needed = (block.length + n + page_size_ - 1) / page_size_;
  return std::max<int64_t>(0, needed - static_cast<int64_t>(block.pages.size()));
}

void KvBlockPool::reserve(KvSequence& seq, int64_t n) {
  KvBlock& block = blocks_[seq.last_block];
  for (int64_t i = pages_to_append(block, n); i > 0; --i) block.pages.push_back(take_page());
  block.length += static_cast<int32_t>(n);
}

std::pair<std::vector<std::pair<int32_t, int32_t>>, bool> KvBlockPool::chunk_depth(
    const std::vector<int32_t>& blocks, bool allow_coalesce, std::span<const int64_t> lengths,
    bool is_decode) const {
  // Neighbouring sequences that read the same block can be served as one prefill over it
  // (TVM's rule, kept so the same kernels run on the same tables).
  std::vector<std::pair<int32_t, int32_t>> separate;
  std::vector<std::pair<int32_t, int32_t>> coalesced;
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
  return {use_decode || !allow_coalesce ? separate : coalesced, use_decode};
}

ForwardPlan KvBlockPool::plan(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths) {
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
  int64_t pages_needed = 0;
  std::set<int64_t> seen;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const KvSequence& seq = sequence(seq_ids[i], "begin_forward");
    if (!seen.insert(seq_ids[i]).second) {
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
    total += lengths[i];
    pages_needed += pages_to_append(blocks_[seq.last_block], lengths[i]);
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

  ForwardPlan plan;
  const size_t batch = seq_ids.size();
  std::vector<KvSequence*> seqs;
  bool is_decode = true;
  for (size_t i = 0; i < batch; ++i) {
    KvSequence& seq = sequences_.at(seq_ids[i]);
    seqs.push_back(&seq);
    plan.k_ragged_rope_offset.push_back(static_cast<int32_t>(seq.length));
    seq.length += lengths[i];
    if (lengths[i] != 1) is_decode = false;
  }
  // The blocks each sequence reads, depth by depth; deeper ones fold into the last depth.
  std::vector<std::vector<int32_t>> on_depth;
  std::vector<std::vector<int32_t>> trailing(batch);
  for (size_t i = 0; i < batch; ++i) {
    const std::vector<int32_t> t = trace(*seqs[i]);
    for (size_t d = 0; d < t.size(); ++d) {
      if (d >= static_cast<size_t>(kMaxDepth)) {
        trailing[i].push_back(t[d]);
        continue;
      }
      if (on_depth.size() <= d) on_depth.emplace_back(batch, -1);
      on_depth[d][i] = t[d];
    }
  }
  std::vector<std::vector<std::pair<int32_t, int32_t>>> chunks;
  for (size_t d = 0; d < on_depth.size(); ++d) {
    auto [entries, use_decode] = chunk_depth(on_depth[d], d != kMaxDepth - 1, lengths, is_decode);
    chunks.push_back(std::move(entries));
    plan.depths.emplace_back();
    plan.depths.back().use_decode_kernel = use_decode;
  }
  plan.append_before_attention = plan.depths.back().use_decode_kernel;
  if (plan.append_before_attention) {
    for (size_t i = 0; i < batch; ++i) reserve(*seqs[i], lengths[i]);
  }
  for (size_t d = 0; d < chunks.size(); ++d) {
    DepthTables& t = plan.depths[d];
    t.qo_indptr.push_back(0);
    t.page_indptr.push_back(0);
    for (size_t i = 0; i < chunks[d].size(); ++i) {
      const auto [block, rows] = chunks[d][i];
      t.qo_indptr.push_back(t.qo_indptr.back() + rows);
      if (block == -1) {
        t.page_indptr.push_back(t.page_indptr.back());
        t.last_page_len.push_back(0);
        t.k_rope_offset.push_back(0);
        continue;
      }
      int64_t pages = 0;
      int64_t length = 0;
      auto add = [&](int32_t b) {
        t.page_indices.insert(t.page_indices.end(), blocks_[b].pages.begin(),
                              blocks_[b].pages.end());
        pages += static_cast<int64_t>(blocks_[b].pages.size());
        length += blocks_[b].length;
      };
      add(block);
      // At the last depth the entries are uncoalesced, one per sequence: its deeper blocks.
      if (d == static_cast<size_t>(kMaxDepth) - 1) {
        for (int32_t b : trailing[i]) add(b);
      }
      t.page_indptr.push_back(t.page_indptr.back() + static_cast<int32_t>(pages));
      t.last_page_len.push_back(length == 0 ? 0
                                            : static_cast<int32_t>((length - 1) % page_size_ + 1));
      t.k_rope_offset.push_back(blocks_[block].start_pos);
    }
  }
  if (!plan.append_before_attention) {
    for (size_t i = 0; i < batch; ++i) reserve(*seqs[i], lengths[i]);
  }
  plan.append_indptr.push_back(0);
  for (size_t i = 0; i < batch; ++i) {
    const KvBlock& block = blocks_[seqs[i]->last_block];
    plan.append_indptr.push_back(plan.append_indptr.back() + static_cast<int32_t>(lengths[i]));
    for (int64_t pos = 0; pos < lengths[i]; ++pos) {
      plan.q_positions.push_back(static_cast<int32_t>(plan.k_ragged_rope_offset[i] + pos));
      const int64_t in_block = block.length - lengths[i] + pos;
      plan.append_slots.push_back(static_cast<int32_t>(
          block.pages[in_block / page_size_] * page_size_ + in_block % page_size_));
    }
  }
  return plan;
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
      slots.push_back(
          static_cast<int32_t>(blocks_[b].pages[i / page_size_] * page_size_ + i % page_size_));
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
