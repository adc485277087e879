// SPDX-License-Identifier: Apache-2.0
// The paged KV cache a model library compiled with TVM's TIRPagedKVCache creates through
// vm.builtin.paged_attention_kv_cache_create (TVM 0.27's calling convention, docs/llm.md).
//
// The cache owns the K/V pages of every layer on the model's device, the block bookkeeping
// (kv_block_pool.h) and the auxiliary index arrays the attention kernels read. It runs the
// kernels the library passed in (split/rotary, transpose-append, ragged prefill, paged prefill,
// paged decode, merge, page copy): Kiln brings the bookkeeping, the library brings the math, so
// a step computes what it computes under TVM. Host object: one per model instance, used from
// one thread at a time (as TVM's).
#ifndef KILN_LLM_PAGED_KV_CACHE_H_
#define KILN_LLM_PAGED_KV_CACHE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/function.h"
#include "kiln/held_tensors.h"
#include "kiln/object.h"
#include "kiln/profiling/profiler.h"
#include "kiln/tensor.h"
#include "kv_block_pool.h"

namespace kiln::llm {

// How rotary position embedding is applied (TVM's RoPEMode values).
enum class RopeMode : int64_t { kNone = 0, kNormal = 1, kInline = 2 };

// A kernel the library passed in, with the name it is reported under in errors.
struct NamedKernel {
  std::string role;  // "paged prefill", "split rotary", ...
  Function function;
  explicit operator bool() const { return static_cast<bool>(function); }
};

// The shape of the cache, from the create call.
struct PagedKvConfig {
  int64_t max_batch_size = 0;
  int64_t max_total_length = 0;
  int64_t prefill_chunk = 0;
  int64_t page_size = 0;
  int64_t num_layers = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // Sequences may slide a window (support_sliding_window = 1): every layer's cross attention
  // runs the sliding-window kernels, RoPE is applied inline (TVM's rule) and the cache has two
  // more pages per sequence.
  bool sliding_window = false;
  RopeMode rope_mode = RopeMode::kNone;
  double rope_scale = 1;
  double rope_theta = 10000;
};

// The kernels of a TIR paged KV cache.
struct PagedKvKernels {
  NamedKernel transpose_append;       // (pages, k, v, slots)
  NamedKernel ragged_prefill;         // new queries against new keys, causal
  NamedKernel paged_prefill;          // queries against cached pages
  NamedKernel paged_decode;           // one query per sequence against cached pages
  NamedKernel paged_prefill_sliding;  // paged prefill reading the 3-row length info
  NamedKernel paged_decode_sliding;   // paged decode reading the 3-row length info
  NamedKernel merge;                  // (o, lse, o_other, lse_other): merges attention states
  NamedKernel split_rotary;           // fused qkv -> q, k, v with RoPE applied
  NamedKernel copy_page;              // (pages, src, dst, length)
  NamedKernel debug_get_kv;           // (pages, slots, k, v, layer); may be absent
};

class PagedKvCache : public Object, public HeldTensors {
 public:
  // The cache for `config` and `kernels`, its pages allocated beside `like` (the device and
  // dtype of the model's K/V). `rope_ext_factors`: an optional tensor the split-rotary kernel
  // takes instead of the rope-mode flag. Throws ValueError for an inconsistent configuration.
  PagedKvCache(const PagedKvConfig& config, PagedKvKernels kernels, const Tensor& like,
               std::optional<Tensor> rope_ext_factors);
  const char* type_key() const override { return "relax.vm.PagedAttentionKVCache"; }

  // The KV-state operations (vm.builtin.kv_state_*). Errors: ValueError naming the builtin and
  // the sequence; the cache is unchanged by a refused call.
  void clear();
  void add_sequence(int64_t seq_id);
  void remove_sequence(int64_t seq_id);
  void fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos);
  void pop_tokens(int64_t seq_id, int64_t n);
  void begin_forward(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths);
  void end_forward();
  // vm.builtin.attention_kv_cache_enable_sliding_window_for_seq: the sequence keeps its last
  // `window` tokens and its first `sink` (KvBlockPool::enable_sliding_window; its errors).
  void enable_sliding_window(int64_t seq_id, int64_t window, int64_t sink);

