// SPDX-License-Identifier: Apache-2.0
// Sampling and logit processing (kiln/llm/sampling.h) and the VM builtins that run them under
// TVM 0.27's names. The arithmetic follows TVM's src/runtime/vm/lm_support.cc operation by
// operation (which values are float32, which float64, the order of the sums, std::sort with a
// "greater" comparison for the order of equal values), because the point is bit-identical
// results: do not "simplify" a cast or reorder a sum here without checking the TVM comparison
// (tests/python/test_llm_sampling.py). All validation happens before anything is written.
#include "kiln/llm/sampling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "builtin_table.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

// No fused multiply-adds: TVM's library rounds the products in d * e + x (softmax) and
// f * p + q (penalties) before adding, and so must this file whatever -march it is built for.
// Both compilers fuse them when the target has FMA (GCC's C++ default is -ffp-contract=fast).
// After the includes, so that only this file's functions are affected.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kiln::llm {
namespace {

// A token and the value it is sorted by, as TVM pairs them (int ids: vocabularies are below 2^31).
using Entry = std::pair<float, int>;

// Sorts descending by value with the same algorithm and comparison as TVM, so that equal values
// land in the same (unspecified but deterministic) order and ties pick the same token. Requires
// no NaN (std::sort needs a strict weak order).
void sort_descending(std::vector<Entry>& data) {
  std::sort(data.begin(), data.end(),
            [](const Entry& lhs, const Entry& rhs) { return lhs.first > rhs.first; });
}

// ---- checks shared by the span API and the builtins; `who` names the caller in messages ------

void check_vocab(const char* who, const char* name, size_t size) {
  if (size == 0) throw ValueError(fmt::format("{}: {} is empty (no vocabulary)", who, name));
  if (size > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw ValueError(fmt::format("{}: {} has {} entries, more than a token id (int32) can name",
                                 who, name, size));
  }
}

void check_no_nan(const char* who, const char* name, std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) throw ValueError(fmt::format("{}: {}[{}] is NaN", who, name, i));
  }
}

// Probabilities: finite and >= 0 (TVM skips NaNs and negatives, or sums them, silently).
void check_probabilities(const char* who, const char* name, std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(values[i] >= 0.0f) || std::isinf(values[i])) {
      throw ValueError(fmt::format("{}: {}[{}] = {} is not a probability (must be finite and >= 0)",
                                   who, name, i, values[i]));
    }
  }
}

void check_top_p(const char* who, double top_p) {
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    throw ValueError(fmt::format("{}: top_p must be in (0, 1], got {}", who, top_p));
  }
}

void check_uniform(const char* who, double uniform_sample) {
  if (!(uniform_sample >= 0.0 && uniform_sample < 1.0)) {
    throw ValueError(
        fmt::format("{}: uniform_sample must be in [0, 1), got {}", who, uniform_sample));
  }
}

void check_finite(const char* who, const char* name, double value) {
  if (!std::isfinite(value)) {
    throw ValueError(fmt::format("{}: {} must be finite, got {}", who, name, value));
  }
}

void check_token_ids(const char* who, std::span<const int32_t> token_ids, size_t vocab) {
  for (size_t i = 0; i < token_ids.size(); ++i) {
    const int32_t id = token_ids[i];
    if (id < 0 || static_cast<size_t>(id) >= vocab) {
      throw IndexError(fmt::format("{}: token_ids[{}] = {} is outside the vocabulary [0, {})", who,
                                   i, id, vocab));
    }
  }
}

// ---- the operations, each with the caller's name for its messages ------------------------------

