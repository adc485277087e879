// SPDX-License-Identifier: Apache-2.0
#include "paged_kv_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "device_tensors.h"
#include "kiln/error.h"

namespace kiln::llm {
namespace {

constexpr const char* kFusedQkv = "vm.builtin.attention_kv_cache_attention_with_fused_qkv";
constexpr const char* kSelfAttention = "vm.builtin.attention_kv_cache_self_attention";
constexpr const char* kCrossAttention = "vm.builtin.attention_kv_cache_cross_attention";

const DataType kIndexType = DataType::Int(32);

std::string shape_text(const Tensor& t) { return fmt::format("{}", t.shape()); }

void expect_shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* who,
                  const char* what) {
  if (!std::equal(t.shape().begin(), t.shape().end(), shape.begin(), shape.end())) {
    throw ValueError(fmt::format("{}: {} has shape {}, expected [{}]", who, what, shape_text(t),
                                 fmt::join(shape, ", ")));
  }
}

}  // namespace

template <typename... Args>
void PagedKvCache::run(const NamedKernel& kernel, const char* who, Args&&... args) {
  if (!kernel) {
    throw ValueError(
        fmt::format("{}: the model library passed no {} kernel to "
                    "vm.builtin.paged_attention_kv_cache_create",
                    who, kernel.role));
  }
  if (profiler_ != nullptr) profiler_->start_call(kernel.function.name(), pages_[0].device());
  try {
    kernel.function(std::forward<Args>(args)...);
  } catch (const Error& e) {
    if (profiler_ != nullptr) profiler_->stop_call();
    throw RuntimeError(fmt::format("{}: the library's {} kernel ({}) failed: {}", who, kernel.role,
                                   kernel.function.name(), e.what()));
  }
  if (profiler_ != nullptr) profiler_->stop_call();
}

int64_t PagedKvCache::page_bytes() const {
  int64_t total = 0;
  for (const Tensor& pages : pages_) total += static_cast<int64_t>(pages.nbytes());
  return total;
}

std::vector<Tensor> PagedKvCache::held_tensors() const {
  std::vector<Tensor> held = pages_;
  for (const DeviceTables& t : depth_buffers_) {
    held.insert(held.end(),
                {t.qo_indptr, t.page_indptr, t.page_indices, t.length_info, t.k_rope_offset});
  }
  held.insert(held.end(),
              {append_indptr_buf_, k_ragged_rope_buf_, q_positions_buf_, append_slots_buf_, q_buf_,
               k_buf_, v_buf_, out_buf_, lse_buf_, merged_lse_buf_});
  return held;
}

PagedKvCache::PagedKvCache(const PagedKvConfig& config, PagedKvKernels kernels, const Tensor& like,
                           std::optional<Tensor> rope_ext_factors)
    : config_(config),
      kernels_(std::move(kernels)),
      rope_ext_factors_(std::move(rope_ext_factors)),
      // One page more than the capacity needs, as TVM allocates, and with sliding window two
      // more per sequence (a window's partly used first and last pages).
      pool_((config.max_total_length + config.page_size - 1) / config.page_size + 1 +
                (config.sliding_window ? 2 * config.max_batch_size : 0),
            config.page_size, config.max_batch_size, config.prefill_chunk, config.sliding_window) {
  const DataType dtype = like.dtype();
  const int64_t num_pages = pool_.num_pages();
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    pages_.push_back(empty_beside(
        like, {num_pages, 2, config.num_kv_heads, config.page_size, config.head_dim}, dtype));
  }
  const int64_t seqs = config.max_batch_size;
  for (int d = 0; d < KvBlockPool::kMaxDepth; ++d) {
    depth_buffers_.push_back(DeviceTables{
        empty_beside(like, {seqs + 1}, kIndexType), empty_beside(like, {seqs + 1}, kIndexType),
        empty_beside(like, {num_pages}, kIndexType),
        empty_beside(like, {config.sliding_window ? 3 * seqs : seqs}, kIndexType),
        empty_beside(like, {seqs}, kIndexType)});
  }
  const int64_t chunk = config.prefill_chunk;
  append_indptr_buf_ = empty_beside(like, {seqs + 1}, kIndexType);
  k_ragged_rope_buf_ = empty_beside(like, {seqs}, kIndexType);
  q_positions_buf_ = empty_beside(like, {chunk}, kIndexType);
  append_slots_buf_ = empty_beside(like, {chunk}, kIndexType);
  q_buf_ = empty_beside(like, {chunk, config.num_qo_heads, config.head_dim}, dtype);
  k_buf_ = empty_beside(like, {chunk, config.num_kv_heads, config.head_dim}, dtype);
  v_buf_ = empty_beside(like, {chunk, config.num_kv_heads, config.head_dim}, dtype);
  out_buf_ = empty_beside(like, {chunk, config.num_qo_heads, config.head_dim}, dtype);
  lse_buf_ = empty_beside(like, {chunk, config.num_qo_heads}, DataType::Float(32));
  merged_lse_buf_ = empty_beside(like, {chunk, config.num_qo_heads}, DataType::Float(32));
}

