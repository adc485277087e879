// SPDX-License-Identifier: Apache-2.0
// Sampling and logit processing (kiln/llm/sampling.h) and their builtins, without TVM: cases
// computed by hand, ties, one-token vocabularies, and every kind of bad input, which must throw
// a typed error naming the function and the argument and leave the caller's data unchanged.
// The bit-for-bit comparison with TVM's builtins is tests/python/test_llm_sampling.py.
#include "kiln/llm/sampling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "builtin_table.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/tensor.h"
#include "llm/error_of.h"

namespace kiln::llm {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using ::kiln::llm::testing::error_of;

// Probabilities 0.1, 0.2, 0.7 for tokens 0, 1, 2 (sorted: 2, 1, 0; running sums 0.7, 0.9, 1).
std::vector<float> logits_1_2_7() { return {std::log(1.0f), std::log(2.0f), std::log(7.0f)}; }

// ---- argmax -------------------------------------------------------------------------------------

TEST(Argmax, LargestAndLowestIndexOnTies) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{2, 5, 5}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-kInf, -kInf, 0}), 2);
  EXPECT_EQ(argmax(std::vector<float>{7}), 0);
}

TEST(Argmax, RejectsEmptyAndNaN) {
  EXPECT_THAT(error_of<ValueError>([] { argmax({}); }), HasSubstr("logits is empty"));
  EXPECT_THAT(error_of<ValueError>([] {
                argmax(std::vector<float>{1, kNaN});
              }),
              HasSubstr("kiln::llm::argmax: logits[1] is NaN"));
}

// ---- softmax ------------------------------------------------------------------------------------

TEST(Softmax, HandComputed) {
  std::vector<float> x{0.0f, std::log(3.0f)};
  apply_softmax_with_temperature(x, 1.0);
  EXPECT_NEAR(x[0], 0.25f, 1e-6f);
  EXPECT_NEAR(x[1], 0.75f, 1e-6f);
  std::vector<float> y{0.0f, 2 * std::log(3.0f), -kInf};  // temperature 2 halves the logits
  apply_softmax_with_temperature(y, 2.0);
  EXPECT_NEAR(y[0], 0.25f, 1e-6f);
  EXPECT_NEAR(y[1], 0.75f, 1e-6f);
  EXPECT_EQ(y[2], 0.0f);
  std::vector<float> one{-5.0f};
  apply_softmax_with_temperature(one, 0.7);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(Softmax, AllNegativeRowsAreNormalisedAgainstZeroAsInTvm) {
  // The running max starts at FLT_MIN: a row of -10s still gives a uniform distribution.
  std::vector<float> x{-10.0f, -10.0f};
  apply_softmax_with_temperature(x, 1.0);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 0.5f);
}

TEST(Softmax, BadInputThrowsAndLeavesLogitsUnchanged) {
  const std::vector<float> original{1.0f, 2.0f};
  for (double t : {0.0, -1.0, double(kNaN), double(kInf)}) {
    std::vector<float> x = original;
    EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(x, t); }),
                HasSubstr("kiln::llm::apply_softmax_with_temperature: temperature"));
    EXPECT_EQ(x, original);
  }
  std::vector<float> tiny = original;  // 1 / 1e-300 overflows float32
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(tiny, 1e-300); }),
              HasSubstr("too small"));
  EXPECT_EQ(tiny, original);
  std::vector<float> nan{1.0f, kNaN};
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(nan, 1.0); }),
              HasSubstr("logits[1] is NaN"));
  std::vector<float> inf{1.0f, kInf};
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(inf, 1.0); }),
              HasSubstr("overflows"));
  EXPECT_EQ(inf[0], 1.0f);
  std::vector<float> overflow{1e30f, 1.0f};  // 1e30 / 1e-10 overflows float32
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(overflow, 1e-10); }),
              HasSubstr("logits[0] / temperature"));
  std::vector<float> all_neg_inf{-kInf, -kInf};
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(all_neg_inf, 1.0); }),
              HasSubstr("underflows"));
  EXPECT_EQ(all_neg_inf[0], -kInf);
  std::vector<float> very_negative{-200.0f, -300.0f};  // TVM writes NaN here
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(very_negative, 1.0); }),
              HasSubstr("underflows"));
  EXPECT_EQ(very_negative[0], -200.0f);
  std::vector<float> empty;
  EXPECT_THAT(error_of<ValueError>([&] { apply_softmax_with_temperature(empty, 1.0); }),
              HasSubstr("logits is empty"));
}

