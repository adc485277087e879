// SPDX-License-Identifier: Apache-2.0
// Sampling and logit processing for the LLM runtime (docs/llm.md), on host float32 arrays: what
// the engine and the CLI call directly, and what the VM builtins of TVM 0.27's names
// (vm.builtin.sample_top_p_from_logits, ...; src/runtime/vm/lm_support.cc in TVM) run.
//
// For valid input each function computes what TVM's builtin of the same name computes, with the
// same float32 and float64 operations in the same order and the same (unstable) std::sort for
// the order of equal values, so the same uniforms give the same token ids and processed logits
// are bit-identical. Where TVM gives NaN, an out-of-range token, an undefined read or a token of
// probability zero for bad input, these functions throw instead, before writing anything, with
// a message that names the function and the argument:
//   TypeError   (the builtins only) an argument of the wrong kind or dtype;
//   ValueError  an empty vocabulary, a NaN (or, where it makes the result undefined, an infinite)
//               value, a parameter outside its range, a distribution that is zero everywhere;
//   IndexError  a token id outside the vocabulary.
// Uniform samples are drawn by the caller (UniformSource below, or any other source), so a run
// is reproducible from its uniforms.
#ifndef KILN_LLM_SAMPLING_H_
#define KILN_LLM_SAMPLING_H_

#include <cstdint>
#include <random>
#include <span>

namespace kiln::llm {

// Greedy decoding: the index of the largest of `logits` (ties: the lowest index, as numpy's
// argmax). Note that sample_top_p_from_logits with a temperature below 1e-6 is TVM's greedy
// choice, which breaks ties by its sort order instead. ValueError when `logits` is empty or
// holds a NaN.
int64_t argmax(std::span<const float> logits);

// vm.builtin.apply_softmax_with_temperature: replaces `logits` (one row of the vocabulary) by
// softmax(logits / temperature), in place, with TVM's arithmetic (an online max and a float64
// normaliser; the running max starts at FLT_MIN, as TVM's does, so a row whose scaled logits are
// all negative is normalised against 0 rather than its max: below about -87 it loses precision
// exactly as in TVM, below about -104 every term is zero).
//   logits       the row; empty: ValueError; a NaN or +inf: ValueError.
//   temperature  > 0 and finite, else ValueError (TVM would write NaNs for 0).
// ValueError, with `logits` unchanged, when logits / temperature overflows float32 or every
// term underflows to zero (TVM would write NaNs).
void apply_softmax_with_temperature(std::span<float> logits, double temperature);

// vm.builtin.sample_top_p_from_logits: samples a token from softmax(logits / temperature)
// restricted to its top-p nucleus.
//   logits          one row of the vocabulary (at most 2^31 - 1 entries); empty or holding a
//                   NaN: ValueError. -inf entries are tokens of probability zero.
//   temperature     below 1e-6 (0 and negative values included, as in TVM): greedy, the first
//                   token of TVM's descending sort; else the softmax temperature. NaN or
//                   infinite: ValueError.
//   top_p           in (0, 1], else ValueError: the smallest prefix of the tokens sorted by
//                   probability whose mass reaches top_p is kept (the token that crosses it
//                   included).
//   uniform_sample  in [0, 1), else ValueError: the position in the kept mass.
// Returns the token id. ValueError when the distribution is undefined (every logit -inf, or a
// +inf logit when not greedy).
int64_t sample_top_p_from_logits(std::span<const float> logits, double temperature, double top_p,
                                 double uniform_sample);

// vm.builtin.sample_top_p_from_prob: samples a token from the top-p nucleus of `prob`. As in
// TVM, a sample below max(prob) / top_p takes the most probable token outright, which favours it
// slightly over sample_top_p_from_logits (that divides by the nucleus mass, not top_p).
//   prob            one row of probabilities (need not sum to exactly 1; at most 2^31 - 1
//                   entries); empty, or holding a NaN, a negative or an infinite value:
//                   ValueError (TVM skips NaNs and negatives). All zero: ValueError (TVM
//                   returns the last token of its sort).
//   top_p           in (0, 1], else ValueError.
//   uniform_sample  in [0, 1), else ValueError.
// Returns the token id.
int64_t sample_top_p_from_prob(std::span<const float> prob, double top_p, double uniform_sample);

// vm.builtin.multinomial_from_uniform for one row: the first index whose float32 running sum of
// `prob` exceeds `uniform_sample`, or the last index when none does (rounding).
//   prob            one row of probabilities; empty, or holding a NaN, a negative or an infinite
//                   value, or all zero: ValueError.
//   uniform_sample  in [0, 1), else ValueError.
int64_t multinomial_from_uniform(std::span<const float> prob, float uniform_sample);

// vm.builtin.apply_repetition_penalty: for each entry t of `token_ids` (repeats apply again, as
// in TVM), logits[t] is multiplied by `penalty` when it is <= 0 and divided by it otherwise, in
// float64, in place.
//   logits     one row of the vocabulary; empty or holding a NaN: ValueError.
//   token_ids  token ids; one outside [0, logits.size()): IndexError.
//   penalty    > 0 and finite, else ValueError.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> token_ids,
                              double penalty);

// vm.builtin.apply_presence_and_frequency_penalty: for each i, logits[token_ids[i]] -=
// token_freqs[i] * frequency_penalty + presence_penalty (in float64), in place.
//   logits             one row of the vocabulary; empty or holding a NaN: ValueError.
//   token_ids          token ids; one outside [0, logits.size()): IndexError.
//   token_freqs        how often each of token_ids appeared: as many as token_ids, each >= 1
//                      (TVM's documented contract), else ValueError.
//   presence_penalty   finite, else ValueError (OpenAI's range is [-2, 2]; not enforced).
//   frequency_penalty  finite, else ValueError.
void apply_presence_and_frequency_penalty(std::span<float> logits,
                                          std::span<const int32_t> token_ids,
                                          std::span<const int32_t> token_freqs,
                                          double presence_penalty, double frequency_penalty);

// A seeded source of uniform samples in [0, 1) for the functions above. It is NOT TVM's random
// number generator (MLC draws its uniforms elsewhere): the same seed gives the same sequence in
// every Kiln build on every platform (std::mt19937_64 is fully specified, and the conversion
// below takes the top bits of each draw instead of std::uniform_real_distribution, whose
// algorithm is left to the standard library). Not thread-safe; one per sequence.
class UniformSource {
 public:
  explicit UniformSource(uint64_t seed) : engine_(seed) {}
  // The next sample, a multiple of 2^-53 in [0, 1).
  double next() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // The next sample, a multiple of 2^-24 in [0, 1) (for multinomial_from_uniform).
  float next_float() { return static_cast<float>(engine_() >> 40) * 0x1.0p-24f; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace kiln::llm

#endif  // KILN_LLM_SAMPLING_H_
