// SPDX-License-Identifier: Apache-2.0
// kiln::testing::ab_run (kiln/ab_run.h): two time evaluators, called alternately.
#include "kiln/ab_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln/detail/ratio_interval.h"
#include "kiln/error.h"
#include "kiln/sdk/support/sha256.hpp"
#include "kiln/tensor.h"
#include "run_steps.h"

namespace kiln::testing {
namespace {

// One side, ready to time: its function, its arguments on its device, its evaluator.
struct Ready {
  std::vector<Any> device_args;
  TimeEvaluator evaluator;
  std::string device;  // "cpu:0", for errors
};

Ready ready(const AbSide& side, const char* name) {
  if (side.context == nullptr) {
    throw ValueError(fmt::format("ab_run: side {} has no context (a Runtime)", name));
  }
  try {
    const std::string function = side.function.empty() ? side.module.entry_name() : side.function;
    if (function.empty()) {
      throw NotFoundError("the module has no entry function; name one");
    }
    Function f = side.module.get_function(function);
    detail::check_run_args(side.args);
    RunHooks hooks;
    hooks.evaluator = side.evaluator;
    hooks.evaluator->noise = {};
    hooks.evaluator->on_repeat = nullptr;
    EvaluatorConfig config = EvaluatorConfig::normalized(side.evaluator_config);
    config.repeat = 1;
    TimeEvaluatorOptions options = detail::run_evaluator_options(config, hooks);
    std::vector<Any> device_args = detail::args_to_device(side.args, side.device, *side.context);
    return {std::move(device_args), TimeEvaluator(f, side.device, options, *side.context),
            side.context->device_str(side.device)};
  } catch (const Error& e) {
    throw_error(e.code(), fmt::format("ab_run: side {}: {}", name, e.what()));  // same type
  }
}

// One repeat of `side`: seconds per call, and the share of the repeat in which some thread of
// the machine waited for a CPU (-1 when not recorded). A timer that reads 0 (or less) gives
// nothing to compare: an error naming it, not a ratio of zeros.
struct SideTime {
  double seconds = 0;
  double pressure = -1;
};
SideTime time_once(Ready& side, const char* name) {
  BenchmarkResult r;
  try {
    r = side.evaluator(side.device_args);
  } catch (const Error& e) {
    throw_error(e.code(), fmt::format("ab_run: side {}: {}", name, e.what()));  // same type
  }
  const double seconds = r.results().at(0);
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw RuntimeError(
        fmt::format("ab_run: side {}: the '{}' timer of {} read {} s per call: no time to compare",
                    name, r.timer, side.device, seconds));
  }
  SideTime slot{seconds, -1};
  if (r.cpu_pressure_s >= 0 && r.wall_time_s > 0) {
    slot.pressure = std::min(1.0, r.cpu_pressure_s / r.wall_time_s);
  }
  return slot;
}

// Two argument values are the same: equal scalars or strings, the same object, or tensors of
// one shape, dtype and device whose bytes are equal (read through `cx` and `cy`, the contexts
// of their sides, when they are not in host memory).
bool same_value(const Any& x, const Any& y, const DeviceContext& cx, const DeviceContext& cy) {
  if (x.type_code() != y.type_code()) return false;
  if (!x.holds_object()) {
    return x.type_code() == KILN_TYPE_FLOAT ? x.raw_float() == y.raw_float()
                                            : x.raw_int() == y.raw_int();
  }
  if (x.object() == y.object()) return true;
  if (x.type_code() == KILN_TYPE_TENSOR) {
    const auto tx = x.cast<Tensor>();
    const auto ty = y.cast<Tensor>();
    if (tx.dtype() != ty.dtype() || tx.device() != ty.device() ||
        !std::equal(tx.shape().begin(), tx.shape().end(), ty.shape().begin(), ty.shape().end())) {
      return false;
    }
    const Device host = Device::cpu();
    const Tensor hx = tx.device().type == kDLCPU ? tx : tx.to(host, cx);
    const Tensor hy = ty.device().type == kDLCPU ? ty : ty.to(host, cy);
    if (!hx.is_contiguous() || !hy.is_contiguous()) return false;
    return hx.nbytes() == hy.nbytes() && std::memcmp(hx.data(), hy.data(), hx.nbytes()) == 0;
  }
  if (x.type_code() == KILN_TYPE_STRING || x.type_code() == KILN_TYPE_BYTES ||
      x.type_code() == KILN_TYPE_SHAPE) {
    return x.str() == y.str();
  }
  return false;
}

// What differs between two sides that run the same module.
std::vector<std::string> side_differences(const AbSide& a, const AbSide& b) {
  std::vector<std::string> out;
  const std::string fa = a.function.empty() ? a.module.entry_name() : a.function;
  const std::string fb = b.function.empty() ? b.module.entry_name() : b.function;
  if (fa != fb) out.emplace_back("function");
  bool same_args = a.args.size() == b.args.size();
  for (size_t i = 0; same_args && i < a.args.size(); ++i) {
    same_args = same_value(a.args[i], b.args[i], *a.context, *b.context);
  }
  if (!same_args) out.emplace_back("inputs");
  if (a.device != b.device) out.emplace_back("device");
  const EvaluatorConfig ca = EvaluatorConfig::normalized(a.evaluator_config);
  const EvaluatorConfig cb = EvaluatorConfig::normalized(b.evaluator_config);
  const TimeEvaluatorOptions& oa = a.evaluator;
  const TimeEvaluatorOptions& ob = b.evaluator;
  if (ca.number != cb.number || ca.min_repeat_ms != cb.min_repeat_ms ||
      ca.enable_cpu_cache_flush != cb.enable_cpu_cache_flush ||
      oa.cache_flush_bytes != ob.cache_flush_bytes || oa.f_preproc != ob.f_preproc ||
      oa.cooldown_interval_ms != ob.cooldown_interval_ms) {
    out.emplace_back("evaluator");
  }
  // Two handles of one Runtime share its state; two Runtimes (e.g. two builds of a plugin) do
  // not.
  if (a.context->retain().get() != b.context->retain().get()) out.emplace_back("plugins");
  return out;
}

std::string hex_of(kiln::sdk::Sha256& hash) { return kiln::sdk::Sha256::hex(hash.finish()); }

}  // namespace