// ---- sample_top_p_from_logits -----------------------------------------------------------------

TEST(SampleTopPFromLogits, FullDistribution) {
  const auto x = logits_1_2_7();
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 1.0, 0.0), 2);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 1.0, 0.5), 2);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 1.0, 0.75), 1);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 1.0, 0.95), 0);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 1.0, 0.999999), 0);
}

TEST(SampleTopPFromLogits, Nucleus) {
  const auto x = logits_1_2_7();
  // top_p 0.5: only token 2 (its 0.7 crosses 0.5).
  for (double u : {0.0, 0.5, 0.99, 0.999999}) EXPECT_EQ(sample_top_p_from_logits(x, 1, 0.5, u), 2);
  // top_p 0.8: tokens 2 and 1, mass 0.9: token 2 below 0.7 / 0.9 = 0.778.
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 0.8, 0.7), 2);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 0.8, 0.8), 1);
  EXPECT_EQ(sample_top_p_from_logits(x, 1.0, 0.8, 0.999999), 1);
}

TEST(SampleTopPFromLogits, TemperatureBelowOneMillionthIsGreedy) {
  const auto x = logits_1_2_7();
  for (double t : {0.0, 1e-7, -1.0, -1e300}) {
    for (double u : {0.0, 0.999}) EXPECT_EQ(sample_top_p_from_logits(x, t, 1.0, u), 2) << t;
  }
  // A high temperature flattens: token 0 (0.1 at temperature 1) gets about a third.
  EXPECT_EQ(sample_top_p_from_logits(x, 1000.0, 1.0, 0.9), 0);
  // Greedy takes a +inf logit (as TVM does); sampling cannot.
  const std::vector<float> inf{0.0f, kInf};
  EXPECT_EQ(sample_top_p_from_logits(inf, 0.0, 1.0, 0.5), 1);
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(inf, 1.0, 1.0, 0.5); }),
              HasSubstr("logits[1] is +inf"));
}

TEST(SampleTopPFromLogits, OneTokenTiesAndMaskedTokens) {
  for (double u : {0.0, 0.3, 0.999999}) {
    EXPECT_EQ(sample_top_p_from_logits(std::vector<float>{-3.0f}, 0.8, 0.1, u), 0);
  }
  // Two equal logits: the two halves of [0, 1) give the two tokens.
  const std::vector<float> tie{1.0f, 1.0f};
  std::set<int64_t> seen{sample_top_p_from_logits(tie, 1.0, 1.0, 0.25),
                         sample_top_p_from_logits(tie, 1.0, 1.0, 0.75)};
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
  // -inf tokens are never drawn.
  const std::vector<float> masked{0.0f, -kInf, 0.0f, -kInf};
  for (int i = 0; i < 100; ++i) {
    const int64_t token = sample_top_p_from_logits(masked, 1.0, 1.0, i / 100.0);
    EXPECT_TRUE(token == 0 || token == 2) << token;
  }
}

TEST(SampleTopPFromLogits, BadInput) {
  const auto x = logits_1_2_7();
  const std::string who = "kiln::llm::sample_top_p_from_logits: ";
  for (double p : {0.0, -0.1, 1.5, double(kNaN)}) {
    EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(x, 1.0, p, 0.5); }),
                HasSubstr(who + "top_p must be in (0, 1]"));
  }
  for (double u : {-0.1, 1.0, 2.0, double(kNaN)}) {
    EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(x, 1.0, 0.9, u); }),
                HasSubstr(who + "uniform_sample must be in [0, 1)"));
  }
  for (double t : {double(kNaN), double(kInf)}) {
    EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(x, t, 0.9, 0.5); }),
                HasSubstr(who + "temperature must be finite"));
  }
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits({}, 1.0, 0.9, 0.5); }),
              HasSubstr(who + "logits is empty"));
  // NaN is checked before the sort (a NaN breaks std::sort's ordering) and also when greedy.
  const std::vector<float> nan{1.0f, kNaN, 2.0f};
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(nan, 1.0, 0.9, 0.5); }),
              HasSubstr(who + "logits[1] is NaN"));
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(nan, 0.0, 0.9, 0.5); }),
              HasSubstr("is NaN"));
  const std::vector<float> all_masked{-kInf, -kInf};
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_logits(all_masked, 1.0, 0.9, 0.5); }),
              HasSubstr("every logit is -inf"));
}