int64_t argmax_impl(const char* who, std::span<const float> logits) {
  check_vocab(who, "logits", logits.size());
  check_no_nan(who, "logits", logits);
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

void softmax_impl(const char* who, std::span<float> logits, double temperature) {
  check_vocab(who, "logits", logits.size());
  check_no_nan(who, "logits", logits);
  if (!(temperature > 0.0) || !std::isfinite(temperature)) {
    throw ValueError(
        fmt::format("{}: temperature must be > 0 and finite, got {}", who, temperature));
  }
  // TVM: float inv_temp = 1.0f / temperature (a float64 division, rounded to float32).
  const auto inv_temp = static_cast<float>(1.0 / temperature);
  if (std::isinf(inv_temp)) {
    throw ValueError(fmt::format("{}: temperature {} is too small: 1/temperature overflows float32",
                                 who, temperature));
  }
  // TVM starts the running max at numeric_limits<float>::min() (the smallest positive normal,
  // not the lowest value); kept for identical results.
  float m = std::numeric_limits<float>::min();
  double d = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i] * inv_temp;
    if (x == std::numeric_limits<float>::infinity()) {
      throw ValueError(fmt::format("{}: logits[{}] / temperature = {} / {} overflows float32", who,
                                   i, logits[i], temperature));
    }
    const float m_prev = m;
    m = std::max(m, x);
    d = d * static_cast<double>(std::exp(m_prev - m)) + static_cast<double>(std::exp(x - m));
  }
  if (!(d > 0.0)) {
    throw ValueError(fmt::format(
        "{}: every exp(logit / temperature) underflows to 0 (all logits -inf, or below about "
        "-104 * temperature), the softmax is undefined",
        who));
  }
  for (float& logit : logits) {
    const float x = logit * inv_temp;
    logit = static_cast<float>(static_cast<double>(std::exp(x - m)) / d);
  }
}

