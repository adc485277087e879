// SPDX-License-Identifier: Apache-2.0
// The page and block bookkeeping of the paged KV cache, on the host (no device memory here).
//
// A sequence's KV data lives in pages of `page_size` tokens. Its pages are grouped in blocks: a
// sequence is a chain of blocks from a root, and forked sequences share the blocks of their
// common prefix (TVM 0.27's layout, so a model library's attention kernels see the same page
// tables, depth by depth, as under TVM). Only a block no other block or sequence refers to may
// grow. Every operation checks its input before it changes anything: a refused call leaves the
// pool as it was.
//
// Sliding window (TVM 0.27's EnableSlidingWindowForSeq): a sequence may keep only its last
// `window` tokens, plus an attention sink of its first tokens. Only its last block slides: once
// the sequence is longer than the window, the block's pages between the sink pages and the
// window are freed and the sequence's length is the window's. Inside such a block token i lives
// at offset i (i < sink_length) or i - sink_length + window_offset; the kernels read the two
// numbers beside last_page_len (DepthTables).
#ifndef KILN_LLM_KV_BLOCK_POOL_H_
#define KILN_LLM_KV_BLOCK_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace kiln::llm {

// A run of pages of one sequence (or of a prefix several sequences share).
struct KvBlock {
  std::vector<int32_t> pages;  // only the last may be partly filled
  int32_t length = 0;          // tokens held in this block
  int32_t start_pos = 0;       // position in the sequence of its first token (for RoPE)
  int32_t parent = -1;         // the block before it in the sequence, or -1
  int32_t refs = 0;            // sequences and child blocks that refer to it
  int32_t sink_length = 0;     // leading tokens pinned when the block slides (set on 1st slide)
  int32_t window_offset = 0;   // offset in the pages of the first token after the sink
};

// One sequence: its last block and its total length.
struct KvSequence {
  int32_t last_block = -1;
  int64_t length = 0;
  int32_t window = -1;          // sliding window size, or -1: not sliding
  int32_t last_block_sink = 0;  // sink tokens of the last block (the prefix counts as sink)
};

// What the attention kernels read for one depth of the block trees (KvBlockPool::plan).
struct DepthTables {
  std::vector<int32_t> qo_indptr;      // query rows per entry (prefix sums)
  std::vector<int32_t> page_indptr;    // pages per entry (prefix sums)
  std::vector<int32_t> page_indices;   // the pages
  std::vector<int32_t> last_page_len;  // tokens in each entry's last page (0: no pages)
  std::vector<int32_t> window_offset;  // each entry's sliding window offset (0: not sliding)
  std::vector<int32_t> sink_size;      // each entry's attention sink length (0: not sliding)
  std::vector<int32_t> k_rope_offset;  // position of each entry's first cached token
  bool use_decode_kernel = false;      // one query row per entry: the decode kernel serves it
};

// The layout of one forward pass (KvBlockPool::plan).
struct ForwardPlan {
  std::vector<DepthTables> depths;            // at most kMaxDepth
  bool append_before_attention = false;       // decode: write k/v first, attend over the pages only
  std::vector<int32_t> append_indptr;         // new tokens per sequence (prefix sums)
  std::vector<int32_t> k_ragged_rope_offset;  // each sequence's length before the pass
  std::vector<int32_t> q_positions;           // each new token's position in its sequence
  std::vector<int32_t> append_slots;          // each new token's slot: page * page_size + offset,
                                              // or -1: slid out of its window in this pass
};

class KvBlockPool {
 public:
  // Copies the first `length` tokens of page `src` to page `dst` on the device.
  using CopyPage = std::function<void(int32_t src, int32_t dst, int32_t length)>;
  // Depth of block trees the attention kernels see; deeper blocks are folded into the last.
  static constexpr int kMaxDepth = 2;

  // `num_pages` pages of `page_size` tokens each; at most `max_sequences` per forward pass and
  // `prefill_chunk` new tokens in one. `sliding_window`: the cache supports sliding window (its
  // sequences may enable it; every pass attends over the pages before appending, as TVM's).
  KvBlockPool(int64_t num_pages, int64_t page_size, int64_t max_sequences, int64_t prefill_chunk,
              bool sliding_window = false);