// ---- sample_top_p_from_prob ---------------------------------------------------------------------

TEST(SampleTopPFromProb, HandComputed) {
  const std::vector<float> p{0.1f, 0.2f, 0.7f};
  EXPECT_EQ(sample_top_p_from_prob(p, 1.0, 0.5), 2);
  EXPECT_EQ(sample_top_p_from_prob(p, 1.0, 0.75), 1);
  EXPECT_EQ(sample_top_p_from_prob(p, 1.0, 0.95), 0);
  for (double u : {0.0, 0.99}) EXPECT_EQ(sample_top_p_from_prob(p, 0.5, u), 2);
  // top_p 0.8: tokens 2 and 1 (mass 0.9). TVM's short cut returns the top token for samples
  // below 0.7 / top_p = 0.875 (not 0.7 / 0.9 as sample_top_p_from_logits would): reproduced.
  EXPECT_EQ(sample_top_p_from_prob(p, 0.8, 0.7), 2);
  EXPECT_EQ(sample_top_p_from_prob(p, 0.8, 0.8), 2);
  EXPECT_EQ(sample_top_p_from_prob(p, 0.8, 0.88), 1);
  EXPECT_EQ(sample_top_p_from_prob(p, 0.8, 0.999), 1);
  // Not normalised: the nucleus is what reaches top_p of the given values.
  EXPECT_EQ(sample_top_p_from_prob(std::vector<float>{2.0f, 0.0f, 6.0f}, 1.0, 0.3), 2);
  EXPECT_EQ(sample_top_p_from_prob(std::vector<float>{1.0f}, 0.3, 0.9), 0);
  // A token of probability 0 is never drawn.
  const std::vector<float> zeros{0.0f, 0.5f, 0.0f, 0.5f};
  for (int i = 0; i < 100; ++i) {
    const int64_t token = sample_top_p_from_prob(zeros, 1.0, i / 100.0);
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
}

TEST(SampleTopPFromProb, FallsBackToTheWholeRowWhenTheCutoffKeepsTooLittle) {
  // 0.5 on token 0 and 2048 tokens of 0.5 / 2048, below the cutoff 0.9 / 1024: the first pass
  // keeps only token 0 (mass 0.5 < 0.9) and the second takes the whole row.
  std::vector<float> p(2049, 0.5f / 2048);
  p[0] = 0.5f;
  EXPECT_EQ(sample_top_p_from_prob(p, 0.9, 0.1), 0);  // below 0.5 / 0.9: the short cut
  const int64_t tail = sample_top_p_from_prob(p, 0.9, 0.9);
  EXPECT_GE(tail, 1);
  EXPECT_LT(tail, 2049);
}

TEST(SampleTopPFromProb, BadInput) {
  const std::string who = "kiln::llm::sample_top_p_from_prob: ";
  const std::vector<float> p{0.1f, 0.2f, 0.7f};
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob(p, 0.0, 0.5); }),
              HasSubstr(who + "top_p"));
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob(p, 1.01, 0.5); }),
              HasSubstr(who + "top_p"));
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob(p, 0.9, 1.0); }),
              HasSubstr(who + "uniform_sample"));
  EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob({}, 0.9, 0.5); }),
              HasSubstr(who + "prob is empty"));
  for (float bad : {kNaN, -0.1f, kInf}) {
    const std::vector<float> q{0.5f, bad, 0.5f};
    EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob(q, 0.9, 0.5); }),
                HasSubstr(who + "prob[1]"));
  }
  const std::vector<float> zero(5, 0.0f);
  for (double top_p : {0.5, 1.0}) {
    EXPECT_THAT(error_of<ValueError>([&] { sample_top_p_from_prob(zero, top_p, 0.5); }),
                HasSubstr("every probability is 0"));
  }
}