int64_t sample_from_logits_impl(const char* who, std::span<const float> logits, double temperature,
                                double top_p, double uniform_sample) {
  check_vocab(who, "logits", logits.size());
  check_no_nan(who, "logits", logits);
  if (!std::isfinite(temperature)) {
    throw ValueError(fmt::format("{}: temperature must be finite, got {}", who, temperature));
  }
  check_top_p(who, top_p);
  check_uniform(who, uniform_sample);

  std::vector<Entry> data(logits.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = {logits[i], static_cast<int>(i)};
  sort_descending(data);
  // TVM compares the float64 temperature with the float32 constant 1e-6f.
  if (temperature < static_cast<double>(1e-6f)) return data[0].second;

  const float max_value = data[0].first;
  if (max_value == std::numeric_limits<float>::infinity()) {
    throw ValueError(
        fmt::format("{}: logits[{}] is +inf, the softmax is undefined", who, data[0].second));
  }
  if (max_value == -std::numeric_limits<float>::infinity()) {
    throw ValueError(fmt::format("{}: every logit is -inf, the softmax is undefined", who));
  }
  // From here, max_value is finite, so every term is in [0, 1] and the first is 1: sum >= 1.
  float sum = 0.0f;
  const auto logit_scale = static_cast<float>(1.0 / temperature);
  for (Entry& e : data) {
    e.first = std::exp((e.first - max_value) * logit_scale);
    sum += e.first;
  }
  // Running sum of the probabilities in sorted order; the nucleus is the prefix that is entered
  // while the running sum is still below top_p (compared in float64, as TVM does).
  float cum_sum_prob = 0.0f;
  float top_p_sum = 0.0f;
  for (Entry& e : data) {
    const float prob = e.first / sum;
    if (static_cast<double>(cum_sum_prob) < top_p) top_p_sum += prob;
    cum_sum_prob += prob;
    e.first = cum_sum_prob;
  }
  for (const Entry& e : data) {
    if (uniform_sample < static_cast<double>(e.first / top_p_sum)) return e.second;
  }
  // Unreachable for uniform_sample < 1: the nucleus's last entry divides to exactly 1 (TVM
  // fails a check here).
  throw RuntimeError(fmt::format("{}: no token sampled for uniform_sample {} (internal error)", who,
                                 uniform_sample));
}

int64_t sample_from_prob_impl(const char* who, std::span<const float> prob, double top_p,
                              double uniform_sample) {
  check_vocab(who, "prob", prob.size());
  check_probabilities(who, "prob", prob);
  check_top_p(who, top_p);
  check_uniform(who, uniform_sample);

  const auto ndata = static_cast<int64_t>(prob.size());
  std::vector<Entry> data;
  // TVM's sampler: keep the probabilities >= cutoff, sort them, and sample from their nucleus;
  // -1 when the kept ones do not reach top_p (only possible for a nonzero cutoff).
  const auto sample_with_cutoff = [&](float cutoff) -> int64_t {
    data.clear();
    for (int64_t i = 0; i < ndata; ++i) {
      if (prob[i] >= cutoff) data.emplace_back(prob[i], static_cast<int>(i));
    }
    if (data.empty()) return -1;
    sort_descending(data);
    // TVM's short cut: a sample below p[0] / top_p takes the top token without summing. It
    // assumes the nucleus mass is at most top_p, but the mass includes the token that crosses
    // top_p, so the top token wins slightly more often than the full test below would give it;
    // kept, because the point is TVM's tokens.
    if (uniform_sample < static_cast<double>(data[0].first) / top_p) return data[0].second;
    float cum_sum_prob = 0.0f;
    float top_p_sum = 0.0f;
    for (Entry& e : data) {
      if (!(static_cast<double>(cum_sum_prob) < top_p)) break;
      top_p_sum += e.first;
      cum_sum_prob += e.first;
      e.first = cum_sum_prob;
    }
    if (static_cast<double>(cum_sum_prob) < top_p && cutoff != 0.0f) return -1;
    for (const Entry& e : data) {
      if (uniform_sample < static_cast<double>(e.first / top_p_sum)) return e.second;
    }
    // Only when the nucleus mass is 0 (TVM returns the last kept token).
    throw ValueError(fmt::format("{}: every probability is 0, nothing to sample", who));
  };
  if (top_p < 1.0) {
    // At most 1024 probabilities reach top_p / 1024 and sum below top_p, so usually this
    // small set holds the nucleus; TVM passes the float64 quotient as a float32 cutoff.
    const int64_t sampled = sample_with_cutoff(static_cast<float>(top_p / 1024));
    if (sampled >= 0) return sampled;
  }
  return sample_with_cutoff(0.0f);  // every probability is >= 0, so none is dropped
}

int64_t multinomial_impl(const char* who, std::span<const float> prob, float uniform_sample) {
  check_vocab(who, "prob", prob.size());
  check_probabilities(who, "prob", prob);
  check_uniform(who, uniform_sample);
  float cum_sum_prob = 0.0f;
  for (size_t j = 0; j < prob.size(); ++j) {
    cum_sum_prob += prob[j];
    if (cum_sum_prob > uniform_sample) return static_cast<int64_t>(j);
  }
  if (cum_sum_prob == 0.0f) {
    throw ValueError(fmt::format("{}: every probability is 0, nothing to sample", who));
  }
  return static_cast<int64_t>(prob.size()) - 1;  // the sum fell short of the sample by rounding
}

void repetition_penalty_impl(const char* who, std::span<float> logits,
                             std::span<const int32_t> token_ids, double penalty) {
  check_vocab(who, "logits", logits.size());
  check_no_nan(who, "logits", logits);
  check_token_ids(who, token_ids, logits.size());
  if (!(penalty > 0.0) || !std::isfinite(penalty)) {
    throw ValueError(fmt::format("{}: penalty must be > 0 and finite, got {}", who, penalty));
  }
  for (const int32_t id : token_ids) {
    float& logit = logits[static_cast<size_t>(id)];
    // float32 *= float64: computed in float64, rounded back.
    if (logit <= 0) {
      logit = static_cast<float>(static_cast<double>(logit) * penalty);
    } else {
      logit = static_cast<float>(static_cast<double>(logit) / penalty);
    }
  }
}

void presence_frequency_impl(const char* who, std::span<float> logits,
                             std::span<const int32_t> token_ids,
                             std::span<const int32_t> token_freqs, double presence_penalty,
                             double frequency_penalty) {
  check_vocab(who, "logits", logits.size());
  check_no_nan(who, "logits", logits);
  check_token_ids(who, token_ids, logits.size());
  if (token_freqs.size() != token_ids.size()) {
    throw ValueError(fmt::format("{}: token_freqs has {} entries but token_ids has {}", who,
                                 token_freqs.size(), token_ids.size()));
  }
  for (size_t i = 0; i < token_freqs.size(); ++i) {
    if (token_freqs[i] < 1) {
      throw ValueError(
          fmt::format("{}: token_freqs[{}] = {} must be >= 1", who, i, token_freqs[i]));
    }
  }
  check_finite(who, "presence_penalty", presence_penalty);
  check_finite(who, "frequency_penalty", frequency_penalty);
  for (size_t i = 0; i < token_ids.size(); ++i) {
    float& logit = logits[static_cast<size_t>(token_ids[i])];
    logit = static_cast<float>(static_cast<double>(logit) -
                               (token_freqs[i] * frequency_penalty + presence_penalty));
  }
}

// ---- the builtins: TVM's calling conventions on Kiln values ------------------------------------

constexpr const char* kSampleTopPFromLogits = "vm.builtin.sample_top_p_from_logits";
constexpr const char* kSampleTopPFromProb = "vm.builtin.sample_top_p_from_prob";
constexpr const char* kMultinomialFromUniform = "vm.builtin.multinomial_from_uniform";
constexpr const char* kApplySoftmaxWithTemperature = "vm.builtin.apply_softmax_with_temperature";
constexpr const char* kApplyRepetitionPenalty = "vm.builtin.apply_repetition_penalty";
constexpr const char* kApplyPresenceAndFrequencyPenalty =
    "vm.builtin.apply_presence_and_frequency_penalty";

void expect_args(const char* who, int32_t n, int32_t expected) {
  if (n != expected) {
    throw TypeError(fmt::format("{} takes {} arguments, got {}", who, expected, n));
  }
}

// A number argument (an int widens, as TVM's double parameters accept ints).
double number_arg(const Any* args, int32_t i, const char* who, const char* name) {
  const Any& v = args[i];
  if (v.type_code() == KILN_TYPE_FLOAT) return v.raw_float();
  if (v.type_code() == KILN_TYPE_INT) return static_cast<double>(v.raw_int());
  throw TypeError(
      fmt::format("{}: argument {} ({}) must be a number, got {}", who, i, name, v.type_name()));
}

// Where a tensor argument may live: TVM copies the samplers' inputs to the host, but the in-place
// operations require host memory.
enum class Placement { kCopyToHost, kHostOnly };

// Tensor argument `i` (`name`) of `dtype`, contiguous, on the host (copied there when
// `placement` allows).
Tensor tensor_arg(const Any* args, int32_t i, const char* who, const char* name, DataType dtype,
                  Placement placement) {
  const Any& v = args[i];
  if (v.type_code() != KILN_TYPE_TENSOR) {
    throw TypeError(
        fmt::format("{}: argument {} ({}) must be a tensor, got {}", who, i, name, v.type_name()));
  }
  Tensor t = v.cast<Tensor>();
  if (t.dtype() != dtype) {
    throw TypeError(
        fmt::format("{}: {} must be {}, got {}", who, name, dtype.str(), t.dtype().str()));
  }
  if (!t.is_contiguous()) {
    throw ValueError(fmt::format("{}: {} must be contiguous ({})", who, name, t.str()));
  }
  if (t.device().type != kDLCPU) {
    if (placement == Placement::kHostOnly) {
      throw ValueError(
          fmt::format("{}: {} must be on the cpu, got {}", who, name, t.device().str()));
    }
    t = t.to_host();
  }
  return t;
}

// The one row of a tensor whose leading dimensions must all be 1 (TVM's samplers check this;
// Kiln also requires it of the in-place operations, which in TVM would touch only the first row
// of a batch). ValueError for a scalar or a batch.
template <typename T>
std::span<T> single_row(const Tensor& t, const char* who, const char* name) {
  if (t.ndim() == 0) {
    throw ValueError(
        fmt::format("{}: {} must have at least one dimension, got a scalar", who, name));
  }
  const auto shape = t.shape();
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (shape[d] != 1) {
      throw ValueError(fmt::format("{}: the leading dimensions of {} must be 1, got shape [{}]",
                                   who, name, fmt::join(shape, ", ")));
    }
  }
  return {static_cast<T*>(t.data()), static_cast<size_t>(shape.back())};
}

