// SPDX-License-Identifier: Apache-2.0
// Generated inputs: the checks on their parameters (shared by the parser, which reports them at
// the YAML key, and make_inputs) and the fill itself. Internal to libkiln.
#ifndef KILN_RUN_GENERATE_H_
#define KILN_RUN_GENERATE_H_

#include <optional>
#include <string>

#include "kiln/detail/run_config.h"
#include "kiln/tensor.h"

namespace kiln::run::detail {

// A problem with one field of an input: the YAML key it belongs to ("shape", "low", ...) and
// the bare message.
struct Problem {
  std::string key;
  std::string message;
};

// Checks a kGenerated input: a dtype with element access and lanes == 1, dimensions >= 0 and a
// byte size that fits in 64 bits; for kRandom finite low < high with at least one value of the
// dtype in [low, high) (integers: whole numbers within +-2^53 and the dtype's range); for
// kArange finite start and step whose values fit the dtype (integers: whole numbers within
// +-2^53). Returns the first problem, or nullopt.
std::optional<Problem> check_generated(const InputSpec& input);

// Fills `tensor` (a compact host tensor of the input's shape and dtype) as `input` says.
// `input` must pass check_generated.
void fill_generated(const InputSpec& input, Tensor& tensor);

}  // namespace kiln::run::detail

#endif  // KILN_RUN_GENERATE_H_