void PagedKvCache::clear() {
  pool_.clear();
  in_pass_ = false;
  tables_dirty_ = false;
}

void PagedKvCache::add_sequence(int64_t seq_id) { pool_.add_sequence(seq_id); }

void PagedKvCache::remove_sequence(int64_t seq_id) { pool_.remove_sequence(seq_id); }

void PagedKvCache::copy_page(int32_t src, int32_t dst, int32_t length) {
  for (const Tensor& pages : pages_) {
    run(kernels_.copy_page, "vm.builtin.kv_state_fork_sequence", pages, int64_t{src}, int64_t{dst},
        int64_t{length});
  }
}

void PagedKvCache::fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos) {
  pool_.fork_sequence(parent_id, child_id, fork_pos,
                      [this](int32_t src, int32_t dst, int32_t n) { copy_page(src, dst, n); });
}

void PagedKvCache::pop_tokens(int64_t seq_id, int64_t n) {
  pool_.pop_tokens(seq_id, n,
                   [this](int32_t src, int32_t dst, int32_t len) { copy_page(src, dst, len); });
}

void PagedKvCache::begin_forward(std::span<const int64_t> seq_ids,
                                 std::span<const int64_t> lengths) {
  // A refused pass leaves no pass open: attention after it must not run on the last pass's
  // tables.
  in_pass_ = false;
  pool_.plan(seq_ids, lengths, plan_);  // checks everything before it changes anything
  in_pass_ = true;
  tables_dirty_ = true;
}

void PagedKvCache::end_forward() { in_pass_ = false; }

void PagedKvCache::enable_sliding_window(int64_t seq_id, int64_t window, int64_t sink) {
  pool_.enable_sliding_window(seq_id, window, sink);
}

void PagedKvCache::sync_tables() {
  if (!tables_dirty_) return;
  depth_tables_.resize(plan_.depths.size());
  length_info_host_.resize(plan_.depths.size());
  length_info_flat_.resize(plan_.depths.size());
  for (size_t d = 0; d < plan_.depths.size(); ++d) {
    const DepthTables& host = plan_.depths[d];
    const DeviceTables& buf = depth_buffers_[d];
    DeviceTables& t = depth_tables_[d];
    upload_int32(buf.qo_indptr, host.qo_indptr, t.qo_indptr);
    upload_int32(buf.page_indptr, host.page_indptr, t.page_indptr);
    upload_int32(buf.page_indices, host.page_indices, t.page_indices);
    if (config_.sliding_window) {
      // The three rows one after the other, read as a (3, entries) tensor.
      std::vector<int32_t>& rows = length_info_host_[d];
      rows = host.last_page_len;
      rows.insert(rows.end(), host.window_offset.begin(), host.window_offset.end());
      rows.insert(rows.end(), host.sink_size.begin(), host.sink_size.end());
      upload_int32(buf.length_info, rows, length_info_flat_[d]);
      reuse_leading_view(buf.length_info, {3, static_cast<int64_t>(host.last_page_len.size())},
                         t.length_info);
    } else {
      upload_int32(buf.length_info, host.last_page_len, t.length_info);
    }
    upload_int32(buf.k_rope_offset, host.k_rope_offset, t.k_rope_offset);
  }
  upload_int32(append_indptr_buf_, plan_.append_indptr, append_indptr_);
  upload_int32(k_ragged_rope_buf_, plan_.k_ragged_rope_offset, k_ragged_rope_);
  upload_int32(q_positions_buf_, plan_.q_positions, q_positions_);
  upload_int32(append_slots_buf_, plan_.append_slots, append_slots_);
  synchronize_beside(append_slots_buf_);  // plan_'s arrays may change once this returns
  const int64_t tokens = plan_.append_indptr.back();
  const PagedKvConfig& c = config_;
  reuse_leading_view(q_buf_, {tokens, c.num_qo_heads, c.head_dim}, q_);
  reuse_leading_view(k_buf_, {tokens, c.num_kv_heads, c.head_dim}, k_);
  reuse_leading_view(v_buf_, {tokens, c.num_kv_heads, c.head_dim}, v_);
  reuse_leading_view(out_buf_, {tokens, c.num_qo_heads, c.head_dim}, depth_out_);
  reuse_leading_view(lse_buf_, {tokens, c.num_qo_heads}, depth_lse_);
  reuse_leading_view(merged_lse_buf_, {tokens, c.num_qo_heads}, merged_lse_);
  tables_dirty_ = false;
}

