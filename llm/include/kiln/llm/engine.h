// SPDX-License-Identifier: Apache-2.0
// A small LLM engine over Kiln's VM (docs/llm.md): a model library compiled the MLC way (its
// functions embed, batch_prefill, batch_decode and create_tir_paged_kv_cache, as
// tvm.relax.frontend.nn exports them) with its weights in a tensor cache, on one device.
//
//   Runtime runtime;
//   llm::register_builtins(runtime);
//   llm::Engine engine = llm::Engine::load({.library = "lib.so", .weights = "params",
//                                           .device = {kDLCPU, 0}}, runtime);
//   engine.add_sequence(0);
//   std::vector<float> logits = engine.prefill({0}, {{1, 2, 3}});   // [1 x vocab]
//
// Not thread-safe: one engine serves one caller at a time.
#ifndef KILN_LLM_ENGINE_H_
#define KILN_LLM_ENGINE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/profiling/profiler.h"
#include "kiln/runtime.h"

namespace kiln::llm {

// What Engine::load needs. The KV cache's sizes default to what small models and tests use.
struct EngineOptions {
  std::filesystem::path library;  // the compiled model library (.so)
  std::filesystem::path weights;  // its tensor-cache folder (tensor-cache.json + shards)
  Device device = Device::cpu();
  int64_t max_batch_size = 8;       // sequences in one forward pass
  int64_t max_total_length = 4096;  // tokens over all sequences
  int64_t prefill_chunk = 512;      // new tokens in one forward pass
  int64_t page_size = 16;           // tokens per KV page
};

// How the next token is chosen. temperature 0 (or top_p 0): greedy (argmax).
struct SamplingOptions {
  double temperature = 0;
  double top_p = 1;
  uint64_t seed = 0;  // of Kiln's uniform source (not TVM's RNG)
};

class Engine {
 public:
  // Loads the library and its weights onto options.device and creates the KV cache. The weights
  // go to the model's functions in tensor-cache record order, or in the order the library's
  // `_metadata` function lists its params when it has one. Throws the loaders' errors (naming
  // the file), NotFoundError for a function the library lacks, ValueError for bad options.
  static Engine load(const EngineOptions& options, const Runtime& runtime);

  // Sequences, by caller-chosen ids (vm.builtin.kv_state_*): ValueError for an id present
  // (add) or absent (the others); a refused call changes nothing.
  void add_sequence(int64_t seq_id);
  void remove_sequence(int64_t seq_id);
  void fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos = -1);
  void pop_tokens(int64_t seq_id, int64_t n);

  // Appends `tokens[i]` to sequence `seq_ids[i]` in one forward pass and returns the logits of
  // each sequence's last token, row-major [seq_ids.size() x vocab_size()] float32 on the host.
  // ValueError for an empty token list, a token outside [0, vocab_size()), or what the KV cache
  // refuses (out of pages, over the prefill chunk, an unknown sequence).
  std::vector<float> prefill(std::span<const int64_t> seq_ids,
                             const std::vector<std::vector<int32_t>>& tokens);
  // Appends one token to each sequence (the decode kernels); logits as prefill().
  std::vector<float> decode(std::span<const int64_t> seq_ids, std::span<const int32_t> tokens);

  // A token from one row of logits.
  int32_t sample(std::span<const float> logits, const SamplingOptions& sampling);
  // Adds a sequence, prefills `prompt` (in passes of at most prefill_chunk tokens), samples and
  // decodes `max_new_tokens` tokens, and removes the sequence (also when a step fails).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int64_t max_new_tokens,
                                const SamplingOptions& sampling = {});

  // Records the VM's calls and the KV cache's kernels into `profiler` (borrowed, started by the
  // caller) until set_profiler(nullptr).
  void set_profiler(profiling::Profiler* profiler);
  // Waits for the device to finish its queued work.
  void synchronize() const;

  // The vocabulary size (load() runs one pass of token 0 to learn it).
  int64_t vocab_size() const;
  Device device() const;
  int64_t free_pages() const;
  // Bytes of device memory the weights and the KV cache's pages take.
  int64_t weight_bytes() const;
  int64_t kv_cache_bytes() const;

  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

 private:
  struct State;
  explicit Engine(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::llm

#endif  // KILN_LLM_ENGINE_H_