// ---- multinomial_from_uniform -----------------------------------------------------------------

TEST(MultinomialFromUniform, HandComputed) {
  const std::vector<float> p{0.1f, 0.2f, 0.7f};
  EXPECT_EQ(multinomial_from_uniform(p, 0.0f), 0);
  EXPECT_EQ(multinomial_from_uniform(p, 0.05f), 0);
  EXPECT_EQ(multinomial_from_uniform(p, 0.15f), 1);
  EXPECT_EQ(multinomial_from_uniform(p, 0.5f), 2);
  EXPECT_EQ(multinomial_from_uniform(p, 0.99999f), 2);
  // The first nonzero token, not a zero one, for a sample of 0.
  EXPECT_EQ(multinomial_from_uniform(std::vector<float>{0.0f, 1.0f}, 0.0f), 1);
  // A sum that falls short of the sample gives the last token (as in TVM).
  EXPECT_EQ(multinomial_from_uniform(std::vector<float>{0.25f, 0.25f}, 0.75f), 1);
  EXPECT_EQ(multinomial_from_uniform(std::vector<float>{1.0f}, 0.5f), 0);
}

TEST(MultinomialFromUniform, BadInput) {
  const std::string who = "kiln::llm::multinomial_from_uniform: ";
  const std::vector<float> p{0.5f, 0.5f};
  for (float u : {-0.5f, 1.0f, kNaN}) {
    EXPECT_THAT(error_of<ValueError>([&] { multinomial_from_uniform(p, u); }),
                HasSubstr(who + "uniform_sample"));
  }
  EXPECT_THAT(error_of<ValueError>([&] { multinomial_from_uniform({}, 0.5f); }),
              HasSubstr("prob is empty"));
  for (float bad : {kNaN, -1.0f, kInf}) {
    EXPECT_THAT(error_of<ValueError>([&] {
                  multinomial_from_uniform(std::vector<float>{bad, 1.0f}, 0.5f);
                }),
                HasSubstr(who + "prob[0]"));
  }
  EXPECT_THAT(error_of<ValueError>([&] {
                multinomial_from_uniform(std::vector<float>{0.0f, 0.0f}, 0.5f);
              }),
              HasSubstr("every probability is 0"));
}

// ---- penalties --------------------------------------------------------------------------------

TEST(RepetitionPenalty, DividesPositiveAndMultipliesOtherLogits) {
  std::vector<float> x{2.0f, -2.0f, 0.0f, 4.0f, 8.0f};
  apply_repetition_penalty(x, std::vector<int32_t>{0, 1, 2, 4, 4}, 2.0);  // 4 twice: twice
  EXPECT_EQ(x, (std::vector<float>{1.0f, -4.0f, 0.0f, 4.0f, 2.0f}));
  apply_repetition_penalty(x, {}, 2.0);  // no tokens: nothing
  EXPECT_EQ(x, (std::vector<float>{1.0f, -4.0f, 0.0f, 4.0f, 2.0f}));
}

TEST(RepetitionPenalty, BadInputLeavesLogitsUnchanged) {
  const std::string who = "kiln::llm::apply_repetition_penalty: ";
  const std::vector<float> original{2.0f, -2.0f, 3.0f};
  std::vector<float> x = original;
  for (int32_t id : {3, -1}) {
    EXPECT_THAT(error_of<IndexError>([&] {
                  apply_repetition_penalty(x, std::vector<int32_t>{0, id}, 2.0);
                }),
                HasSubstr(who + "token_ids[1] = " + std::to_string(id)));
    EXPECT_EQ(x, original);
  }
  for (double penalty : {0.0, -1.0, double(kNaN), double(kInf)}) {
    EXPECT_THAT(error_of<ValueError>(
                    [&] { apply_repetition_penalty(x, std::vector<int32_t>{0}, penalty); }),
                HasSubstr(who + "penalty"));
    EXPECT_EQ(x, original);
  }
  std::vector<float> nan{1.0f, kNaN};
  EXPECT_THAT(
      error_of<ValueError>([&] { apply_repetition_penalty(nan, std::vector<int32_t>{0}, 2.0); }),
      HasSubstr("logits[1] is NaN"));
  EXPECT_EQ(nan[0], 1.0f);
  std::vector<float> empty;
  EXPECT_THAT(error_of<ValueError>([&] { apply_repetition_penalty(empty, {}, 2.0); }),
              HasSubstr("logits is empty"));
}

