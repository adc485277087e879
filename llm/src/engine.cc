// SPDX-License-Identifier: Apache-2.0
#include "kiln/llm/engine.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "device_tensors.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/llm/sampling.h"
#include "kiln/llm/tensor_cache.h"
#include "kiln/module.h"
#include "kiln/vm/virtual_machine.h"
#include "paged_kv_cache.h"

namespace kiln::llm {

struct Engine::State {
  std::shared_ptr<const DeviceContext> context;
  Module module;
  std::optional<vm::VirtualMachine> machine;
  WeightSet weights;
  Any params;  // the weights as the tuple the model's functions take last
  Any kv_cache;
  Function embed, batch_prefill, batch_decode;
  Function begin_forward, end_forward;
  int64_t vocab = 0;
  std::optional<UniformSource> uniforms;
  uint64_t uniform_seed = 0;
  int64_t prefill_chunk = 0;

  PagedKvCache& cache() const { return *kv_cache.as_object<PagedKvCache>(); }
  Function builtin(const std::string& name) const { return registry::require(name); }
  // The forward pass: embeddings of `tokens` on the device, run through `body`, logits to host.
  std::vector<float> forward(std::span<const int64_t> seq_ids, std::span<const int64_t> lengths,
                             const std::vector<int32_t>& tokens,
                             const std::function<Any(const Tensor& embeddings)>& body);
};

namespace {

// The model's parameter names from its `_metadata` function (MLC-LLM's convention), if it has one.
std::optional<std::vector<std::string>> metadata_param_names(vm::VirtualMachine& machine) {
  if (!machine.has_function("_metadata")) return std::nullopt;
  const nlohmann::json meta = nlohmann::json::parse(
      machine.get_function("_metadata")().cast<std::string>(), nullptr, false);
  if (!meta.is_object() || !meta.contains("params") || !meta["params"].is_array()) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const auto& p : meta["params"]) {
    if (p.is_object() && p.contains("name") && p["name"].is_string()) names.push_back(p["name"]);
  }
  return names;
}

Tensor host_int32(std::span<const int32_t> values) {
  Tensor t = Tensor::empty_host({static_cast<int64_t>(values.size())}, DataType::Int(32));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size_bytes());
  return t;
}

}  // namespace