ModuleIdentity module_identity(const Module& module) {
  ModuleIdentity id;
  if (!module.defined()) return id;
  id.file = module.get()->source();
  // The bytes the module was loaded from, when it keeps them as its one artifact under the
  // file's name: a file rebuilt since the load is not what runs.
  const std::vector<Artifact>& artifacts = module.artifacts();
  if (artifacts.size() == 1 && !id.file.empty() &&
      artifacts.front().name == std::filesystem::path(id.file).filename().string()) {
    kiln::sdk::Sha256 hash;
    hash.update(artifacts.front().data.data(), artifacts.front().data.size());
    id.sha256 = hex_of(hash);
    id.hashed = "file";
    return id;
  }
  std::error_code ec;
  if (!id.file.empty() && std::filesystem::is_regular_file(id.file, ec)) {
    std::ifstream in(id.file, std::ios::binary);
    kiln::sdk::Sha256 hash;
    std::vector<char> buffer(1 << 16);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      hash.update(buffer.data(), static_cast<size_t>(in.gcount()));
    }
    if (!in.bad()) {
      id.sha256 = hex_of(hash);
      id.hashed = "file";
      return id;
    }
  }
  if (!artifacts.empty()) {
    kiln::sdk::Sha256 hash;
    for (const Artifact& artifact : artifacts) {
      const std::string head =
          fmt::format("{}\n{}\n{}\n", artifact.name, artifact.role, artifact.data.size());
      hash.update(head);
      hash.update(artifact.data.data(), artifact.data.size());
    }
    id.sha256 = hex_of(hash);
    id.hashed = "artifacts";
  }
  return id;
}

AbResult ab_run(const AbSide& a, const AbSide& b, const AbOptions& options) {
  if (options.rounds < 6) {
    throw ValueError(
        fmt::format("ab_run: rounds must be at least 6 (fewer cannot bound a 95% interval), got {}",
                    options.rounds));
  }
  if (!(options.threshold >= 0)) {
    throw ValueError(fmt::format("ab_run: threshold must be >= 0, got {}", options.threshold));
  }
  if (!(options.confidence > 0 && options.confidence < 1)) {
    throw ValueError(
        fmt::format("ab_run: confidence must be between 0 and 1, got {}", options.confidence));
  }
  AbResult result;
  result.seed = options.seed ? *options.seed : std::random_device{}();
  Ready ready_a = ready(a, "A");
  Ready ready_b = ready(b, "B");
  result.a_module = module_identity(a.module);
  result.b_module = module_identity(b.module);
  result.same_module =
      a.module.get() == b.module.get() ||
      (!result.a_module.sha256.empty() && result.a_module.sha256 == result.b_module.sha256);
  if (result.same_module) result.differences = side_differences(a, b);
  const bool identical = result.same_module && result.differences.empty();
  // The looks: rounds, twice as many, ... up to max_rounds (one look for identical sides:
  // there is nothing to decide).
  std::vector<int32_t> looks = {options.rounds};
  while (!identical && looks.back() < options.max_rounds) {
    looks.push_back(std::min(options.max_rounds, looks.back() * 2));
  }
  result.planned_looks = static_cast<int32_t>(looks.size());
  const double look_confidence =
      1 - (1 - options.confidence) / static_cast<double>(result.planned_looks);
  std::mt19937_64 order(result.seed);
  // Warm-up: caches, clocks, lazily compiled kernels and `number` grown to min_repeat_ms.
  time_once(ready_a, "A");
  time_once(ready_b, "B");
  int32_t round = 0;
  for (const int32_t target : looks) {
    for (; round < target; ++round) {
      const bool b_first = (order() & 1) != 0;
      SideTime ta, tb;
      if (b_first) {
        tb = time_once(ready_b, "B");
        ta = time_once(ready_a, "A");
      } else {
        ta = time_once(ready_a, "A");
        tb = time_once(ready_b, "B");
      }
      result.a_seconds.push_back(ta.seconds);
      result.b_seconds.push_back(tb.seconds);
      result.a_pressure.push_back(ta.pressure);
      result.b_pressure.push_back(tb.pressure);
      result.b_first.push_back(b_first);
      if (options.on_round) options.on_round(round + 1, target);
    }
    ++result.looks;
    const stats::RatioInterval interval =
        stats::paired_ratio(result.a_seconds, result.b_seconds, look_confidence);
    const stats::ChangeVerdict verdict = stats::judge_change(interval, options.threshold, 0);
    result.ratio = interval.ratio;
    result.low = interval.low;
    result.high = interval.high;
    result.confidence = interval.confidence;
    result.verdict = verdict.direction;
    result.significant = verdict.significant;
    result.detectable = verdict.detectable;
    result.reason = verdict.reason;
    result.rounds_to_decide = verdict.samples_to_decide;
    if (verdict.direction != "could not tell") break;
  }
  if (identical) {
    result.verdict = "same module";
    result.reason = fmt::format(
        "A and B are the same module (sha256 {}) with the same function and inputs: this run "
        "timed A against itself",
        result.a_module.sha256.empty() ? std::string("not hashed: the same object")
                                       : result.a_module.sha256);
    result.rounds_to_decide = 0;
  }
  return result;
}

}  // namespace kiln::testing
