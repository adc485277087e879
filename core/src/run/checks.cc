// SPDX-License-Identifier: Apache-2.0
// check_outputs and summarize: comparing results with numpy.allclose semantics, saving them,
// and describing tensors in one line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/detail/run_config.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/vm/virtual_machine.h"
#include "run/elements.h"

namespace kiln::run {
namespace {

namespace fs = std::filesystem;

// Mismatching elements listed in a summary line.
constexpr size_t kMaxListedMismatches = 5;

// "float32[2, 3]".
std::string type_and_shape(DataType dtype, std::span<const int64_t> shape) {
  return dtype.str() + detail::format_shape(shape);
}

// Numbers in summaries: six significant digits.
std::string short_number(double value) { return fmt::format("{:.6g}", value); }

// numpy.isclose(got, expected, rtol, atol, equal_nan=False) for one element.
bool is_close(double got, double expected, double rtol, double atol) {
  if (std::isnan(got) || std::isnan(expected)) return false;
  if (std::isinf(got) || std::isinf(expected)) return got == expected;
  return std::fabs(got - expected) <= atol + rtol * std::fabs(expected);
}

// Compares `got` with `expected` (same dtype and shape, compact, on the host) and returns the
// summary line's text after "<name>: ", and whether every element matched.
std::pair<bool, std::string> compare(const Tensor& got, const NpyArray& expected,
                                     const OutputSpec& output) {
  const DataType dtype = got.dtype();
  const int64_t count = got.numel() * dtype.lanes;
  const void* got_data = got.data();
  const void* expected_data = expected.data.data();
  // Lanes of a vector type are compared one by one; positions then count lanes.
  std::vector<int64_t> shape(got.shape().begin(), got.shape().end());
  if (dtype.lanes != 1) shape.push_back(dtype.lanes);

  int64_t mismatches = 0;
  double max_abs = -1;
  double max_rel = -1;
  int64_t max_abs_at = 0;
  int64_t max_rel_at = 0;
  double max_abs_all = 0;  // over every element, for the passing line
  std::vector<int64_t> listed;
  for (int64_t i = 0; i < count; ++i) {
    const double g = detail::load_element(got_data, dtype, i);
    const double e = detail::load_element(expected_data, dtype, i);
    const double diff = std::fabs(g - e);
    if (is_close(g, e, output.rtol, output.atol)) {
      if (diff > max_abs_all) max_abs_all = diff;
      continue;
    }
    ++mismatches;
    if (listed.size() < kMaxListedMismatches) listed.push_back(i);
    if (std::isnan(diff)) continue;
    if (diff > max_abs) {
      max_abs = diff;
      max_abs_at = i;
    }
    const double rel = e == 0 ? std::numeric_limits<double>::infinity() : diff / std::fabs(e);
    if (rel > max_rel) {
      max_rel = rel;
      max_rel_at = i;
    }
  }
  const std::string from = fmt::format("'{}'", output.expected->string());
  if (mismatches == 0) {
    return {true, fmt::format("ok ({} element{} match {} within rtol={} atol={}; max abs diff {})",
                              count, count == 1 ? "" : "s", from, short_number(output.rtol),
                              short_number(output.atol), short_number(max_abs_all))};
  }
  std::string text =
      fmt::format("{} of {} element{} differ", mismatches, count, count == 1 ? "" : "s");
  if (max_abs >= 0) {
    text += fmt::format(" (max abs diff {} at {}, max rel diff {} at {})", short_number(max_abs),
                        detail::format_index(shape, max_abs_at), short_number(max_rel),
                        detail::format_index(shape, max_rel_at));
  } else {
    text += " (every mismatch involves NaN)";
  }
  text += "; first mismatches: ";
  for (size_t k = 0; k < listed.size(); ++k) {
    if (k > 0) text += ", ";
    text += fmt::format("{} got {} expected {}", detail::format_index(shape, listed[k]),
                        detail::format_element(got_data, dtype, listed[k]),
                        detail::format_element(expected_data, dtype, listed[k]));
  }
  if (mismatches > static_cast<int64_t>(listed.size())) text += ", ...";
  text += fmt::format("; compared with {} at rtol={} atol={}", from, short_number(output.rtol),
                      short_number(output.atol));
  return {false, text};
}

// Checks one output; appends its lines to `lines` and returns whether it passed.
bool check_one(const OutputSpec& output, const Any& value, std::vector<std::string>* lines) {
  const std::string& name = output.name;
  if (value.type_code() != KILN_TYPE_TENSOR) {
    lines->push_back(
        fmt::format("{}: expected a tensor, got {} {}", name, value.type_name(), value.str()));
    return false;
  }
  Tensor got;
  try {
    got = value.cast<Tensor>();
    if (got.device().type != kDLCPU) got = got.to_host();
  } catch (const Error& e) {
    lines->push_back(fmt::format("{}: cannot read the tensor: {}", name, e.what()));
    return false;
  }
  bool ok = true;
  if (output.expected) {
    const std::string from = output.expected->string();
    try {
      const NpyArray expected = read_npy(*output.expected);
      const bool same_shape = std::equal(got.shape().begin(), got.shape().end(),
                                         expected.shape.begin(), expected.shape.end());
      const bool same_dtype = got.dtype() == expected.dtype;
      if (!same_shape && !same_dtype) {
        lines->push_back(
            fmt::format("{}: shape and dtype mismatch: got {}, expected {} (from "
                        "'{}')",
                        name, type_and_shape(got.dtype(), got.shape()),
                        type_and_shape(expected.dtype, expected.shape), from));
        ok = false;
      } else if (!same_shape) {
        lines->push_back(fmt::format("{}: shape mismatch: got {}, expected {} (from '{}')", name,
                                     detail::format_shape(got.shape()),
                                     detail::format_shape(expected.shape), from));
        ok = false;
      } else if (!same_dtype) {
        lines->push_back(fmt::format("{}: dtype mismatch: got {}, expected {} (from '{}')", name,
                                     got.dtype().str(), expected.dtype.str(), from));
        ok = false;
      } else if (!got.is_contiguous()) {
        lines->push_back(fmt::format("{}: cannot compare a non-contiguous tensor", name));
        ok = false;
      } else {
        auto [passed, text] = compare(got, expected, output);
        lines->push_back(name + ": " + text);
        ok = passed;
      }
    } catch (const Error& e) {
      lines->push_back(fmt::format("{}: cannot read the expected values: {}", name, e.what()));
      ok = false;
    }
  }
  if (output.save) {
    try {
      const fs::path parent = output.save->parent_path();
      if (!parent.empty()) fs::create_directories(parent);
      got.save_npy(*output.save);
      lines->push_back(fmt::format("{}: saved {} to '{}'", name,
                                   type_and_shape(got.dtype(), got.shape()),
                                   output.save->string()));
    } catch (const std::exception& e) {  // kiln::Error and std::filesystem::filesystem_error
      lines->push_back(
          fmt::format("{}: cannot save to '{}': {}", name, output.save->string(), e.what()));
      ok = false;
    }
  }
  return ok;
}

// `path` with ".<index>" before its extension: the file of a tuple's element.
fs::path element_file(const fs::path& path, size_t index) {
  return path.parent_path() /
         fmt::format("{}.{}{}", path.stem().string(), index, path.extension().string());
}

// A scalar as a 0-d host tensor (int64, float64 or bool), so that it is compared and saved by
// the code that compares and saves tensors.
Tensor scalar_tensor(const Any& value) {
  switch (value.type_code()) {
    case KILN_TYPE_INT: {
      Tensor t = Tensor::empty_host({}, DataType::Int(64));
      *static_cast<int64_t*>(t.data()) = value.cast<int64_t>();
      return t;
    }
    case KILN_TYPE_FLOAT: {
      Tensor t = Tensor::empty_host({}, DataType::Float(64));
      *static_cast<double*>(t.data()) = value.cast<double>();
      return t;
    }
    default: {
      Tensor t = Tensor::empty_host({}, DataType::Bool());
      *static_cast<uint8_t*>(t.data()) = value.cast<bool>() ? 1 : 0;
      return t;
    }
  }
}

bool is_scalar(const Any& value) {
  const int32_t code = value.type_code();
  return code == KILN_TYPE_INT || code == KILN_TYPE_FLOAT || code == KILN_TYPE_BOOL;
}

// A scalar (int, float or bool) as a double, for is_close: true is 1.
double scalar_double(const Any& value) {
  switch (value.type_code()) {
    case KILN_TYPE_FLOAT:
      return value.cast<double>();
    case KILN_TYPE_INT:
      return static_cast<double>(value.cast<int64_t>());
    default:
      return value.cast<bool>() ? 1.0 : 0.0;
  }
}

// The value as its text in a summary: 3, 0.5, true.
std::string scalar_text(const Any& value) {
  switch (value.type_code()) {
    case KILN_TYPE_INT:
      return std::to_string(value.cast<int64_t>());
    case KILN_TYPE_FLOAT:
      return fmt::format("{}", value.cast<double>());
    default:
      return value.cast<bool>() ? "true" : "false";
  }
}

// Checks `value` (the returned value or one of its elements, named `name`) against `check`'s
// expected file or value and saves it; tuples element by element. Appends summary lines.
bool check_returned(const ResultSpec& check, const std::string& name,
                    const std::optional<fs::path>& expected, const std::optional<fs::path>& save,
                    const Any& value, std::vector<std::string>* lines) {
  if (Ref<vm::ArrayObj> tuple = value.as_object<vm::ArrayObj>()) {
    if (check.value) {
      lines->push_back(fmt::format("{}: is a tuple of {} elements; 'value' checks a scalar", name,
                                   tuple->items.size()));
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < tuple->items.size(); ++i) {
      std::optional<fs::path> element_expected, element_save;
      if (expected) element_expected = element_file(*expected, i);
      if (save) element_save = element_file(*save, i);
      ok = check_returned(check, fmt::format("{}[{}]", name, i), element_expected, element_save,
                          tuple->items[i], lines) &&
           ok;
    }
    return ok;
  }
  bool ok = true;
  Any checked = value;
  if (is_scalar(value)) {
    if (check.value) {
      // numpy.isclose semantics as for tensors; an int64 or bool value compares exactly at the
      // default tolerances up to 2^53.
      const bool close =
          is_close(scalar_double(value), scalar_double(*check.value), check.rtol, check.atol);
      lines->push_back(fmt::format("{}: {} (got {}, expected {}{} rtol={} atol={})", name,
                                   close ? "ok" : "differs", scalar_text(value),
                                   scalar_text(*check.value), close ? " within" : " at",
                                   short_number(check.rtol), short_number(check.atol)));
      ok = close;
    }
    if (!expected && !save) return ok;
    checked = Any(scalar_tensor(value));
  } else if (check.value) {
    lines->push_back(fmt::format("{}: expected a scalar for 'value', got {} {}", name,
                                 value.type_name(), value.str()));
    return false;
  } else if (value.type_code() != KILN_TYPE_TENSOR) {
    lines->push_back(
        fmt::format("{}: the function returned {} {}: only tensors, scalars and tuples "
                    "of them can be checked or saved",
                    name, value.type_name(), value.str()));
    return false;
  }
  OutputSpec output;
  output.name = name;
  output.expected = expected;
  output.save = save;
  output.rtol = check.rtol;
  output.atol = check.atol;
  return check_one(output, checked, lines) && ok;
}

void collect_leaves(const Any& value, const std::string& name,
                    std::vector<std::pair<std::string, Any>>* out) {
  if (Ref<vm::ArrayObj> tuple = value.as_object<vm::ArrayObj>()) {
    for (size_t i = 0; i < tuple->items.size(); ++i) {
      collect_leaves(tuple->items[i], fmt::format("{}[{}]", name, i), out);
    }
    return;
  }
  out->emplace_back(name, value);
}

}  // namespace

CheckResult check_result(const RunSpec& spec, const Any& value) {
  CheckResult result;
  std::vector<std::string> lines;
  for (const ResultSpec& check : spec.result) {
    // Down the element path; each step must index a tuple within its range.
    Any current = value;
    std::string name = "result";
    bool found = true;
    for (int32_t index : check.element) {
      Ref<vm::ArrayObj> tuple = current.as_object<vm::ArrayObj>();
      if (!tuple) {
        lines.push_back(fmt::format("{}: {} is {}, not a tuple", check.name, name,
                                    current.type_code() == KILN_TYPE_NONE
                                        ? std::string("none (the function returned nothing)")
                                        : fmt::format("a {}", current.type_name())));
        found = false;
        break;
      }
      if (static_cast<size_t>(index) >= tuple->items.size()) {
        lines.push_back(fmt::format("{}: {} has {} element{}, no element {}", check.name, name,
                                    tuple->items.size(), tuple->items.size() == 1 ? "" : "s",
                                    index));
        found = false;
        break;
      }
      current = tuple->items[static_cast<size_t>(index)];
      name += fmt::format("[{}]", index);
    }
    if (!found || !check_returned(check, check.name, check.expected, check.save, current, &lines)) {
      result.ok = false;
    }
  }
  result.summary = fmt::format("{}", fmt::join(lines, "\n"));
  return result;
}

std::vector<std::pair<std::string, Any>> result_leaves(const Any& value) {
  std::vector<std::pair<std::string, Any>> out;
  if (value.type_code() != KILN_TYPE_NONE) collect_leaves(value, "result", &out);
  return out;
}

CheckResult check_outputs(const RunSpec& spec, const std::vector<Any>& outputs) {
  if (outputs.size() != spec.inputs.size()) {
    throw ValueError(fmt::format("check_outputs: {} values given for a run with {} inputs",
                                 outputs.size(), spec.inputs.size()));
  }
  CheckResult result;
  std::vector<std::string> lines;
  for (const OutputSpec& output : spec.outputs) {
    if (output.index < 0 || static_cast<size_t>(output.index) >= outputs.size()) {
      throw ValueError(fmt::format("check_outputs: output '{}' has index {}, outside 0..{}",
                                   output.name, output.index, outputs.size() - 1));
    }
    if (!check_one(output, outputs[static_cast<size_t>(output.index)], &lines)) {
      result.ok = false;
    }
  }
  result.summary = fmt::format("{}", fmt::join(lines, "\n"));
  return result;
}

std::string summarize(const Tensor& host_tensor, size_t max_values) {
  if (!host_tensor.defined()) return "undefined";
  const Tensor tensor = host_tensor.device().type == kDLCPU ? host_tensor : host_tensor.to_host();
  const DataType dtype = tensor.dtype();
  std::string out = type_and_shape(dtype, tensor.shape());
  if (!detail::has_element_access(dtype) || !tensor.is_contiguous()) return out;
  const int64_t count = tensor.numel() * dtype.lanes;
  if (count == 0) return out + " (empty)";
  const void* data = tensor.data();

  int64_t nans = 0;
  int64_t min_at = -1;
  int64_t max_at = -1;
  double min_value = 0;
  double max_value = 0;
  long double sum = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double v = detail::load_element(data, dtype, i);
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    if (min_at < 0 || v < min_value) {
      min_value = v;
      min_at = i;
    }
    if (max_at < 0 || v > max_value) {
      max_value = v;
      max_at = i;
    }
    sum += v;
  }
  if (min_at >= 0) {
    const auto mean = static_cast<double>(sum / static_cast<long double>(count - nans));
    out += fmt::format(" min={} max={} mean={}", detail::format_element(data, dtype, min_at),
                       detail::format_element(data, dtype, max_at), short_number(mean));
  }
  if (nans > 0) out += fmt::format(" nan={}", nans);
  out += " first=[";
  const int64_t shown = std::min<int64_t>(count, static_cast<int64_t>(max_values));
  for (int64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += detail::format_element(data, dtype, i);
  }
  if (shown < count)
    out += shown > 0 ? ", ...]" : "...]";
  else
    out += "]";
  return out;
}

}  // namespace kiln::run