Engine::Engine(std::unique_ptr<State> state) : state_(std::move(state)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine Engine::load(const EngineOptions& options, const Runtime& runtime) {
  for (auto [value, name] : {std::pair{options.max_batch_size, "max_batch_size"},
                             std::pair{options.max_total_length, "max_total_length"},
                             std::pair{options.prefill_chunk, "prefill_chunk"},
                             std::pair{options.page_size, "page_size"}}) {
    if (value < 1)
      throw ValueError(fmt::format("llm engine: {} is {}, must be at least 1", name, value));
  }
  auto s = std::make_unique<State>();
  s->context = runtime.retain();
  s->prefill_chunk = options.prefill_chunk;
  s->module = Module::load(options.library, runtime);
  s->machine.emplace(s->module, std::vector<Device>{options.device});
  for (const char* name : {"embed", "batch_prefill", "batch_decode", "create_tir_paged_kv_cache"}) {
    if (!s->machine->has_function(name)) {
      throw NotFoundError(fmt::format(
          "llm engine: {} has no function '{}' (a model library compiled the MLC way exports "
          "embed, batch_prefill, batch_decode and create_tir_paged_kv_cache)",
          options.library.string(), name));
    }
  }
  s->embed = s->machine->get_function("embed");
  s->batch_prefill = s->machine->get_function("batch_prefill");
  s->batch_decode = s->machine->get_function("batch_decode");
  s->begin_forward = s->builtin("vm.builtin.kv_state_begin_forward");
  s->end_forward = s->builtin("vm.builtin.kv_state_end_forward");

  s->weights = WeightSet::load(options.weights, options.device, runtime);
  std::vector<Any> params;
  if (auto names = metadata_param_names(*s->machine)) {
    for (const std::string& name : *names) params.emplace_back(s->weights.at(name));
  } else {
    for (const Tensor& t : s->weights.tensors()) params.emplace_back(t);
  }
  s->params = vm::make_array(std::move(params));
  // Each size as a one-element shape, as MLC-LLM's engine passes them.
  s->kv_cache = s->machine->get_function("create_tir_paged_kv_cache")(
      Any::shape({options.max_batch_size}), Any::shape({options.max_total_length}),
      Any::shape({options.prefill_chunk}), Any::shape({options.page_size}), Any::shape({0}));
  if (!s->kv_cache.as_object<PagedKvCache>()) {
    throw TypeError(
        fmt::format("llm engine: create_tir_paged_kv_cache of {} returned {}, not a "
                    "KV cache made by Kiln's vm.builtin.paged_attention_kv_cache_create",
                    options.library.string(), s->kv_cache.type_name()));
  }
  Engine engine(std::move(s));
  // The vocabulary, from one forward pass of token 0 (valid in every vocabulary): prompts are
  // checked against it before any pass, because an embedding lookup past the table's end reads
  // memory that is not the model's.
  const int64_t probe = -1;
  engine.add_sequence(probe);
  try {
    engine.prefill({&probe, 1}, {{0}});
  } catch (...) {
    engine.remove_sequence(probe);
    throw;
  }
  engine.remove_sequence(probe);
  return engine;
}

void Engine::add_sequence(int64_t seq_id) { state_->cache().add_sequence(seq_id); }
void Engine::remove_sequence(int64_t seq_id) { state_->cache().remove_sequence(seq_id); }
void Engine::fork_sequence(int64_t parent_id, int64_t child_id, int64_t fork_pos) {
  state_->cache().fork_sequence(parent_id, child_id, fork_pos);
}
void Engine::pop_tokens(int64_t seq_id, int64_t n) { state_->cache().pop_tokens(seq_id, n); }

std::vector<float> Engine::State::forward(
    std::span<const int64_t> seq_ids, std::span<const int64_t> lengths,
    const std::vector<int32_t>& tokens, const std::function<Any(const Tensor& embeddings)>& body) {
  const Device device = machine->devices().front();
  for (int32_t token : tokens) {
    if (vocab > 0 && (token < 0 || token >= vocab)) {
      throw ValueError(
          fmt::format("llm engine: token id {} is outside the vocabulary [0, {})", token, vocab));
    }
  }
  Tensor ids = host_int32(tokens);
  if (device.type != kDLCPU) ids = ids.to(device, *context);
  begin_forward(kv_cache, Any::shape({seq_ids.begin(), seq_ids.end()}),
                Any::shape({lengths.begin(), lengths.end()}));
  Any result;
  try {
    const Tensor embeddings = embed(ids, params).cast<Tensor>();
    result = body(embeddings);
  } catch (...) {
    // Undo the pass: the tokens it appended hold no keys and values.
    end_forward(kv_cache);
    for (size_t i = 0; i < seq_ids.size(); ++i) cache().pop_tokens(seq_ids[i], lengths[i]);
    throw;
  }
  end_forward(kv_cache);
  Any logits_any = result;
  if (auto tuple = result.as_object<vm::ArrayObj>()) logits_any = tuple->items.at(0);
  Tensor logits = logits_any.cast<Tensor>();
  if (logits.dtype() != DataType::Float(32)) {
    throw TypeError(fmt::format("llm engine: the model returns {} logits; float32 expected",
                                logits.dtype().str()));
  }
  vocab = logits.shape().back();
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  logits.copy_to(host.data(), host.size() * sizeof(float));
  return host;
}

std::vector<float> Engine::prefill(std::span<const int64_t> seq_ids,
                                   const std::vector<std::vector<int32_t>>& tokens) {
  if (seq_ids.size() != tokens.size()) {
    throw ValueError(fmt::format("llm engine: prefill of {} sequences with {} token lists",
                                 seq_ids.size(), tokens.size()));
  }
  std::vector<int64_t> lengths;
  std::vector<int32_t> flat;
  std::vector<int32_t> last_positions;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) {
      throw ValueError(
          fmt::format("llm engine: prefill of sequence {} with no tokens", seq_ids[i]));
    }
    lengths.push_back(static_cast<int64_t>(tokens[i].size()));
    flat.insert(flat.end(), tokens[i].begin(), tokens[i].end());
    last_positions.push_back(static_cast<int32_t>(flat.size() - 1));
  }
  State& s = *state_;
  const Device device = s.machine->devices().front();
  return s.forward(seq_ids, lengths, flat, [&](const Tensor& embeddings) {
    const int64_t hidden = embeddings.shape().back();
    Tensor positions = host_int32(last_positions);
    if (device.type != kDLCPU) positions = positions.to(device, *s.context);
    return s.batch_prefill(leading_view(embeddings, {1, static_cast<int64_t>(flat.size()), hidden}),
                           positions, s.kv_cache, s.params);
  });
}