Any sample_top_p_from_logits_builtin(const Any* args, int32_t n) {
  const char* who = kSampleTopPFromLogits;
  expect_args(who, n, 4);
  const Tensor logits =
      tensor_arg(args, 0, who, "logits", DataType::Float(32), Placement::kCopyToHost);
  const double temperature = number_arg(args, 1, who, "temperature");
  const double top_p = number_arg(args, 2, who, "top_p");
  const double uniform_sample = number_arg(args, 3, who, "uniform_sample");
  return sample_from_logits_impl(who, single_row<const float>(logits, who, "logits"), temperature,
                                 top_p, uniform_sample);
}

Any sample_top_p_from_prob_builtin(const Any* args, int32_t n) {
  const char* who = kSampleTopPFromProb;
  expect_args(who, n, 3);
  const Tensor prob = tensor_arg(args, 0, who, "prob", DataType::Float(32), Placement::kCopyToHost);
  const double top_p = number_arg(args, 1, who, "top_p");
  const double uniform_sample = number_arg(args, 2, who, "uniform_sample");
  return sample_from_prob_impl(who, single_row<const float>(prob, who, "prob"), top_p,
                               uniform_sample);
}

// prob (batch, vocab) float32 and uniform_sample (batch, 1) float32 (TVM reads both as float32
// without checking) -> (batch, 1) int64 on the host.
Any multinomial_from_uniform_builtin(const Any* args, int32_t n) {
  const char* who = kMultinomialFromUniform;
  expect_args(who, n, 2);
  const Tensor prob = tensor_arg(args, 0, who, "prob", DataType::Float(32), Placement::kCopyToHost);
  const Tensor uniform =
      tensor_arg(args, 1, who, "uniform_sample", DataType::Float(32), Placement::kCopyToHost);
  if (prob.ndim() != 2) {
    throw ValueError(fmt::format("{}: prob must be (batch, vocab), got shape [{}]", who,
                                 fmt::join(prob.shape(), ", ")));
  }
  const int64_t batch = prob.shape()[0];
  const int64_t vocab = prob.shape()[1];
  if (vocab == 0) throw ValueError(fmt::format("{}: prob is empty (no vocabulary)", who));
  const bool uniform_ok =
      (uniform.ndim() == 2 && uniform.shape()[0] == batch && uniform.shape()[1] == 1) ||
      (uniform.ndim() == 1 && uniform.shape()[0] == batch);
  if (!uniform_ok) {
    throw ValueError(
        fmt::format("{}: uniform_sample must be ({}, 1) for prob of shape [{}], got "
                    "shape [{}]",
                    who, batch, fmt::join(prob.shape(), ", "), fmt::join(uniform.shape(), ", ")));
  }
  const auto* pprob = static_cast<const float*>(prob.data());
  const auto* psample = static_cast<const float*>(uniform.data());
  Tensor out = Tensor::empty_host({batch, 1}, DataType::Int(64));
  auto* pout = static_cast<int64_t*>(out.data());
  for (int64_t i = 0; i < batch; ++i) {
    std::span<const float> row(pprob + i * vocab, static_cast<size_t>(vocab));
    try {
      pout[i] = multinomial_impl(who, row, psample[i]);
    } catch (const ValueError& e) {  // name the row of the batch
      throw ValueError(fmt::format("{} (row {} of the batch)", e.what(), i));
    }
  }
  return out;
}