  // Forgets every sequence and frees every page.
  void clear();
  // Adds an empty sequence. ValueError when `seq_id` is present.
  void add_sequence(int64_t seq_id);
  // Removes a sequence and frees the pages only it used. ValueError when absent.
  void remove_sequence(int64_t seq_id);
  // Makes `child_id` a sequence holding the first `fork_pos` tokens of `parent_id` (-1: all of
  // them), sharing its pages; a partly used page at the fork point is copied: `copy_page(src,
  // dst, length)` is called for it. ValueError for an absent parent, a present child, a fork
  // position outside [-1, parent length], or no free page for the copy.
  void fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos,
                     const CopyPage& copy_page);
  // Drops the last `n` tokens of a sequence. ValueError when absent or n outside [0, length].
  // A shared prefix cut inside a page copies that page (copy_page). For a sliding-window
  // sequence, ValueError when the cut reaches into a shared prefix (TVM's re-fork would drop the
  // window) or, once its window has slid, into the attention sink.
  void pop_tokens(int64_t seq_id, int64_t n, const CopyPage& copy_page);
  // Makes a sequence keep only its last `window` tokens and its first `sink` ones from now on.
  // ValueError (naming the builtin) when the pool was made without sliding window, the sequence
  // is absent, sink < 0, window < 1, sink >= window, or the sequence already slides.
  void enable_sliding_window(int64_t seq_id, int64_t window, int64_t sink);

  // Lays out a forward pass that appends `lengths[i]` tokens to sequence `seq_ids[i]` and
  // reserves their pages. Checks everything first (ValueError naming the sequence: absent or
  // listed twice, a length below 1, more than max_sequences sequences or prefill_chunk tokens,
  // a sequence whose last block is shared, too few free pages) and changes nothing on error.
  // Writes the layout into `out`, reusing its storage (a decode step then allocates nothing);
  // `out` is left as it was when the call is refused.
  void plan(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths, ForwardPlan& out);
  // The same, into a new ForwardPlan.
  ForwardPlan plan(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths);

  // The slot (page * page_size + offset) of each token of a sequence in [begin, end) (for a
  // sliding sequence, of the tokens it still holds).
  std::vector<int32_t> token_slots(int64_t seq_id, int64_t begin, int64_t end) const;

  // A sequence, or ValueError naming `seq_id` and `who`.
  const KvSequence& sequence(int64_t seq_id, const char* who) const;
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t total_length() const;
  bool empty() const;
  int64_t page_size() const { return page_size_; }
  bool sliding_window() const { return sliding_window_; }
  int64_t num_pages() const { return num_pages_; }

 private:
  int32_t take_page();
  int32_t take_block();
  std::vector<int32_t> trace(const KvSequence& seq) const;  // root first
  // The first position in `seq_ids` whose id appeared before it, or seq_ids.size().
  size_t first_repeat(std::span<const int64_t> seq_ids);
  // The same into `blocks` (cleared first).
  void trace_into(const KvSequence& seq, std::vector<int32_t>& blocks) const;
  // Pages the last block of `seq` gains (or, negative, loses) when `n` tokens are appended to it
  // and it slides; changes nothing.
  int64_t pages_to_append(const KvSequence& seq, int64_t n) const;
  // Appends `n` tokens to the last block of `seq` (whose length already counts them), taking
  // pages, and slides its window.
  void reserve(KvSequence& seq, int64_t n);
  // The page-offset of token `i` of `block` (sink and window aware).
  static int64_t offset_in_block(const KvBlock& block, int64_t i);
  // fork_sequence after its checks; returns the child's block.
  // `who`: the builtin named in errors.
  int32_t fork_checked(const char* who, KvSequence& parent, int64_t fork_pos,
                       const CopyPage& copy_page);
  // Frees the blocks only `seq` holds and drops its reference to the first shared one.
  void release_chain(const KvSequence& seq);
  // The entries of one depth into `entries`: (block or -1, query rows), coalesced or not
  // (TVM's rule); returns whether the decode kernel serves the depth. `coalesced`: scratch.
  bool chunk_depth(const std::vector<int32_t>& blocks, bool allow_coalesce,
                   std::span<const int64_t> lengths, bool is_decode,
                   std::vector<std::pair<int32_t, int32_t>>& entries,
                   std::vector<std::pair<int32_t, int32_t>>& coalesced) const;

  int64_t num_pages_;
  int64_t page_size_;
  int64_t max_sequences_;
  int64_t prefill_chunk_;
  bool sliding_window_;
  std::vector<KvBlock> blocks_;
  std::vector<int32_t> free_blocks_;
  std::vector<int32_t> free_pages_;  // taken from the back
  std::map<int64_t, KvSequence> sequences_;

  // Working storage of plan(), kept between passes so that a pass allocates nothing once the
  // batch sizes repeat (TVM's cache likewise reuses its host arrays).
  struct PlanScratch {
    std::vector<std::pair<int64_t, size_t>> sorted_ids;  // (id, position)
    std::vector<KvSequence*> seqs;
    std::vector<int32_t> trace;
    std::vector<std::vector<int32_t>> on_depth;  // per depth: each sequence's block or -1
    std::vector<std::vector<int32_t>> trailing;  // per sequence: blocks past the last depth
    std::vector<std::vector<std::pair<int32_t, int32_t>>> chunks;  // per depth: entries
    std::vector<std::pair<int32_t, int32_t>> coalesced;
    std::vector<int32_t> length_before;
  };
  PlanScratch scratch_;
};

}  // namespace kiln::llm

#endif  // KILN_LLM_KV_BLOCK_POOL_H_