TEST(PresenceAndFrequencyPenalty, HandComputed) {
  std::vector<float> x{1.0f, 1.0f, 1.0f};
  apply_presence_and_frequency_penalty(x, std::vector<int32_t>{0, 2}, std::vector<int32_t>{1, 3},
                                       0.5, 0.25);
  EXPECT_EQ(x, (std::vector<float>{0.25f, 1.0f, -0.25f}));
  apply_presence_and_frequency_penalty(x, std::vector<int32_t>{1}, std::vector<int32_t>{2}, -0.5,
                                       -0.25);  // negative penalties encourage
  EXPECT_EQ(x, (std::vector<float>{0.25f, 2.0f, -0.25f}));
}

TEST(PresenceAndFrequencyPenalty, BadInputLeavesLogitsUnchanged) {
  const std::string who = "kiln::llm::apply_presence_and_frequency_penalty: ";
  const std::vector<float> original{1.0f, 2.0f};
  std::vector<float> x = original;
  const auto call = [&](std::vector<int32_t> ids, std::vector<int32_t> freqs, double presence,
                        double frequency) {
    apply_presence_and_frequency_penalty(x, ids, freqs, presence, frequency);
  };
  EXPECT_THAT(error_of<IndexError>([&] {
                call({0, 2}, {1, 1}, 0.5, 0.5);
              }),
              HasSubstr(who + "token_ids[1] = 2"));
  EXPECT_THAT(error_of<ValueError>([&] {
                call({0, 1}, {1}, 0.5, 0.5);
              }),
              HasSubstr(who + "token_freqs has 1 entries but token_ids has 2"));
  EXPECT_THAT(error_of<ValueError>([&] {
                call({0, 1}, {1, 0}, 0.5, 0.5);
              }),
              HasSubstr(who + "token_freqs[1] = 0 must be >= 1"));
  EXPECT_THAT(error_of<ValueError>([&] { call({0}, {1}, double(kNaN), 0.5); }),
              HasSubstr(who + "presence_penalty must be finite"));
  EXPECT_THAT(error_of<ValueError>([&] { call({0}, {1}, 0.5, double(kInf)); }),
              HasSubstr(who + "frequency_penalty must be finite"));
  EXPECT_EQ(x, original);
}

// ---- UniformSource ------------------------------------------------------------------------------

TEST(UniformSource, SeededAndInRange) {
  UniformSource a(42), b(42), c(43);
  double sum = 0;
  bool differs = false;
  for (int i = 0; i < 10000; ++i) {
    const double u = a.next();
    EXPECT_EQ(u, b.next());
    differs |= (u != c.next());
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    const float f = a.next_float();
    EXPECT_EQ(f, b.next_float());
    c.next_float();
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
    sum += u;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  // The same on every platform: mt19937_64 is fully specified (its first output for the default
  // seed 5489 is 14514284786278117030), and next() keeps its top 53 bits.
  UniformSource d(5489);
  EXPECT_EQ(d.next(), static_cast<double>(14514284786278117030ull >> 11) * 0x1.0p-53);
}

// ---- the builtins: TVM's calling conventions on tensors ---------------------------------------

Function builtin(const std::string& name) {
  for (auto& [n, f] : detail::sampling_builtins()) {
    if (n == name) return f;
  }
  ADD_FAILURE() << "no builtin " << name;
  return {};
}

Tensor host_tensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty_host(std::move(shape), DataType::Float(32));
  t.copy_from(values.data(), values.size() * sizeof(float));
  return t;
}