Any apply_softmax_with_temperature_builtin(const Any* args, int32_t n) {
  const char* who = kApplySoftmaxWithTemperature;
  expect_args(who, n, 2);
  const Tensor logits =
      tensor_arg(args, 0, who, "logits", DataType::Float(32), Placement::kHostOnly);
  const double temperature = number_arg(args, 1, who, "temperature");
  softmax_impl(who, single_row<float>(logits, who, "logits"), temperature);
  return Any();
}

Any apply_repetition_penalty_builtin(const Any* args, int32_t n) {
  const char* who = kApplyRepetitionPenalty;
  expect_args(who, n, 3);
  const Tensor logits =
      tensor_arg(args, 0, who, "logits", DataType::Float(32), Placement::kHostOnly);
  const Tensor token_ids =
      tensor_arg(args, 1, who, "token_ids", DataType::Int(32), Placement::kHostOnly);
  const double penalty = number_arg(args, 2, who, "penalty");
  repetition_penalty_impl(who, single_row<float>(logits, who, "logits"),
                          single_row<const int32_t>(token_ids, who, "token_ids"), penalty);
  return Any();
}

Any apply_presence_and_frequency_penalty_builtin(const Any* args, int32_t n) {
  const char* who = kApplyPresenceAndFrequencyPenalty;
  expect_args(who, n, 5);
  const Tensor logits =
      tensor_arg(args, 0, who, "logits", DataType::Float(32), Placement::kHostOnly);
  const Tensor token_ids =
      tensor_arg(args, 1, who, "token_ids", DataType::Int(32), Placement::kHostOnly);
  const Tensor token_freqs =
      tensor_arg(args, 2, who, "token_freqs", DataType::Int(32), Placement::kHostOnly);
  const double presence_penalty = number_arg(args, 3, who, "presence_penalty");
  const double frequency_penalty = number_arg(args, 4, who, "frequency_penalty");
  presence_frequency_impl(who, single_row<float>(logits, who, "logits"),
                          single_row<const int32_t>(token_ids, who, "token_ids"),
                          single_row<const int32_t>(token_freqs, who, "token_freqs"),
                          presence_penalty, frequency_penalty);
  return Any();
}

}  // namespace