std::vector<float> Engine::decode(std::span<const int64_t> seq_ids,
                                  std::span<const int32_t> tokens) {
  if (seq_ids.size() != tokens.size()) {
    throw ValueError(fmt::format("llm engine: decode of {} sequences with {} tokens",
                                 seq_ids.size(), tokens.size()));
  }
  State& s = *state_;
  const std::vector<int64_t> ones(seq_ids.size(), 1);
  return s.forward(seq_ids, ones, {tokens.begin(), tokens.end()}, [&](const Tensor& embeddings) {
    const int64_t hidden = embeddings.shape().back();
    return s.batch_decode(
        leading_view(embeddings, {static_cast<int64_t>(tokens.size()), 1, hidden}), s.kv_cache,
        s.params);
  });
}

int32_t Engine::sample(std::span<const float> logits, const SamplingOptions& sampling) {
  if (sampling.temperature <= 0 || sampling.top_p <= 0) {
    return static_cast<int32_t>(argmax(logits));
  }
  State& s = *state_;
  if (!s.uniforms || s.uniform_seed != sampling.seed) {
    s.uniforms.emplace(sampling.seed);
    s.uniform_seed = sampling.seed;
  }
  return static_cast<int32_t>(
      sample_top_p_from_logits(logits, sampling.temperature, sampling.top_p, s.uniforms->next()));
}

std::vector<int32_t> Engine::generate(std::span<const int32_t> prompt, int64_t max_new_tokens,
                                      const SamplingOptions& sampling) {
  if (prompt.empty()) throw ValueError("llm engine: generate with an empty prompt");
  int64_t seq = 0;
  while (true) {  // an id no caller's sequence has
    try {
      add_sequence(seq);
      break;
    } catch (const ValueError&) {
      ++seq;
    }
  }
  state_->uniforms.reset();
  std::vector<int32_t> out;
  try {
    const int64_t ids[] = {seq};
    // A prompt longer than the prefill chunk goes in several passes.
    std::vector<float> logits;
    for (size_t begin = 0; begin < prompt.size();
         begin += static_cast<size_t>(state_->prefill_chunk)) {
      const auto chunk = prompt.subspan(
          begin, std::min(prompt.size() - begin, static_cast<size_t>(state_->prefill_chunk)));
      logits = prefill(ids, {{chunk.begin(), chunk.end()}});
    }
    for (int64_t i = 0; i < max_new_tokens; ++i) {
      out.push_back(sample(logits, sampling));
      if (i + 1 < max_new_tokens) {
        const int32_t next[] = {out.back()};
        logits = decode(ids, next);
      }
    }
  } catch (...) {
    remove_sequence(seq);
    throw;
  }
  remove_sequence(seq);
  return out;
}

void Engine::set_profiler(profiling::Profiler* profiler) {
  state_->machine->set_profiler(profiler);
  state_->cache().set_profiler(profiler);
}

void Engine::synchronize() const {
  const Device device = state_->machine->devices().front();
  if (Ref<DeviceBackend> backend = state_->context->find_backend(device.type)) {
    backend->synchronize(device.id);
  }
}

int64_t Engine::vocab_size() const { return state_->vocab; }
Device Engine::device() const { return state_->machine->devices().front(); }
int64_t Engine::free_pages() const { return state_->cache().num_available_pages(); }
int64_t Engine::weight_bytes() const {
  int64_t total = 0;
  for (const Tensor& t : state_->weights.tensors()) total += static_cast<int64_t>(t.nbytes());
  return total;
}
int64_t Engine::kv_cache_bytes() const { return state_->cache().page_bytes(); }

}  // namespace kiln::llm
