// SPDX-License-Identifier: Apache-2.0
// `kiln llm generate|bench` (docs/llm.md): a model library compiled the MLC way, with its
// weights, on any device, through libkiln_llm's engine.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_checks.h"
#include "commands.h"
#include "kiln/evaluator.h"
#include "kiln/llm/builtins.h"
#include "kiln/llm/engine.h"
#include "kiln/llm/sampling.h"
#include "kiln/profiling/profiler.h"
#include "kiln/statistics.h"
#include "output_file.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> tokens;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > INT32_MAX) {
      throw UsageError(
          fmt::format("--prompt: '{}' is not a token id (a non-negative integer)", item));
    }
    tokens.push_back(static_cast<int32_t>(value));
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ') {
      flush();
    } else {
      item.push_back(c);
    }
  }
  flush();
  if (tokens.empty()) throw UsageError("--prompt: no token ids given");
  return tokens;
}

llm::Engine load_engine(const LlmOptions& options, const Runtime& runtime) {
  llm::register_builtins(runtime);
  llm::EngineOptions engine_options;
  engine_options.library = options.library;
  engine_options.weights = options.weights;
  engine_options.device = options.device ? runtime.parse_device(*options.device) : Device::cpu();
  engine_options.max_batch_size = std::max<int64_t>(options.batch, 1);
  engine_options.prefill_chunk =
      std::max<int64_t>(options.prefill_chunk, options.batch * options.prompt_length);
  engine_options.max_total_length = std::max<int64_t>(
      options.max_total_length,
      options.batch * (options.prompt_length + options.decode_tokens) + options.page_size);
  engine_options.page_size = options.page_size;
  return llm::Engine::load(engine_options, runtime);
}

int run_generate(const LlmOptions& options, const Runtime& runtime) {
  const std::vector<int32_t> prompt = parse_tokens(options.prompt);
  llm::Engine engine = load_engine(options, runtime);
  llm::SamplingOptions sampling{options.temperature, options.top_p, options.seed};
  const std::vector<int32_t> tokens = engine.generate(prompt, options.max_new_tokens, sampling);
  if (options.json) {
    nlohmann::json doc{
        {"prompt", prompt},
        {"tokens", tokens},
        {"device", runtime.device_str(engine.device())},
        {"sampling", options.temperature <= 0 || options.top_p <= 0 ? "greedy" : "top_p"}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(tokens, " ")).c_str());
  }
  return kExitOk;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