// ---- the public API ----------------------------------------------------------------------------

int64_t argmax(std::span<const float> logits) { return argmax_impl("kiln::llm::argmax", logits); }

void apply_softmax_with_temperature(std::span<float> logits, double temperature) {
  softmax_impl("kiln::llm::apply_softmax_with_temperature", logits, temperature);
}

int64_t sample_top_p_from_logits(std::span<const float> logits, double temperature, double top_p,
                                 double uniform_sample) {
  return sample_from_logits_impl("kiln::llm::sample_top_p_from_logits", logits, temperature, top_p,
                                 uniform_sample);
}

int64_t sample_top_p_from_prob(std::span<const float> prob, double top_p, double uniform_sample) {
  return sample_from_prob_impl("kiln::llm::sample_top_p_from_prob", prob, top_p, uniform_sample);
}

int64_t multinomial_from_uniform(std::span<const float> prob, float uniform_sample) {
  return multinomial_impl("kiln::llm::multinomial_from_uniform", prob, uniform_sample);
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> token_ids,
                              double penalty) {
  repetition_penalty_impl("kiln::llm::apply_repetition_penalty", logits, token_ids, penalty);
}

void apply_presence_and_frequency_penalty(std::span<float> logits,
                                          std::span<const int32_t> token_ids,
                                          std::span<const int32_t> token_freqs,
                                          double presence_penalty, double frequency_penalty) {
  presence_frequency_impl("kiln::llm::apply_presence_and_frequency_penalty", logits, token_ids,
                          token_freqs, presence_penalty, frequency_penalty);
}

namespace detail {

BuiltinList sampling_builtins() {
  BuiltinList list;
  const auto add = [&list](const char* name, Any (*body)(const Any*, int32_t)) {
    list.emplace_back(name, Function::from_packed(name, body));
  };
  add(kSampleTopPFromLogits, &sample_top_p_from_logits_builtin);
  add(kSampleTopPFromProb, &sample_top_p_from_prob_builtin);
  add(kMultinomialFromUniform, &multinomial_from_uniform_builtin);
  add(kApplySoftmaxWithTemperature, &apply_softmax_with_temperature_builtin);
  add(kApplyRepetitionPenalty, &apply_repetition_penalty_builtin);
  add(kApplyPresenceAndFrequencyPenalty, &apply_presence_and_frequency_penalty_builtin);
  return list;
}

}  // namespace detail
}  // namespace kiln::llm
