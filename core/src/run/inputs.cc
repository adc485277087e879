// SPDX-License-Identifier: Apache-2.0
// make_inputs and the generated inputs: zeros, ones, seeded uniform random values and aranges.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kiln/detail/run_config.h"
#include "kiln/error.h"
#include "run/elements.h"
#include "run/generate.h"

namespace kiln::run {
namespace detail {
namespace {

// Integers up to this magnitude are exact in a double.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

bool is_whole(double value) { return std::isfinite(value) && std::trunc(value) == value; }

// A problem unless `value` is a whole number within +-2^53 and the dtype's range.
std::optional<Problem> check_integer(const std::string& key, double value, DataType dtype,
                                     double low_bound, double high_bound) {
  if (!is_whole(value)) {
    return Problem{key,
                   fmt::format("must be a whole number for dtype {}, got {}", dtype.str(), value)};
  }
  if (std::fabs(value) > kMaxExactInteger) {
    return Problem{key, fmt::format("must be within +-2^53 (exact in a double), got {}", value)};
  }
  if (value < low_bound || value > high_bound) {
    return Problem{key, fmt::format("{} is outside the range [{}, {}] of dtype {}", value,
                                    low_bound, high_bound, dtype.str())};
  }
  return std::nullopt;
}

// The first value of a float dtype in [low, +inf) and the last one in (-inf, high).
std::pair<double, double> float_range(DataType dtype, double low, double high) {
  double first = round_to(dtype, low);
  if (first < low) first = next_up(dtype, first);
  double last = round_to(dtype, high);
  if (last >= high) last = next_down(dtype, last);
  return {first, last};
}

std::optional<Problem> check_random(const InputSpec& input) {
  const DataType dtype = input.dtype;
  if (!std::isfinite(input.low)) {
    return Problem{"low", fmt::format("must be a finite number, got {}", input.low)};
  }
  if (!std::isfinite(input.high)) {
    return Problem{"high", fmt::format("must be a finite number, got {}", input.high)};
  }
  if (!(input.high > input.low)) {
    return Problem{"high", fmt::format("must be greater than low ({}), got {}: the range is "
                                       "[low, high)",
                                       input.low, input.high)};
  }
  if (is_integral(dtype)) {
    const double lowest = lowest_value(dtype);
    const double highest = std::min(highest_value(dtype), kMaxExactInteger);
    if (auto p = check_integer("low", input.low, dtype, lowest, highest)) return p;
    // high is exclusive: it may be one more than the dtype's largest value.
    if (auto p = check_integer("high", input.high, dtype, lowest + 1, highest + 1)) return p;
    return std::nullopt;
  }
  if (!std::isfinite(input.high - input.low)) {
    return Problem{"high", fmt::format("high - low overflows ({} - {})", input.high, input.low)};
  }
  auto [first, last] = float_range(dtype, input.low, input.high);
  if (!(first < input.high) || !(first <= last)) {
    return Problem{"high",
                   fmt::format("no {} value lies in [{}, {})", dtype.str(), input.low, input.high)};
  }
  return std::nullopt;
}

std::optional<Problem> check_arange(const InputSpec& input, int64_t numel) {
  const DataType dtype = input.dtype;
  if (!std::isfinite(input.start)) {
    return Problem{"start", fmt::format("must be a finite number, got {}", input.start)};
  }
  if (!std::isfinite(input.step)) {
    return Problem{"step", fmt::format("must be a finite number, got {}", input.step)};
  }
  if (numel == 0) return std::nullopt;
  const double last = input.start + static_cast<double>(numel - 1) * input.step;
  if (is_integral(dtype)) {
    const double lowest = std::max(lowest_value(dtype), -kMaxExactInteger);
    const double highest = std::min(highest_value(dtype), kMaxExactInteger);
    if (auto p = check_integer("start", input.start, dtype, lowest, highest)) return p;
    if (!is_whole(input.step)) {
      return Problem{"step", fmt::format("must be a whole number for dtype {}, got {}", dtype.str(),
                                         input.step)};
    }
    if (!(last >= lowest && last <= highest)) {
      return Problem{"step", fmt::format("the last value, start + {} * step = {}, is outside the "
                                         "range [{}, {}] of dtype {}",
                                         numel - 1, last, lowest, highest, dtype.str())};
    }
    return std::nullopt;
  }
  if (!std::isfinite(round_to(dtype, input.start))) {
    return Problem{"start", fmt::format("{} overflows dtype {}", input.start, dtype.str())};
  }
  if (!std::isfinite(round_to(dtype, last))) {
    return Problem{"step", fmt::format("the last value, start + {} * step = {}, overflows dtype {}",
                                       numel - 1, last, dtype.str())};
  }
  return std::nullopt;
}

void fill_random(const InputSpec& input, Tensor& tensor) {
  std::mt19937_64 engine(input.seed);
  const DataType dtype = input.dtype;
  const int64_t n = tensor.numel();
  void* data = tensor.data();
  if (is_integral(dtype)) {
    // Unbiased integers in [low, high): reject the draws below 2^64 mod span, then take the
    // remainder (the same mapping on every platform, unlike std::uniform_int_distribution).
    const auto low = static_cast<int64_t>(input.low);
    const auto span = static_cast<uint64_t>(static_cast<int64_t>(input.high) - low);
    const uint64_t threshold = (uint64_t{0} - span) % span;
    for (int64_t i = 0; i < n; ++i) {
      uint64_t draw = engine();
      while (draw < threshold) draw = engine();
      store_integer(data, dtype, i, low + static_cast<int64_t>(draw % span));
    }
    return;
  }
  // Doubles in [0, 1) from the top 53 bits of each draw, scaled to [low, high), rounded to the
  // dtype and clamped to its values inside the range.
  const double width = input.high - input.low;
  auto [first, last] = float_range(dtype, input.low, input.high);
  for (int64_t i = 0; i < n; ++i) {
    const double unit = static_cast<double>(engine() >> 11) * 0x1p-53;
    double value = round_to(dtype, input.low + width * unit);
    if (value < first) value = first;
    if (value > last) value = last;
    store_element(data, dtype, i, value);
  }
}

void fill_arange(const InputSpec& input, Tensor& tensor) {
  const DataType dtype = input.dtype;
  const int64_t n = tensor.numel();
  void* data = tensor.data();
  if (is_integral(dtype)) {
    const auto start = static_cast<int64_t>(input.start);
    const auto step = static_cast<int64_t>(input.step);
    for (int64_t i = 0; i < n; ++i) store_integer(data, dtype, i, start + i * step);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    store_element(data, dtype, i, input.start + static_cast<double>(i) * input.step);
  }
}

}  // namespace

std::optional<Problem> check_generated(const InputSpec& input) {
  const DataType dtype = input.dtype;
  if (!has_element_access(dtype) || dtype.lanes != 1) {
    return Problem{"dtype", fmt::format("cannot generate elements of dtype {}: supported are "
                                        "bool, int8..int64, uint8..uint64, float16, bfloat16, "
                                        "float32 and float64 (no vector types)",
                                        dtype.str())};
  }
  int64_t numel = 1;
  const auto max_elements =
      std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dtype.bytes());
  for (int64_t dim : input.shape) {
    if (dim < 0) {
      return Problem{"shape",
                     fmt::format("dimensions must be >= 0, got {}", format_shape(input.shape))};
    }
    if (dim != 0 && numel > max_elements / dim) {
      return Problem{"shape",
                     fmt::format("shape {} has too many elements", format_shape(input.shape))};
    }
    numel *= dim;
  }
  switch (input.init) {
    case InputSpec::Init::kRandom:
      return check_random(input);
    case InputSpec::Init::kArange:
      return check_arange(input, numel);
    case InputSpec::Init::kZeros:
    case InputSpec::Init::kOnes:
      break;
  }
  return std::nullopt;
}

void fill_generated(const InputSpec& input, Tensor& tensor) {
  switch (input.init) {
    case InputSpec::Init::kZeros:
      if (tensor.nbytes() > 0) std::memset(tensor.data(), 0, tensor.nbytes());
      return;
    case InputSpec::Init::kOnes: {
      const int64_t n = tensor.numel();
      for (int64_t i = 0; i < n; ++i) store_element(tensor.data(), input.dtype, i, 1.0);
      return;
    }
    case InputSpec::Init::kRandom:
      return fill_random(input, tensor);
    case InputSpec::Init::kArange:
      return fill_arange(input, tensor);
  }
}

}  // namespace detail

std::vector<Any> make_inputs(const RunSpec& spec) {
  std::vector<Any> args;
  args.reserve(spec.inputs.size());
  for (const InputSpec& input : spec.inputs) {
    switch (input.kind) {
      case InputSpec::Kind::kScalar:
        args.push_back(input.scalar);
        break;
      case InputSpec::Kind::kNpy:
        args.emplace_back(Tensor::load_npy(input.npy));
        break;
      case InputSpec::Kind::kGenerated: {
        if (auto problem = detail::check_generated(input)) {
          throw ValueError(
              fmt::format("input '{}': {}: {}", input.name, problem->key, problem->message));
        }
        Tensor tensor = Tensor::empty_host(input.shape, input.dtype);
        detail::fill_generated(input, tensor);
        args.emplace_back(tensor);
        break;
      }
    }
  }
  return args;
}

}  // namespace kiln::run