Tensor int32_tensor(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty_host(std::move(shape), DataType::Int(32));
  t.copy_from(values.data(), values.size() * sizeof(int32_t));
  return t;
}

TEST(SamplingBuiltins, RegisteredUnderTvmNames) {
  std::set<std::string> names;
  for (auto& [n, f] : detail::sampling_builtins()) names.insert(n);
  EXPECT_EQ(
      names,
      (std::set<std::string>{
          "vm.builtin.apply_presence_and_frequency_penalty", "vm.builtin.apply_repetition_penalty",
          "vm.builtin.apply_softmax_with_temperature", "vm.builtin.multinomial_from_uniform",
          "vm.builtin.sample_top_p_from_logits", "vm.builtin.sample_top_p_from_prob"}));
}

TEST(SamplingBuiltins, SampleTopPFromLogits) {
  Function f = builtin("vm.builtin.sample_top_p_from_logits");
  const auto x = logits_1_2_7();
  EXPECT_EQ(f(host_tensor({1, 1, 3}, x), 1.0, 1.0, 0.75).cast<int64_t>(), 1);
  EXPECT_EQ(f(host_tensor({3}, x), 0, 1, 0).cast<int64_t>(), 2);  // ints widen
  const std::string who = "vm.builtin.sample_top_p_from_logits";
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({2, 3}, {0, 0, 0, 0, 0, 0}), 1.0, 1.0, 0.5);
              }),
              HasSubstr(who + ": the leading dimensions of logits must be 1, got shape [2, 3]"));
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({1, 0}, {}), 1.0, 1.0, 0.5);
              }),
              HasSubstr(who + ": logits is empty"));
  EXPECT_THAT(error_of<ValueError>([&] { f(host_tensor({}, {1.0f}), 1.0, 1.0, 0.5); }),
              HasSubstr(who + ": logits must have at least one dimension"));
  Tensor f64 = Tensor::empty_host({1, 3}, DataType::Float(64));
  EXPECT_THAT(error_of<TypeError>([&] { f(f64, 1.0, 1.0, 0.5); }),
              HasSubstr(who + ": logits must be float32, got float64"));
  EXPECT_THAT(error_of<TypeError>([&] { f(host_tensor({3}, x), 1.0, 1.0); }),
              HasSubstr(who + " takes 4 arguments, got 3"));
  EXPECT_THAT(error_of<TypeError>([&] { f(host_tensor({3}, x), 1.0, "0.9", 0.5); }),
              HasSubstr(who + ": argument 2 (top_p) must be a number, got str"));
  EXPECT_THAT(error_of<TypeError>([&] { f(1.0, 1.0, 0.9, 0.5); }),
              HasSubstr(who + ": argument 0 (logits) must be a tensor"));
  EXPECT_THAT(error_of<ValueError>([&] { f(host_tensor({3}, x), 1.0, 0.9, 1.0); }),
              HasSubstr(who + ": uniform_sample must be in [0, 1), got 1"));
}

TEST(SamplingBuiltins, RejectsNonContiguousTensors) {
  // A (2, 2) view with column-major strides.
  std::vector<float> storage{1, 2, 3, 4};
  int64_t shape[2] = {2, 2};
  int64_t strides[2] = {1, 2};
  DLTensor dl{storage.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
  Tensor view = Tensor::view(&dl);
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_THAT(error_of<ValueError>(
                  [&] { builtin("vm.builtin.apply_softmax_with_temperature")(view, 1.0); }),
              HasSubstr("vm.builtin.apply_softmax_with_temperature: logits must be contiguous"));
}

TEST(SamplingBuiltins, SampleTopPFromProb) {
  Function f = builtin("vm.builtin.sample_top_p_from_prob");
  EXPECT_EQ(f(host_tensor({1, 3}, {0.1f, 0.2f, 0.7f}), 0.8, 0.9).cast<int64_t>(), 1);
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({1, 3}, {0.1f, kNaN, 0.7f}), 0.8, 0.8);
              }),
              HasSubstr("vm.builtin.sample_top_p_from_prob: prob[1]"));
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({1, 3}, {0.1f, 0.2f, 0.7f}), 0.0, 0.8);
              }),
              HasSubstr("vm.builtin.sample_top_p_from_prob: top_p"));
}

