// SPDX-License-Identifier: Apache-2.0
// The paged KV cache's VM builtins under TVM 0.27's names and argument orders
// (vm.builtin.paged_attention_kv_cache_create, vm.builtin.kv_state_*,
// vm.builtin.attention_kv_cache_*). Sliding window is TVM's per-sequence one
// (support_sliding_window = 1, then vm.builtin.attention_kv_cache_enable_sliding_window_for_seq):
// every layer runs the library's sliding-window kernels (arguments 18 and 19). The features
// Kiln's cache does not have (per-layer sliding window: the "mha_sliding" attention kind; token
// trees, MLA, disaggregation, FlashInfer kernels) are refused by name.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <span>

#include "builtin_table.h"
#include "kiln/error.h"
#include "kiln/vm/virtual_machine.h"
#include "paged_kv_cache.h"

namespace kiln::llm::detail {
namespace {

constexpr const char* kCreate = "vm.builtin.paged_attention_kv_cache_create";

void expect_count(const char* who, int32_t n, int32_t min, int32_t max) {
  if (n < min || n > max) {
    throw TypeError(min == max
                        ? fmt::format("{} takes {} arguments, got {}", who, min, n)
                        : fmt::format("{} takes {} to {} arguments, got {}", who, min, max, n));
  }
}

// The cache argument of a builtin.
PagedKvCache& cache_arg(const Any& v, const char* who) {
  // Borrowed from the argument, which the call holds: no reference taken per call.
  auto* cache = v.type_code() == kTypeObject ? dynamic_cast<PagedKvCache*>(v.object()) : nullptr;
  if (cache == nullptr) {
    throw TypeError(
        fmt::format("{}: argument 0 expects a KV cache "
                    "(relax.vm.PagedAttentionKVCache), got {}",
                    who, v.type_code() == kTypeObject ? v.object()->type_key() : v.type_name()));
  }
  return *cache;
}

int64_t int_arg(const Any& v, const char* who, int index) {
  if (v.type_code() != KILN_TYPE_INT && v.type_code() != KILN_TYPE_BOOL) {
    throw TypeError(
        fmt::format("{}: argument {} expects an integer, got {}", who, index, v.type_name()));
  }
  return v.raw_int();
}

double float_arg(const Any& v, const char* who, int index) {
  if (v.type_code() == KILN_TYPE_FLOAT) return v.raw_float();
  return static_cast<double>(int_arg(v, who, index));
}

Tensor tensor_arg(const Any& v, const char* who, int index) {
  if (v.type_code() != KILN_TYPE_TENSOR) {
    throw TypeError(
        fmt::format("{}: argument {} expects a tensor, got {}", who, index, v.type_name()));
  }
  return v.cast<Tensor>();
}

// A shape argument's values, borrowed from `v` (valid while the call's arguments are).
std::span<const int64_t> shape_arg(const Any& v, const char* who, int index) {
  if (v.type_code() != KILN_TYPE_SHAPE) {
    throw TypeError(
        fmt::format("{}: argument {} expects a shape, got {}", who, index, v.type_name()));
  }
  const KilnShape* shape = v.to_abi().value.v_shape;
  return {shape->dims, static_cast<size_t>(shape->ndim)};
}

Function function_arg(const Any& v, const char* role, int index) {
  if (v.type_code() != KILN_TYPE_FUNCTION) {
    throw TypeError(fmt::format("{}: argument {} ({} kernel) expects a function, got {}", kCreate,
                                index, role, v.type_name()));
  }
  return v.cast<Function>();
}

std::vector<Any> tuple_arg(const Any& v, const char* role, int index) {
  Ref<vm::ArrayObj> array = v.as_object<vm::ArrayObj>();
  if (!array) {
    throw TypeError(fmt::format("{}: argument {} ({} kernels) expects a tuple, got {}", kCreate,
                                index, role, v.type_name()));
  }
  return array->items;
}

// An attention kernel given as ("tirx", function); empty tuple: absent. FlashInfer's
// ("flashinfer", run, plan) is refused: Kiln runs TIR kernels only.
NamedKernel attention_kernel(const Any& v, const char* role, int index) {
  const std::vector<Any> items = tuple_arg(v, role, index);
  if (items.empty()) return NamedKernel{role, Function()};
  const std::string backend =
      items[0].type_code() == KILN_TYPE_STRING ? items[0].cast<std::string>() : "";
  if (backend != "tirx" || items.size() != 2) {
    throw ValueError(fmt::format(
        "{}: argument {} ({} kernel) is a '{}' kernel; Kiln's KV cache runs TIR kernels only "
        "(\"tirx\", compiled with TIRPagedKVCache), not FlashInfer",
        kCreate, index, role, backend));
  }
  return NamedKernel{role, function_arg(items[1], role, index)};
}

Any create(const Any* a, int32_t n) {
  expect_count(kCreate, n, 28, 29);
  const std::span<const int64_t> cache_config = shape_arg(a[0], kCreate, 0);
  if (cache_config.size() != 5 && cache_config.size() != 6) {
    throw ValueError(
        fmt::format("{}: argument 0 (the cache configuration) has {} values, "
                    "expected 5 or 6",
                    kCreate, cache_config.size()));
  }
  PagedKvConfig c;
  c.max_batch_size = cache_config[0];
  c.max_total_length = cache_config[1];
  c.prefill_chunk = cache_config[2];
  c.page_size = cache_config[3];
  if (cache_config[4] != 0 && cache_config[4] != 1) {
    throw ValueError(
        fmt::format("{}: support_sliding_window (argument 0, value 4) is {}, expected 0 or 1",
                    kCreate, cache_config[4]));
  }
  c.sliding_window = cache_config[4] == 1;
  // The per-layer window size: read by "mha_sliding" layers only (refused below), but TVM
  // checks it whatever the layers.
  if (cache_config.size() == 6 && cache_config[5] < 1) {
    throw ValueError(
        fmt::format("{}: layer_sliding_window_size (argument 0, value 5) is {}, must be at least 1",
                    kCreate, cache_config[5]));
  }
  for (auto [value, name] :
       {std::pair{c.max_batch_size, "max_batch_size"},
        std::pair{c.max_total_length, "max_total_seq_len"},
        std::pair{c.prefill_chunk, "prefill_chunk_size"}, std::pair{c.page_size, "page_size"}}) {
    if (value < 1)
      throw ValueError(fmt::format("{}: {} is {}, must be at least 1", kCreate, name, value));
  }
  const std::span<const int64_t> layers = shape_arg(a[1], kCreate, 1);
  if (layers.size() != 2 || layers[0] != 0 || layers[1] < 1) {
    throw ValueError(
        fmt::format("{}: the layer partition [{}] is not a single group starting at "
                    "layer 0 (pipeline parallel groups are not supported)",
                    kCreate, fmt::join(layers, ", ")));
  }
  c.num_layers = layers[1];
  c.num_qo_heads = int_arg(a[2], kCreate, 2);
  c.num_kv_heads = int_arg(a[3], kCreate, 3);
  c.head_dim = int_arg(a[4], kCreate, 4);
  const int64_t v_head_dim = int_arg(a[5], kCreate, 5);
  if (c.num_qo_heads < 1 || c.num_kv_heads < 1 || c.head_dim < 1 ||
      c.num_qo_heads % c.num_kv_heads != 0 || v_head_dim != c.head_dim) {
    throw ValueError(
        fmt::format("{}: heads {} query / {} key-value, head dims {} / {}: "
                    "expected positive counts, query heads a multiple of key-value "
                    "heads and equal K and V head dims",
                    kCreate, c.num_qo_heads, c.num_kv_heads, c.head_dim, v_head_dim));
  }
  const std::span<const int64_t> kinds = shape_arg(a[6], kCreate, 6);
  if (static_cast<int64_t>(kinds.size()) != c.num_layers) {
    throw ValueError(
        fmt::format("{}: {} attention kinds for {} layers", kCreate, kinds.size(), c.num_layers));
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] != 0) {
      static constexpr const char* names[] = {"mha", "mla", "linear", "mha_sliding"};
      throw ValueError(fmt::format(
          "{}: layer {} uses attention kind {} ({}); Kiln's KV cache supports multi-head "
          "attention (\"mha\") only{}",
          kCreate, i, kinds[i], kinds[i] >= 0 && kinds[i] < 4 ? names[kinds[i]] : "unknown",
          kinds[i] == 3 ? " (per-layer sliding window is not supported; per-sequence sliding "
                          "window is: support_sliding_window = 1)"
                        : ""));
    }
  }
  if (int_arg(a[7], kCreate, 7) != 0) {
    throw ValueError(
        fmt::format("{}: KV transfer (disaggregation) is not supported by Kiln's KV "
                    "cache",
                    kCreate));
  }
  const int64_t rope_mode = int_arg(a[8], kCreate, 8);
  if (rope_mode < 0 || rope_mode > 2) {
    throw ValueError(fmt::format("{}: unknown RoPE mode {}", kCreate, rope_mode));
  }
  c.rope_mode = static_cast<RopeMode>(rope_mode);
  // A window's keys are re-positioned as it slides: TVM applies RoPE inline then.
  if (c.sliding_window && c.rope_mode != RopeMode::kNone) c.rope_mode = RopeMode::kInline;
  c.rope_scale = float_arg(a[9], kCreate, 9);
  c.rope_theta = float_arg(a[10], kCreate, 10);
  std::optional<Tensor> rope_ext_factors;
  // Anything but a tensor means none (TVM's front end passes a 0 placeholder).
  if (a[11].type_code() == KILN_TYPE_TENSOR) {
    rope_ext_factors = a[11].cast<Tensor>();
    if (c.rope_mode != RopeMode::kNormal) {
      throw ValueError(
          fmt::format("{}: RoPE extension factors need the normal RoPE mode{}", kCreate,
                      c.sliding_window ? " (a sliding-window cache applies RoPE inline)" : ""));
    }
  }
  const Tensor like = tensor_arg(a[12], kCreate, 12);
  PagedKvKernels k;
  k.transpose_append = NamedKernel{"transpose-append", function_arg(a[13], "transpose-append", 13)};
  k.ragged_prefill = attention_kernel(a[15], "ragged prefill", 15);
  k.paged_prefill = attention_kernel(a[16], "paged prefill", 16);
  k.paged_decode = attention_kernel(a[17], "paged decode", 17);
  k.paged_prefill_sliding = attention_kernel(a[18], "sliding-window paged prefill", 18);
  k.paged_decode_sliding = attention_kernel(a[19], "sliding-window paged decode", 19);
  const std::vector<Any> merges = tuple_arg(a[23], "merge", 23);
  if (merges.empty()) {
    throw ValueError(fmt::format("{}: argument 23 (merge kernels) is empty", kCreate));
  }
  k.merge = NamedKernel{"merge", function_arg(merges[0], "merge", 23)};
  k.split_rotary = NamedKernel{"split rotary", function_arg(a[24], "split rotary", 24)};
  k.copy_page = NamedKernel{"copy page", function_arg(a[25], "copy page", 25)};
  if (a[26].type_code() == KILN_TYPE_FUNCTION) {
    k.debug_get_kv = NamedKernel{"debug get-kv", a[26].cast<Function>()};
  } else {
    k.debug_get_kv = NamedKernel{"debug get-kv", Function()};
  }
  std::vector<const NamedKernel*> needed = {&k.ragged_prefill, &k.paged_prefill, &k.paged_decode};
  if (c.sliding_window)
    needed.insert(needed.end(), {&k.paged_prefill_sliding, &k.paged_decode_sliding});
  for (const NamedKernel* kernel : needed) {
    if (!*kernel) {
      throw ValueError(fmt::format("{}: the model library passed no {} kernel{}", kCreate,
                                   kernel->role,
                                   c.sliding_window ? " (support_sliding_window = 1)" : ""));
    }
  }
  return Any::object(make_object<PagedKvCache>(c, std::move(k), like, std::move(rope_ext_factors)));
}