void PagedKvCache::check_layer(int64_t layer, const char* who) const {
  if (layer < 0 || layer >= config_.num_layers) {
    throw IndexError(fmt::format("{}: layer {} is outside the cache's {} layers", who, layer,
                                 config_.num_layers));
  }
}

int64_t PagedKvCache::pass_tokens(const char* who) const {
  if (!in_pass_) {
    throw ValueError(fmt::format(
        "{}: no forward pass has begun (call vm.builtin.kv_state_begin_forward first)", who));
  }
  return plan_.append_indptr.back();
}

void PagedKvCache::self_attention_into(const char* who, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       double sm_scale) {
  run(kernels_.ragged_prefill, who, q, append_indptr_, k, v, append_indptr_, q_positions_,
      k_ragged_rope_, out, lse, int64_t{1}, int64_t{config_.rope_mode == RopeMode::kInline},
      config_.rope_scale, config_.rope_theta, sm_scale);
}

bool PagedKvCache::cross_attention_into(const char* who, int64_t layer, const Tensor& q,
                                        const Tensor& out, const Tensor& lse, double sm_scale,
                                        bool first) {
  const int64_t rotary_inline = config_.rope_mode == RopeMode::kInline;
  // A sliding-window cache runs the sliding-window kernels on every layer (TVM's choice).
  const NamedKernel& prefill =
      config_.sliding_window ? kernels_.paged_prefill_sliding : kernels_.paged_prefill;
  const NamedKernel& decode =
      config_.sliding_window ? kernels_.paged_decode_sliding : kernels_.paged_decode;
  bool computed = false;
  for (size_t d = 0; d < depth_tables_.size(); ++d) {
    if (plan_.depths[d].page_indices.empty()) continue;
    const DeviceTables& t = depth_tables_[d];
    const Tensor& depth_out = first ? out : depth_out_;
    const Tensor& depth_lse = first ? lse : depth_lse_;
    if (plan_.depths[d].use_decode_kernel) {
      run(decode, who, q, pages_[layer], t.page_indptr, t.page_indices, t.length_info,
          t.k_rope_offset, q_positions_, depth_out, depth_lse, rotary_inline, config_.rope_scale,
          config_.rope_theta, sm_scale);
    } else {
      run(prefill, who, q, t.qo_indptr, pages_[layer], t.page_indptr, t.page_indices, t.length_info,
          t.k_rope_offset, q_positions_, depth_out, depth_lse, int64_t{0}, rotary_inline,
          config_.rope_scale, config_.rope_theta, sm_scale);
    }
    if (!first) run(kernels_.merge, who, out, lse, depth_out, depth_lse);
    first = false;
    computed = true;
  }
  return computed;
}