  // Attention for layer `layer` over the pass begun last (vm.builtin.attention_kv_cache_*).
  // `qkv`: (tokens, qo_heads + 2 * kv_heads, head_dim); `out`: (tokens, qo_heads, head_dim).
  void attention_with_fused_qkv(int64_t layer, double sm_scale, const Tensor& qkv,
                                const Tensor& out);
  // Ragged self attention of the new tokens only; writes `out` and `lse` (log-sum-exp).
  void self_attention(int64_t layer, double sm_scale, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& out, const Tensor& lse);
  // Attention of the new queries over the cached pages only.
  void cross_attention(int64_t layer, double sm_scale, const Tensor& q, const Tensor& out,
                       const Tensor& lse);
  // The position of each new token in its sequence, int32 on the device.
  Tensor query_positions();
  // Copies the K and V of tokens [begin, end) of a sequence into `k` and `v`, each
  // (layers, end - begin, kv_heads, head_dim).
  void debug_get_kv(int64_t seq_id, int64_t begin, int64_t end, const Tensor& k, const Tensor& v);

  // Records each kernel the cache runs as a call of `profiler` (borrowed, started by the
  // caller; nested in the VM's row of the builtin that ran it) until set_profiler(nullptr).
  void set_profiler(profiling::Profiler* profiler) { profiler_ = profiler; }
  // Bytes of device memory the pages take.
  int64_t page_bytes() const;
  // The pages, index buffers and scratch (what an RPC session charges the cache for).
  std::vector<Tensor> held_tensors() const override;

  int64_t num_available_pages() const { return pool_.free_pages(); }
  int64_t total_sequence_length() const { return pool_.total_length(); }
  bool empty() const { return pool_.empty(); }
  const PagedKvConfig& config() const { return config_; }

 private:
  // Index arrays of the current pass on the device (views of the fixed-size buffers).
  // length_info: (3, entries) when the cache slides windows (last_page_len, window offset,
  // sink size, the sliding-window kernels' layout), else last_page_len.
  struct DeviceTables {
    Tensor qo_indptr, page_indptr, page_indices, length_info, k_rope_offset;
  };
  void check_layer(int64_t layer, const char* who) const;
  int64_t pass_tokens(const char* who) const;
  void sync_tables();
  void self_attention_into(const char* who, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, double sm_scale);
  // Attention over the cached pages, merged into (out, lse) unless `first`; returns whether any
  // depth had pages.
  bool cross_attention_into(const char* who, int64_t layer, const Tensor& q, const Tensor& out,
                            const Tensor& lse, double sm_scale, bool first);
  void copy_page(int32_t src, int32_t dst, int32_t length);
  // Runs a kernel of the library; its errors name the builtin `who` and the kernel.
  template <typename... Args>
  void run(const NamedKernel& kernel, const char* who, Args&&... args);

  PagedKvConfig config_;
  PagedKvKernels kernels_;
  profiling::Profiler* profiler_ = nullptr;
  std::optional<Tensor> rope_ext_factors_;
  KvBlockPool pool_;
  std::vector<Tensor> pages_;  // per layer: (pages, 2, kv_heads, page_size, head_dim)

  // Fixed-size device buffers the tables are copied into, and scratch for attention.
  std::vector<DeviceTables> depth_buffers_;
  Tensor append_indptr_buf_, k_ragged_rope_buf_, q_positions_buf_, append_slots_buf_;
  Tensor q_buf_, k_buf_, v_buf_, out_buf_, lse_buf_, merged_lse_buf_;

  // The pass begun last: its layout on the host and, once synced, on the device.
  bool in_pass_ = false;
  bool tables_dirty_ = false;
  ForwardPlan plan_;
  std::vector<DeviceTables> depth_tables_;
  std::vector<std::vector<int32_t>> length_info_host_;  // per depth: the 3 rows, uploaded
  std::vector<Tensor> length_info_flat_;                // per depth: their 1-D upload view
  Tensor append_indptr_, k_ragged_rope_, q_positions_, append_slots_;
  // Views of the scratch buffers sized for the pass, made once per pass (not per layer).
  Tensor q_, k_, v_, depth_out_, depth_lse_, merged_lse_;
};

}  // namespace kiln::llm

#endif  // KILN_LLM_PAGED_KV_CACHE_H_