// The arguments of one call of a cache builtin, read with the builtin's name in every error.
struct CacheCall {
  const char* who;
  const Any* a;
  int32_t n;
  PagedKvCache& cache() const { return cache_arg(a[0], who); }
  int64_t integer(int k) const { return int_arg(a[k], who, k); }
  double real(int k) const { return float_arg(a[k], who, k); }
  Tensor tensor(int k) const { return tensor_arg(a[k], who, k); }
  std::span<const int64_t> shape(int k) const { return shape_arg(a[k], who, k); }
};

// A builtin the cache does not provide: says so by name.
Function unsupported(const std::string& name, const char* what) {
  return Function::from_packed(name, [name, what](const Any*, int32_t) -> Any {
    throw UnimplementedError(fmt::format("{}: {} is not supported by Kiln's KV cache", name, what));
  });
}

}  // namespace

BuiltinList kv_cache_builtins() {
  BuiltinList list;
  list.emplace_back(kCreate, Function::from_packed(kCreate, &create));
  // A builtin taking `min` to `max` arguments, the cache first.
  auto add = [&](const char* name, int32_t min, int32_t max,
                 std::function<Any(const CacheCall&)> body) {
    list.emplace_back(name, Function::from_packed(name, [name, min, max, body = std::move(body)](
                                                            const Any* a, int32_t n) {
                        expect_count(name, n, min, max);
                        return body(CacheCall{name, a, n});
                      }));
  };
  add("vm.builtin.kv_state_clear", 1, 1, [](const CacheCall& c) {
    c.cache().clear();
    return Any();
  });
  add("vm.builtin.kv_state_add_sequence", 2, 2, [](const CacheCall& c) {
    c.cache().add_sequence(c.integer(1));
    return Any();
  });
  add("vm.builtin.kv_state_remove_sequence", 2, 2, [](const CacheCall& c) {
    c.cache().remove_sequence(c.integer(1));
    return Any();
  });
  add("vm.builtin.kv_state_fork_sequence", 3, 4, [](const CacheCall& c) {
    c.cache().fork_sequence(c.integer(1), c.integer(2), c.n == 4 ? c.integer(3) : -1);
    return Any();
  });
  add("vm.builtin.kv_state_popn", 3, 3, [](const CacheCall& c) {
    c.cache().pop_tokens(c.integer(1), c.integer(2));
    return Any();
  });
  add("vm.builtin.kv_state_begin_forward", 3, 4, [](const CacheCall& c) {
    if (c.n == 4 && !c.a[3].is_none()) {
      throw UnimplementedError(
          fmt::format("{}: token trees (argument 3) are not supported by Kiln's KV cache", c.who));
    }
    PagedKvCache& cache = c.cache();
    cache.begin_forward(c.shape(1), c.shape(2));
    return Any();
  });
  add("vm.builtin.kv_state_end_forward", 1, 1, [](const CacheCall& c) {
    c.cache().end_forward();
    return Any();
  });
  add("vm.builtin.attention_kv_cache_attention_with_fused_qkv", 5, 5, [](const CacheCall& c) {
    c.cache().attention_with_fused_qkv(c.integer(1), c.real(2), c.tensor(3), c.tensor(4));
    return Any();
  });
  add("vm.builtin.attention_kv_cache_self_attention", 8, 8, [](const CacheCall& c) {
    c.cache().self_attention(c.integer(1), c.real(2), c.tensor(3), c.tensor(4), c.tensor(5),
                             c.tensor(6), c.tensor(7));
    return Any();
  });
  add("vm.builtin.attention_kv_cache_cross_attention", 6, 6, [](const CacheCall& c) {
    c.cache().cross_attention(c.integer(1), c.real(2), c.tensor(3), c.tensor(4), c.tensor(5));
    return Any();
  });
  add("vm.builtin.attention_kv_cache_get_query_positions", 1, 1,
      [](const CacheCall& c) { return Any(c.cache().query_positions()); });
  add("vm.builtin.attention_kv_cache_get_num_available_pages", 1, 1,
      [](const CacheCall& c) { return Any(c.cache().num_available_pages()); });
  add("vm.builtin.attention_kv_cache_get_total_sequence_length", 1, 1,
      [](const CacheCall& c) { return Any(c.cache().total_sequence_length()); });
  add("vm.builtin.attention_kv_cache_empty", 1, 1,
      [](const CacheCall& c) { return Any(c.cache().empty()); });
  add("vm.builtin.attention_kv_cache_debug_get_kv", 6, 6, [](const CacheCall& c) {
    c.cache().debug_get_kv(c.integer(1), c.integer(2), c.integer(3), c.tensor(4), c.tensor(5));
    return Any();
  });
  add("vm.builtin.attention_kv_cache_enable_sliding_window_for_seq", 4, 4, [](const CacheCall& c) {
    // (cache, seq_id, sliding_window_size, attn_sink_size), TVM's order.
    c.cache().enable_sliding_window(c.integer(1), c.integer(2), c.integer(3));
    return Any();
  });
  for (auto [name, what] : {
           std::pair{"vm.builtin.attention_kv_cache_attention_with_shared_kv",
                     "attention with shared KV"},
           std::pair{"vm.builtin.attention_kv_cache_append_mla_kv", "multi-head latent attention"},
           std::pair{"vm.builtin.attention_kv_cache_merge_attn_output_inplace",
                     "the general attention merge (an MLA kernel)"},
           std::pair{"vm.builtin.attention_kv_cache_debug_get_kv_mla",
                     "multi-head latent attention"},
           std::pair{"vm.builtin.attention_kv_cache_commit_accepted_token_tree_nodes",
                     "tree attention (speculative decoding)"},
           std::pair{"vm.builtin.kv_cache_disagg_prepare_recv", "disaggregation (KV transfer)"},
           std::pair{"vm.builtin.kv_cache_disagg_mark_send", "disaggregation (KV transfer)"},
       }) {
    list.emplace_back(name, unsupported(name, what));
  }
  return list;
}

}  // namespace kiln::llm::detail