void PagedKvCache::attention_with_fused_qkv(int64_t layer, double sm_scale, const Tensor& qkv,
                                            const Tensor& out) {
  check_layer(layer, kFusedQkv);
  const int64_t tokens = pass_tokens(kFusedQkv);
  const PagedKvConfig& c = config_;
  const DataType dtype = pages_[layer].dtype();
  if (qkv.dtype() != dtype || out.dtype() != dtype) {
    throw TypeError(fmt::format("{}: qkv is {} and the output {}; the cache holds {}", kFusedQkv,
                                qkv.dtype().str(), out.dtype().str(), dtype.str()));
  }
  if (qkv.ndim() != 3 || qkv.shape()[1] != c.num_qo_heads + 2 * c.num_kv_heads ||
      qkv.shape()[2] != c.head_dim || qkv.shape()[0] < tokens) {
    throw ValueError(fmt::format(
        "{}: qkv has shape {}; the cache expects [>= {} tokens, {} heads ({} query + 2 x {} "
        "key/value), {}]",
        kFusedQkv, shape_text(qkv), tokens, c.num_qo_heads + 2 * c.num_kv_heads, c.num_qo_heads,
        c.num_kv_heads, c.head_dim));
  }
  expect_shape(out, {qkv.shape()[0], c.num_qo_heads, c.head_dim}, kFusedQkv, "the output");
  sync_tables();
  const Tensor& q = q_;
  const Tensor& k = k_;
  const Tensor& v = v_;
  Tensor qkv_view = qkv;
  Tensor out_view = out;
  if (tokens != qkv.shape()[0]) {
    qkv_view = leading_view(qkv, {tokens, qkv.shape()[1], qkv.shape()[2]});
    out_view = leading_view(out, {tokens, c.num_qo_heads, c.head_dim});
  }
  if (rope_ext_factors_) {
    run(kernels_.split_rotary, kFusedQkv, qkv_view, q_positions_, q, k, v, *rope_ext_factors_);
  } else {
    run(kernels_.split_rotary, kFusedQkv, qkv_view, q_positions_, q, k, v,
        int64_t{c.rope_mode == RopeMode::kNormal});
  }
  if (plan_.append_before_attention) {
    run(kernels_.transpose_append, kFusedQkv, pages_[layer], k, v, append_slots_);
  }
  const Tensor& merged_lse = merged_lse_;
  bool first = true;
  if (!plan_.append_before_attention) {
    self_attention_into(kFusedQkv, q, k, v, out_view, merged_lse, sm_scale);
    first = false;
  }
  const bool cross =
      cross_attention_into(kFusedQkv, layer, q, out_view, merged_lse, sm_scale, first);
  if (first && !cross) {
    throw ValueError(
        fmt::format("{}: nothing to attend to (no new tokens and no cached pages)", kFusedQkv));
  }
  if (!plan_.append_before_attention) {
    run(kernels_.transpose_append, kFusedQkv, pages_[layer], k, v, append_slots_);
  }
}

void PagedKvCache::self_attention(int64_t layer, double sm_scale, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse) {
  check_layer(layer, kSelfAttention);
  const int64_t tokens = pass_tokens(kSelfAttention);
  const PagedKvConfig& c = config_;
  expect_shape(q, {tokens, c.num_qo_heads, c.head_dim}, kSelfAttention, "q");
  expect_shape(k, {tokens, c.num_kv_heads, c.head_dim}, kSelfAttention, "k");
  expect_shape(v, {tokens, c.num_kv_heads, c.head_dim}, kSelfAttention, "v");
  expect_shape(out, {tokens, c.num_qo_heads, c.head_dim}, kSelfAttention, "the output");
  expect_shape(lse, {tokens, c.num_qo_heads}, kSelfAttention, "the log-sum-exp output");
  sync_tables();
  self_attention_into(kSelfAttention, q, k, v, out, lse, sm_scale);
}

void PagedKvCache::cross_attention(int64_t layer, double sm_scale, const Tensor& q,
                                   const Tensor& out, const Tensor& lse) {
  check_layer(layer, kCrossAttention);
  const int64_t tokens = pass_tokens(kCrossAttention);
  const PagedKvConfig& c = config_;
  expect_shape(q, {tokens, c.num_qo_heads, c.head_dim}, kCrossAttention, "q");
  expect_shape(out, {tokens, c.num_qo_heads, c.head_dim}, kCrossAttention, "the output");
  expect_shape(lse, {tokens, c.num_qo_heads}, kCrossAttention, "the log-sum-exp output");
  sync_tables();
  cross_attention_into(kCrossAttention, layer, q, out, lse, sm_scale, true);
}

Tensor PagedKvCache::query_positions() {
  pass_tokens("vm.builtin.attention_kv_cache_get_query_positions");
  sync_tables();
  return q_positions_;
}

void PagedKvCache::debug_get_kv(int64_t seq_id, int64_t begin, int64_t end, const Tensor& k,
                                const Tensor& v) {
  constexpr const char* who = "vm.builtin.attention_kv_cache_debug_get_kv";
  const std::vector<int32_t> slots = pool_.token_slots(seq_id, begin, end);
  const PagedKvConfig& c = config_;
  expect_shape(k, {c.num_layers, end - begin, c.num_kv_heads, c.head_dim}, who, "k");
  expect_shape(v, {c.num_layers, end - begin, c.num_kv_heads, c.head_dim}, who, "v");
  Tensor slots_device = empty_beside(pages_[0], {end - begin}, kIndexType);
  slots_device.copy_from(slots.data(), slots.size() * sizeof(int32_t));
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    run(kernels_.debug_get_kv, who, pages_[layer], slots_device, k, v, layer);
  }
}

}  // namespace kiln::llm