TEST(SamplingBuiltins, MultinomialFromUniform) {
  Function f = builtin("vm.builtin.multinomial_from_uniform");
  Tensor out = f(host_tensor({3, 2}, {0.5f, 0.5f, 0.0f, 1.0f, 0.9f, 0.1f}),
                 host_tensor({3, 1}, {0.75f, 0.0f, 0.5f}))
                   .cast<Tensor>();
  EXPECT_EQ(out.dtype(), DataType::Int(64));
  EXPECT_EQ(std::vector<int64_t>(out.shape().begin(), out.shape().end()),
            (std::vector<int64_t>{3, 1}));
  const auto tokens = out.host_span<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(tokens.begin(), tokens.end()), (std::vector<int64_t>{1, 1, 0}));
  const std::string who = "vm.builtin.multinomial_from_uniform";
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({2}, {0.5f, 0.5f}), host_tensor({1}, {0.5f}));
              }),
              HasSubstr(who + ": prob must be (batch, vocab), got shape [2]"));
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f}), host_tensor({1, 1}, {0.5f}));
              }),
              HasSubstr(who + ": uniform_sample must be (2, 1)"));
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({2, 0}, {}), host_tensor({2, 1}, {0, 0}));
              }),
              HasSubstr(who + ": prob is empty"));
  EXPECT_THAT(error_of<ValueError>([&] {
                f(host_tensor({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f}), host_tensor({2, 1}, {0.5f, 1.0f}));
              }),
              HasSubstr(who + ": uniform_sample must be in [0, 1), got 1 (row 1 of the batch)"));
  Tensor i64 = Tensor::empty_host({2, 1}, DataType::Int(64));
  EXPECT_THAT(error_of<TypeError>([&] {
                f(host_tensor({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f}), i64);
              }),
              HasSubstr(who + ": uniform_sample must be float32, got int64"));
}

TEST(SamplingBuiltins, InPlaceOperationsWriteTheTensor) {
  Tensor logits = host_tensor({1, 2}, {0.0f, std::log(3.0f)});
  builtin("vm.builtin.apply_softmax_with_temperature")(logits, 1.0);
  EXPECT_NEAR(logits.host_span<float>()[1], 0.75f, 1e-6f);

  Tensor x = host_tensor({1, 3}, {2.0f, -2.0f, 5.0f});
  builtin("vm.builtin.apply_repetition_penalty")(x, int32_tensor({2}, {0, 1}), 2.0);
  const auto px = x.host_span<float>();
  EXPECT_EQ(std::vector<float>(px.begin(), px.end()), (std::vector<float>{1.0f, -4.0f, 5.0f}));

  builtin("vm.builtin.apply_presence_and_frequency_penalty")(x, int32_tensor({1}, {2}),
                                                             int32_tensor({1}, {2}), 1.0, 0.5);
  EXPECT_EQ(x.host_span<float>()[2], 3.0f);

  const std::string who = "vm.builtin.apply_repetition_penalty";
  Tensor ids64 = Tensor::empty_host({1}, DataType::Int(64));
  EXPECT_THAT(error_of<TypeError>([&] { builtin(who)(x, ids64, 2.0); }),
              HasSubstr(who + ": token_ids must be int32, got int64"));
  EXPECT_THAT(error_of<IndexError>([&] { builtin(who)(x, int32_tensor({1}, {3}), 2.0); }),
              HasSubstr(who + ": token_ids[0] = 3 is outside the vocabulary [0, 3)"));
  EXPECT_THAT(error_of<ValueError>([&] {
                builtin(who)(host_tensor({2, 1}, {1, 1}), int32_tensor({1}, {0}), 2.0);
              }),
              HasSubstr(who + ": the leading dimensions of logits must be 1"));
  EXPECT_EQ(std::vector<float>(px.begin(), px.end()), (std::vector<float>{1.0f, -4.0f, 3.0f}));
}

}  // namespace
}  // namespace kiln::llm