int run_bench(const LlmOptions& options, Runtime& runtime) {
  llm::Engine engine = load_engine(options, runtime);
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::vector<int64_t> ids(static_cast<size_t>(options.batch));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);

  // One launch: the batch prefilled with random prompts, then decoded token by token; the
  // first launch is a warm-up (kernels loaded, memory paged in) and is not reported.
  std::vector<double> prefill_seconds, decode_seconds;
  int64_t vocab = 0;
  for (int launch = 0; launch <= options.repeats; ++launch) {
    for (int64_t id : ids) engine.add_sequence(id);
    std::vector<std::vector<int32_t>> prompts(ids.size());
    for (auto& p : prompts) {
      for (int64_t i = 0; i < options.prompt_length; ++i) {
        p.push_back(static_cast<int32_t>(rng() % std::max<int64_t>(vocab, 2)));
      }
    }
    auto start = Clock::now();
    std::vector<float> logits = engine.prefill(ids, prompts);
    engine.synchronize();
    const double prefill_s = seconds_since(start);
    vocab = engine.vocab_size();
    std::vector<double> steps;
    std::vector<int32_t> next(ids.size());
    for (int64_t t = 0; t < options.decode_tokens; ++t) {
      for (size_t i = 0; i < ids.size(); ++i) {
        next[i] = static_cast<int32_t>(llm::argmax(
            std::span<const float>(logits).subspan(i * static_cast<size_t>(vocab), vocab)));
      }
      start = Clock::now();
      logits = engine.decode(ids, next);
      engine.synchronize();
      steps.push_back(seconds_since(start));
    }
    for (int64_t id : ids) engine.remove_sequence(id);
    if (launch == 0) continue;
    prefill_seconds.push_back(prefill_s);
    if (!steps.empty()) decode_seconds.push_back(stats::summarize(steps).median);
  }

  const double tokens = static_cast<double>(options.batch * options.prompt_length);
  std::vector<double> prefill_rates;
  prefill_rates.reserve(prefill_seconds.size());
  for (double s : prefill_seconds) prefill_rates.push_back(tokens / s);
  const stats::Summary prefill = stats::summarize(prefill_rates);
  const stats::Summary decode = stats::summarize(decode_seconds);  // zero when empty
  const std::string device = runtime.device_str(engine.device());
  const double mib = 1024.0 * 1024.0;
  if (options.json) {
    nlohmann::json doc{
        {"device", device},
        {"batch", options.batch},
        {"prompt_length", options.prompt_length},
        {"decode_tokens", options.decode_tokens},
        {"launches", options.repeats},
        {"prefill_tokens_per_s",
         {{"median", prefill.median}, {"min", prefill.min}, {"max", prefill.max}}},
        {"decode_ms_per_step",
         {{"median", decode.median * 1e3}, {"min", decode.min * 1e3}, {"max", decode.max * 1e3}}},
        {"weight_bytes", engine.weight_bytes()},
        {"kv_cache_bytes", engine.kv_cache_bytes()},
        {"peak_rss_bytes", peak_rss_bytes()}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("model       %s on %s, batch %lld, %d launches after one warm-up\n",
                options.library.string().c_str(), device.c_str(),
                static_cast<long long>(options.batch), options.repeats);
    std::printf("prefill     %lld tokens a sequence: %.1f tokens/s median (range %.1f .. %.1f)\n",
                static_cast<long long>(options.prompt_length), prefill.median, prefill.min,
                prefill.max);
    if (!decode_seconds.empty()) {
      std::printf(
          "decode      %lld steps: %.3f ms/step median (range %.3f .. %.3f), %.3f ms/token\n",
          static_cast<long long>(options.decode_tokens), decode.median * 1e3, decode.min * 1e3,
          decode.max * 1e3, decode.median * 1e3 / static_cast<double>(options.batch));
    }
    std::printf("memory      weights %.2f MiB, KV cache %.2f MiB, process peak RSS %.1f MiB\n",
                static_cast<double>(engine.weight_bytes()) / mib,
                static_cast<double>(engine.kv_cache_bytes()) / mib,
                static_cast<double>(peak_rss_bytes()) / mib);
  }
  if (options.benchmark_out) {
    BenchmarkResult context_source(prefill_seconds);
    context_source.timer = "wall";
    context_source.device = engine.device();
    nlohmann::json doc = benchmark_document(context_source, "").value;
    nlohmann::json entries = nlohmann::json::array();
    auto add = [&](const std::string& name, const std::vector<double>& secs) {
      BenchmarkResult result(secs);
      result.timer = "wall";
      result.device = engine.device();
      const BenchmarkDocument one = benchmark_document(result, name);
      for (const auto& e : one.value["benchmarks"]) entries.push_back(e);
    };
    add(fmt::format("llm/prefill/batch:{}/prompt:{}/{}", options.batch, options.prompt_length,
                    device),
        prefill_seconds);
    if (!decode_seconds.empty()) {
      add(fmt::format("llm/decode_step/batch:{}/{}", options.batch, device), decode_seconds);
    }
    doc["benchmarks"] = std::move(entries);
    write_output_file(*options.benchmark_out, doc.dump(2) + "\n");
  }
  if (options.profile) {
    // One decode step of the batch, each VM call and each KV-cache kernel a row.
    for (int64_t id : ids) engine.add_sequence(id);
    std::vector<std::vector<int32_t>> prompts(
        ids.size(), std::vector<int32_t>(static_cast<size_t>(options.prompt_length), 1));
    engine.prefill(ids, prompts);
    const std::vector<int32_t> next(ids.size(), 1);
    engine.decode(ids, next);  // warm-up
    profiling::Profiler profiler({engine.device()}, {},
                                 {{"Executor", std::string("kiln llm bench")},
                                  {"Module", options.library.string()},
                                  {"Device", device}},
                                 runtime);
    profiler.start();
    engine.set_profiler(&profiler);
    profiler.start_call("decode step", engine.device());
    engine.decode(ids, next);
    engine.synchronize();
    profiler.stop_call();
    engine.set_profiler(nullptr);
    profiler.stop();
    for (int64_t id : ids) engine.remove_sequence(id);
    std::printf("\n%s", profiler.report().table().c_str());
  }
  return kExitOk;
}

}  // namespace

int run_llm(const LlmOptions& options, const GlobalOptions& global) {
  Runtime runtime(runtime_options(global));
  if (options.command == "generate") return run_generate(options, runtime);
  return run_bench(options, runtime);
}

}  // namespace kiln::tool
