// SPDX-License-Identifier: Apache-2.0
// parse_run_config: the YAML of `kiln run` into a RunSpec, with every error at its key.
#include "kiln/detail/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <system_error>

#include "config/yaml_reader.h"
#include "kiln/config_error.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/npy.h"
#include "kiln/rpc/rpc_config.h"
#include "run/elements.h"
#include "run/generate.h"
#include "run/parse.h"

namespace kiln::run {
namespace {

namespace fs = std::filesystem;
using config::MapReader;

constexpr std::string_view kExamplesVariable = "${KILN_EXAMPLES}";

const std::vector<std::string> kTopKeys = {"module",    "function", "device",     "export",
                                           "evaluator", "inputs",   "outputs",    "result",
                                           "profile",   "remote",   "throughput", "sweep"};
const std::vector<std::string> kEvaluatorKeys = {"number",
                                                 "repeat",
                                                 "min_repeat_ms",
                                                 "enable_cpu_cache_flush",
                                                 "f_preproc",
                                                 "limit_zero_time_iterations",
                                                 "cooldown_interval_ms",
                                                 "repeats_to_cooldown",
                                                 "cache_flush_bytes",
                                                 "keep_raw_samples",
                                                 "noise"};
const std::vector<std::string> kNoiseKeys = {"enabled",        "target_rse",       "min_repeats",
                                             "min_time_s",     "timeout_s",        "max_repeats",
                                             "plateau_window", "plateau_tolerance"};
const std::vector<std::string> kInputKeys = {"name", "npy",  "shape", "dtype", "init",  "seed",
                                             "low",  "high", "start", "step",  "scalar"};
const std::vector<std::string> kOutputKeys = {"index", "name", "save", "expected", "rtol", "atol"};
const std::vector<std::string> kResultKeys = {"element", "save", "expected",
                                              "value",   "rtol", "atol"};
const std::vector<std::string> kInitNames = {"zeros", "ones", "random", "arange"};

// "a, b, c".
std::string join(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

// Expands ${KILN_EXAMPLES} in `text` (the value of `key`) and resolves the result against
// `base_dir`. Any other "${" is an error: only this variable is expanded.
fs::path resolve_path(const MapReader& reader, const std::string& key, const std::string& text,
                      const fs::path& base_dir) {
  if (text.empty()) throw reader.error(key, "expected a path, got an empty string");
  std::string expanded;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t var = text.find("${", pos);
    if (var == std::string::npos) {
      expanded += text.substr(pos);
      break;
    }
    expanded += text.substr(pos, var - pos);
    if (text.compare(var, kExamplesVariable.size(), kExamplesVariable) != 0) {
      const size_t end = text.find('}', var);
      throw reader.error(
          key, fmt::format("unknown variable '{}' in '{}': only ${{KILN_EXAMPLES}} is expanded",
                           text.substr(var, end == std::string::npos ? 2 : end - var + 1), text));
    }
    expanded += examples_dir().string();
    pos = var + kExamplesVariable.size();
  }
  fs::path path(expanded);
  if (path.is_relative()) path = base_dir / path;
  return path.lexically_normal();
}

// Throws ConfigError at `key` unless `path` (resolved from `text`) is an existing file.
void require_file(const MapReader& reader, const std::string& key, const fs::path& path,
                  const std::string& text, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  std::string from;
  if (text != path.string()) {
    from = fmt::format(" (from '{}'", text);
    if (text.find(kExamplesVariable) != std::string::npos) {
      const char* env = std::getenv("KILN_EXAMPLES");
      from += env != nullptr && *env != '\0'
                  ? fmt::format(", KILN_EXAMPLES='{}'", env)
                  : fmt::format(", KILN_EXAMPLES unset: the default '{}'", examples_dir().string());
    }
    from += ")";
  }
  if (!fs::exists(status)) {
    throw reader.error(key, fmt::format("{} not found: '{}'{}", what, path.string(), from));
  }
  if (fs::is_directory(status)) {
    throw reader.error(key, fmt::format("{} '{}' is a directory{}", what, path.string(), from));
  }
}

// The value of the optional `key` (fallback when absent), which must be >= `min`.
template <typename T>
T at_least(MapReader& reader, const std::string& key, T fallback, T min) {
  const T value = reader.optional<T>(key, fallback);
  if (value < min) throw reader.error(key, fmt::format("must be >= {}, got {}", min, value));
  return value;
}

// A non-negative double (NaN rejected), or `fallback`.
double non_negative(MapReader& reader, const std::string& key, double fallback) {
  const double value = reader.optional<double>(key, fallback);
  if (!(value >= 0)) throw reader.error(key, fmt::format("must be >= 0, got {}", value));
  return value;
}

// A double > 0 (NaN rejected), or `fallback`.
double positive(MapReader& reader, const std::string& key, double fallback) {
  const double value = reader.optional<double>(key, fallback);
  if (!(value > 0)) throw reader.error(key, fmt::format("must be > 0, got {}", value));
  return value;
}

// A string that must not be empty when given.
std::string non_empty_string(MapReader& reader, const std::string& key, const std::string& fallback,
                             const std::string& hint) {
  std::string value = reader.optional<std::string>(key, fallback);
  if (value.empty()) throw reader.error(key, "must not be empty" + hint);
  return value;
}

DataType parse_dtype(MapReader& reader, const std::string& key) {
  const std::string text = reader.required<std::string>(key);
  try {
    return DataType::parse(text);
  } catch (const ValueError& e) {
    throw reader.error(key, e.what());
  }
}

void parse_noise(MapReader& reader, NoiseStoppingRule* noise) {
  reader.allow_keys(kNoiseKeys);
  reader.reject_unknown_keys();
  noise->enabled = reader.optional<bool>("enabled", noise->enabled);
  noise->target_rse = positive(reader, "target_rse", noise->target_rse);
  noise->min_repeats = at_least<int32_t>(reader, "min_repeats", noise->min_repeats, 2);
  noise->min_time_s = non_negative(reader, "min_time_s", noise->min_time_s);
  noise->timeout_s = positive(reader, "timeout_s", noise->timeout_s);
  noise->max_repeats = reader.optional<int32_t>("max_repeats", noise->max_repeats);
  if (noise->max_repeats < noise->min_repeats) {
    const std::string key = reader.contains("max_repeats") ? "max_repeats" : "min_repeats";
    throw reader.error(key, fmt::format("max_repeats ({}) must be >= min_repeats ({})",
                                        noise->max_repeats, noise->min_repeats));
  }
  noise->plateau_window = at_least<int32_t>(reader, "plateau_window", noise->plateau_window, 2);
  noise->plateau_tolerance = non_negative(reader, "plateau_tolerance", noise->plateau_tolerance);
}

// A count per call (bytes, flops): a finite number >= 0.
double count_per_call(MapReader& reader, const std::string& key, const std::string& what) {
  double value = 0;
  try {
    value = reader.required<double>(key);
  } catch (const ConfigError&) {
    throw reader.error(
        key, fmt::format("expected {}, got {}", what, config::describe_node(*reader.node(key))));
  }
  if (!(value >= 0) || !std::isfinite(value)) {
    throw reader.error(key, fmt::format("must be a finite number >= 0, got {}", value));
  }
  return value;
}

ThroughputSpec parse_throughput(MapReader& reader) {
  reader.allow_keys({"bytes", "flops"});
  reader.reject_unknown_keys();
  ThroughputSpec t;
  if (std::optional<YAML::Node> bytes = reader.node("bytes"); bytes && !bytes->IsNull()) {
    if (!(bytes->IsScalar() && bytes->Scalar() == "auto")) {
      t.bytes = count_per_call(reader, "bytes", "a number of bytes per call or 'auto'");
    }
  }
  if (std::optional<YAML::Node> flops = reader.node("flops"); flops && !flops->IsNull()) {
    t.flops = count_per_call(reader, "flops", "a number of floating-point operations per call");
  }
  return t;
}

// Both of the spec's evaluator settings (RunSpec::evaluator and RunSpec::extra) from the
// `evaluator:` section, or their defaults without one.
void parse_evaluator(std::optional<MapReader> section, RunSpec* spec) {
  if (!section) {
    spec->extra = spec->evaluator.to_options();
    return;
  }
  MapReader& reader = *section;
  reader.allow_keys(kEvaluatorKeys);
  reader.reject_unknown_keys();
  EvaluatorConfig& config = spec->evaluator;
  config.number = at_least<int32_t>(reader, "number", config.number, 1);
  config.repeat = at_least<int32_t>(reader, "repeat", config.repeat, 1);
  config.min_repeat_ms = at_least<int32_t>(reader, "min_repeat_ms", config.min_repeat_ms, 0);
  config.enable_cpu_cache_flush =
      reader.optional<bool>("enable_cpu_cache_flush", config.enable_cpu_cache_flush);

  TimeEvaluatorOptions extra = config.to_options();
  extra.limit_zero_time_iterations =
      at_least<int32_t>(reader, "limit_zero_time_iterations", extra.limit_zero_time_iterations, 1);
  extra.cooldown_interval_ms =
      at_least<int32_t>(reader, "cooldown_interval_ms", extra.cooldown_interval_ms, 0);
  extra.repeats_to_cooldown =
      at_least<int32_t>(reader, "repeats_to_cooldown", extra.repeats_to_cooldown, 1);
  extra.cache_flush_bytes =
      at_least<int64_t>(reader, "cache_flush_bytes", extra.cache_flush_bytes, 0);
  extra.keep_raw_samples = reader.optional<bool>("keep_raw_samples", extra.keep_raw_samples);
  if (reader.contains("f_preproc")) {
    // A registered global function called before each repeat (docs/evaluator.md), e.g.
    // cache_flush_device_l2. enable_cpu_cache_flush is the other way to choose one.
    if (config.enable_cpu_cache_flush) {
      throw reader.error("f_preproc",
                         "cannot be combined with enable_cpu_cache_flush: true (which selects "
                         "f_preproc: cache_flush_cpu_non_first_arg)");
    }
    extra.f_preproc = non_empty_string(reader, "f_preproc", "", "");
    if (!registry::get(extra.f_preproc)) {
      throw reader.error("f_preproc",
                         fmt::format("'{}' is not a registered global function", extra.f_preproc));
    }
  }
  if (std::optional<MapReader> noise = reader.optional_map("noise")) {
    parse_noise(*noise, &extra.noise);
  }
  try {
    extra.validate();  // the evaluator's own rules, in case they are stricter than ours
  } catch (const ValueError& e) {
    throw config::error_at(reader.yaml(), reader.file(), reader.key_path(), e.what());
  }
  spec->extra = std::move(extra);
}

InputSpec::Init parse_init(MapReader& reader) {
  const std::string text = reader.optional<std::string>("init", "zeros");
  if (text == "zeros") return InputSpec::Init::kZeros;
  if (text == "ones") return InputSpec::Init::kOnes;
  if (text == "random") return InputSpec::Init::kRandom;
  if (text == "arange") return InputSpec::Init::kArange;
  std::string message = fmt::format("unknown init '{}'", text);
  if (auto suggestion = config::closest_match(text, kInitNames)) {
    message += fmt::format(" (did you mean '{}'?)", *suggestion);
  }
  throw reader.error("init", message + "; expected one of " + join(kInitNames));
}

// Throws at the first present key of `keys`: it does not apply to this kind of input.
void reject_keys(const MapReader& reader, const std::vector<std::string>& keys,
                 const std::string& why) {
  for (const std::string& key : keys) {
    if (reader.contains(key)) throw reader.error(key, fmt::format("'{}' {}", key, why));
  }
}

// The shape under "shape", each dimension checked at its own position.
std::vector<int64_t> parse_shape(MapReader& reader) {
  std::vector<int64_t> shape = reader.required<std::vector<int64_t>>("shape");
  const YAML::Node node = reader.required_node("shape");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      throw config::error_at(node[i], reader.file(),
                             config::index_key_path(reader.child_path("shape"), i),
                             fmt::format("dimensions must be >= 0, got {}", shape[i]));
    }
  }
  return shape;
}

void parse_scalar(MapReader& reader, InputSpec* input) {
  const YAML::Node node = reader.required_node("scalar");
  const std::string key_path = reader.child_path("scalar");
  auto decode = [&](auto* out) {
    if (node.IsNull()) throw reader.error("scalar", "expected a number or a boolean, got null");
    *out = config::value_as<std::decay_t<decltype(*out)>>(node, reader.file(), key_path);
  };
  if (reader.contains("dtype")) {
    const DataType dtype = parse_dtype(reader, "dtype");
    if (dtype == DataType::Int(64)) {
      int64_t value = 0;
      decode(&value);
      input->scalar = value;
    } else if (dtype == DataType::Float(64)) {
      double value = 0;
      decode(&value);
      input->scalar = value;
    } else if (dtype == DataType::Bool()) {
      bool value = false;
      decode(&value);
      input->scalar = value;
    } else {
      throw reader.error("dtype", fmt::format("a scalar's dtype must be int64, float64 or bool, "
                                              "got {}",
                                              dtype.str()));
    }
    input->dtype = dtype;
    return;
  }
  // Inferred from the text: an integer, else a number, else a boolean; quoted text is a string.
  if (!node.IsScalar() || node.Tag() == "!") {
    const std::string got = node.IsScalar() ? "the quoted string " + config::describe_node(node)
                                            : config::describe_node(node);
    throw reader.error("scalar", "expected a number or a boolean, got " + got);
  }
  int64_t int_value = 0;
  double double_value = 0;
  bool bool_value = false;
  auto try_decode = [&](auto* out) {
    try {
      decode(out);
      return true;
    } catch (const ConfigError&) {
      return false;
    }
  };
  if (try_decode(&int_value)) {
    input->scalar = int_value;
    input->dtype = DataType::Int(64);
  } else if (try_decode(&double_value)) {
    input->scalar = double_value;
    input->dtype = DataType::Float(64);
  } else if (try_decode(&bool_value)) {
    input->scalar = bool_value;
    input->dtype = DataType::Bool();
  } else {
    throw reader.error("scalar", "expected an integer, a number or a boolean (true / false), got " +
                                     config::describe_node(node));
  }
}

void parse_npy_input(MapReader& reader, const fs::path& base_dir, InputSpec* input) {
  const std::string text = reader.required<std::string>("npy");
  input->npy = resolve_path(reader, "npy", text, base_dir);
  require_file(reader, "npy", input->npy, text, ".npy file");
  NpyArray array;
  try {
    array = read_npy(input->npy);
  } catch (const Error& e) {
    throw reader.error("npy", e.what());
  }
  if (reader.contains("shape")) {
    const std::vector<int64_t> shape = parse_shape(reader);
    if (shape != array.shape) {
      throw reader.error(
          "shape",
          fmt::format("shape {} does not match the shape {} of '{}'", detail::format_shape(shape),
                      detail::format_shape(array.shape), input->npy.string()));
    }
  }
  if (reader.contains("dtype")) {
    const DataType dtype = parse_dtype(reader, "dtype");
    if (dtype != array.dtype) {
      throw reader.error("dtype", fmt::format("dtype {} does not match the dtype {} of '{}'",
                                              dtype.str(), array.dtype.str(), input->npy.string()));
    }
  }
  input->shape = std::move(array.shape);
  input->dtype = array.dtype;
}

void parse_generated_input(MapReader& reader, size_t index, InputSpec* input) {
  input->shape = parse_shape(reader);
  if (reader.contains("dtype")) input->dtype = parse_dtype(reader, "dtype");
  input->init = parse_init(reader);
  const std::string init_name = reader.optional<std::string>("init", "zeros");
  if (input->init != InputSpec::Init::kRandom) {
    reject_keys(reader, {"seed", "low", "high"},
                "applies only to init: random (this input has init: " + init_name + ")");
  }
  if (input->init != InputSpec::Init::kArange) {
    reject_keys(reader, {"start", "step"},
                "applies only to init: arange (this input has init: " + init_name + ")");
  }
  input->seed = static_cast<uint64_t>(
      at_least<int64_t>(reader, "seed", static_cast<int64_t>(index), int64_t{0}));
  input->low = reader.optional<double>("low", input->low);
  input->high = reader.optional<double>("high", input->high);
  input->start = reader.optional<double>("start", input->start);
  input->step = reader.optional<double>("step", input->step);
  if (auto problem = detail::check_generated(*input)) {
    throw reader.error(problem->key, problem->message);
  }
}

InputSpec parse_input(MapReader& reader, size_t index, const fs::path& base_dir) {
  reader.allow_keys(kInputKeys);
  reader.reject_unknown_keys();
  InputSpec input;
  input.line = reader.yaml().Mark().line >= 0 ? reader.yaml().Mark().line + 1 : 0;
  input.name = non_empty_string(reader, "name", "arg" + std::to_string(index), "");
  if (reader.contains("npy")) {
    input.kind = InputSpec::Kind::kNpy;
    reject_keys(reader, {"scalar", "init", "seed", "low", "high", "start", "step"},
                "does not apply to an .npy input (it takes name, npy, and shape and dtype as "
                "checks)");
    parse_npy_input(reader, base_dir, &input);
  } else if (reader.contains("scalar")) {
    input.kind = InputSpec::Kind::kScalar;
    reject_keys(reader, {"shape", "init", "seed", "low", "high", "start", "step"},
                "does not apply to a scalar input (it takes name, scalar and dtype)");
    parse_scalar(reader, &input);
  } else if (reader.contains("shape")) {
    input.kind = InputSpec::Kind::kGenerated;
    parse_generated_input(reader, index, &input);
  } else {
    throw config::error_at(reader.yaml(), reader.file(), reader.key_path(),
                           "an input needs 'npy' (a .npy file), 'shape' (a generated tensor) or "
                           "'scalar' (a number or boolean)");
  }
  return input;
}

OutputSpec parse_output(MapReader& reader, const std::vector<InputSpec>& inputs,
                        const fs::path& base_dir) {
  reader.allow_keys(kOutputKeys);
  reader.reject_unknown_keys();
  OutputSpec output;
  const bool has_index = reader.contains("index");
  const bool has_name = reader.contains("name");
  if (!has_index && !has_name) {
    throw config::error_at(reader.yaml(), reader.file(), reader.key_path(),
                           "an output needs 'name' (an input's name) or 'index' (its position)");
  }
  if (has_index) {
    output.index = reader.required<int32_t>("index");
    if (output.index < 0 || static_cast<size_t>(output.index) >= inputs.size()) {
      throw reader.error(
          "index",
          inputs.empty()
              ? fmt::format("index {} is out of range: the run has no inputs", output.index)
              : fmt::format("index {} is out of range: the run has {} input{} (0..{})",
                            output.index, inputs.size(), inputs.size() == 1 ? "" : "s",
                            inputs.size() - 1));
    }
  }
  if (has_name) {
    const std::string name = reader.required<std::string>("name");
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const InputSpec& in) { return in.name == name; });
    if (it == inputs.end()) {
      std::vector<std::string> names;
      for (const InputSpec& in : inputs) names.push_back(in.name);
      std::string message = fmt::format("no input is named '{}'", name);
      if (auto suggestion = config::closest_match(name, names)) {
        message += fmt::format(" (did you mean '{}'?)", *suggestion);
      }
      message += names.empty() ? "; the run has no inputs" : "; inputs: " + join(names);
      throw reader.error("name", message);
    }
    const auto position = static_cast<int32_t>(it - inputs.begin());
    if (has_index && position != output.index) {
      throw reader.error("name", fmt::format("input '{}' is at index {}, but index says {}", name,
                                             position, output.index));
    }
    output.index = position;
  }
  const InputSpec& input = inputs[static_cast<size_t>(output.index)];
  output.name = input.name;
  if (input.kind == InputSpec::Kind::kScalar) {
    throw reader.error(has_name ? "name" : "index",
                       fmt::format("input '{}' is a scalar; only tensor arguments can be checked "
                                   "or saved",
                                   input.name));
  }
  if (reader.contains("expected")) {
    const std::string text = reader.required<std::string>("expected");
    output.expected = resolve_path(reader, "expected", text, base_dir);
    require_file(reader, "expected", *output.expected, text, "expected .npy file");
  }
  if (reader.contains("save")) {
    const std::string text = reader.required<std::string>("save");
    output.save = resolve_path(reader, "save", text, base_dir);
    std::error_code ec;
    if (fs::is_directory(*output.save, ec)) {
      throw reader.error("save", fmt::format("'{}' is a directory", output.save->string()));
    }
    if (output.expected &&
        fs::weakly_canonical(*output.save, ec) == fs::weakly_canonical(*output.expected, ec)) {
      throw reader.error("save",
                         "save and expected name the same file; the saved output would "
                         "replace the reference");
    }
  }
  output.rtol = non_negative(reader, "rtol", output.rtol);
  output.atol = non_negative(reader, "atol", output.atol);
  return output;
}

// "<stem>.0<ext>": the first element's file of a tuple saved or expected under `path`.
fs::path first_element_file(const fs::path& path) {
  return path.parent_path() / (path.stem().string() + ".0" + path.extension().string());
}

// One `result:` entry: a check on the return value or on one element of a returned tuple.
ResultSpec parse_result(MapReader& reader, const fs::path& base_dir) {
  reader.allow_keys(kResultKeys);
  reader.reject_unknown_keys();
  ResultSpec result;
  result.name = "result";
  if (std::optional<YAML::Node> element = reader.node("element"); element && !element->IsNull()) {
    // An index, or a list of indices into nested tuples.
    const std::vector<int64_t> indices =
        element->IsSequence() ? reader.required<std::vector<int64_t>>("element")
                              : std::vector<int64_t>{reader.required<int64_t>("element")};
    for (int64_t index : indices) {
      if (index < 0) {
        throw reader.error("element", fmt::format("tuple indices must be >= 0, got {}", index));
      }
      if (index > std::numeric_limits<int32_t>::max()) {
        throw reader.error("element", fmt::format("tuple index {} is too large (at most {})", index,
                                                  std::numeric_limits<int32_t>::max()));
      }
      result.element.push_back(static_cast<int32_t>(index));
      result.name += fmt::format("[{}]", index);
    }
  }
  if (reader.contains("expected") && reader.contains("value")) {
    throw reader.error("value",
                       "give either 'expected' (a .npy file) or 'value' (a scalar), "
                       "not both");
  }
  if (reader.contains("expected")) {
    const std::string text = reader.required<std::string>("expected");
    result.expected = resolve_path(reader, "expected", text, base_dir);
    // A tuple's elements are compared with <stem>.<i><ext>: either form may be there.
    std::error_code ec;
    if (!fs::exists(*result.expected, ec) && fs::exists(first_element_file(*result.expected), ec)) {
      require_file(reader, "expected", first_element_file(*result.expected), text,
                   "expected .npy file");
    } else {
      require_file(reader, "expected", *result.expected, text,
                   "expected .npy file (or, for a tuple, '" +
                       first_element_file(*result.expected).filename().string() + "')");
    }
  }
  if (reader.contains("value")) {
    const YAML::Node node = reader.required_node("value");
    const std::string key_path = reader.child_path("value");
    if (!node.IsScalar() || node.Tag() == "!") {
      throw reader.error("value",
                         "expected a number or a boolean, got " + config::describe_node(node));
    }
    try {
      result.value = config::value_as<int64_t>(node, reader.file(), key_path);
    } catch (const ConfigError&) {
      try {
        result.value = config::value_as<double>(node, reader.file(), key_path);
      } catch (const ConfigError&) {
        try {
          result.value = config::value_as<bool>(node, reader.file(), key_path);
        } catch (const ConfigError&) {
          throw reader.error("value", "expected a number or a boolean (true / false), got " +
                                          config::describe_node(node));
        }
      }
    }
  }
  if (reader.contains("save")) {
    const std::string text = reader.required<std::string>("save");
    result.save = resolve_path(reader, "save", text, base_dir);
    std::error_code ec;
    if (fs::is_directory(*result.save, ec)) {
      throw reader.error("save", fmt::format("'{}' is a directory", result.save->string()));
    }
    if (result.expected &&
        fs::weakly_canonical(*result.save, ec) == fs::weakly_canonical(*result.expected, ec)) {
      throw reader.error("save",
                         "save and expected name the same file; the saved result would "
                         "replace the reference");
    }
  }
  result.rtol = non_negative(reader, "rtol", result.rtol);
  result.atol = non_negative(reader, "atol", result.atol);
  return result;
}

}  // namespace

fs::path examples_dir() {
  const char* env = std::getenv("KILN_EXAMPLES");
  if (env != nullptr && *env != '\0') return fs::path(env);
  // The build tree keeps the examples in <build>/examples/kernels beside <build>/lib; an
  // installation keeps them in <prefix>/share/kiln/examples/kernels.
  fs::path prefix = boost::dll::this_line_location().parent_path();
  const fs::path libdir(KILN_LIB_SUBDIR);
  for (auto it = libdir.begin(); it != libdir.end(); ++it) prefix = prefix.parent_path();
  const fs::path build_tree = prefix / "examples" / "kernels";
  const fs::path installed = prefix / KILN_DATA_SUBDIR / "examples" / "kernels";
  std::error_code ec;
  if (!fs::is_directory(build_tree, ec) && fs::is_directory(installed, ec)) return installed;
  return build_tree.lexically_normal();
}

RemoteSpec parse_remote(MapReader& reader, const fs::path& base_dir) {
  reader.allow_keys({"tracker", "key", "priority", "session_timeout", "wait", "token", "token_file",
                     "tracker_token", "tracker_token_file"});
  reader.reject_unknown_keys();
  RemoteSpec r;
  if (reader.contains("tracker")) {
    const std::string text = reader.required<std::string>("tracker");
    try {
      const rpc::HostPort tracker = rpc::parse_host_port(text);
      r.tracker_host = tracker.host;
      r.tracker_port = tracker.port;
    } catch (const ValueError& e) {
      throw reader.error("tracker", e.what());
    }
  }
  if (reader.contains("key")) r.key = non_empty_string(reader, "key", "", "");
  r.priority = reader.optional<int32_t>("priority", r.priority);
  r.session_timeout = at_least<int32_t>(reader, "session_timeout", r.session_timeout, 0);
  if (reader.contains("wait")) {
    r.wait = reader.required<double>("wait");
    if (!(*r.wait > 0)) throw reader.error("wait", "must be > 0 seconds");
  }
  if (reader.contains("token") && reader.contains("token_file")) {
    throw reader.error("token_file", "give either 'token' or 'token_file', not both");
  }
  if (reader.contains("token")) r.token = non_empty_string(reader, "token", "", "");
  if (reader.contains("token_file")) {
    const fs::path file =
        resolve_path(reader, "token_file", reader.required<std::string>("token_file"), base_dir);
    try {
      r.token = rpc::read_token_file(file);
    } catch (const ValueError& e) {
      throw reader.error("token_file", e.what());
    }
  }
  if (reader.contains("tracker_token") && reader.contains("tracker_token_file")) {
    throw reader.error("tracker_token_file",
                       "give either 'tracker_token' or 'tracker_token_file', not both");
  }
  if (reader.contains("tracker_token")) {
    r.tracker_token = non_empty_string(reader, "tracker_token", "", "");
  }
  if (reader.contains("tracker_token_file")) {
    const fs::path file = resolve_path(
        reader, "tracker_token_file", reader.required<std::string>("tracker_token_file"), base_dir);
    try {
      r.tracker_token = rpc::read_token_file(file);
    } catch (const ValueError& e) {
      throw reader.error("tracker_token_file", e.what());
    }
  }
  return r;
}

namespace {

// yaml-cpp reports a tab in the indentation as whatever it makes of the line ("illegal block
// entry", "illegal map value", ...). When the failing line (or the one above: some errors are
// reported at the start of the next) is indented with a tab, the error names the tab instead.
ConfigError name_indentation_tab(const ConfigError& e, const fs::path& path) {
  if (e.line() <= 0) return e;
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; static_cast<int>(lines.size()) < e.line() && std::getline(in, line);) {
    lines.push_back(std::move(line));
  }
  for (int n = std::min<int>(e.line(), static_cast<int>(lines.size()));
       n >= std::max(1, e.line() - 1); --n) {
    const std::string& text = lines[n - 1];
    const size_t indent_end = std::min(text.find_first_not_of(" \t"), text.size());
    const size_t tab = text.find('\t');
    if (tab < indent_end) {
      return ConfigError(e.file(), n, static_cast<int>(tab) + 1, "",
                         "tabs are not allowed for indentation in YAML; use spaces");
    }
  }
  return e;
}

}  // namespace

EvaluatorSettings evaluator_settings(const RunSpec& spec) { return {spec.evaluator, spec.extra}; }

ConfigError error_at(const RunSpec& spec, const std::string& key, const std::string& message) {
  const auto it = spec.positions.find(key);
  const auto [line, column] = it == spec.positions.end() ? std::pair{0, 0} : it->second;
  return ConfigError(spec.file.string(), line, column, key, message);
}

namespace detail {

const std::vector<std::string>& top_keys() { return kTopKeys; }
const std::vector<std::string>& input_keys() { return kInputKeys; }
const std::vector<std::string>& evaluator_keys() { return kEvaluatorKeys; }
const std::vector<std::string>& noise_keys() { return kNoiseKeys; }

YAML::Node load_run_file(const fs::path& path) {
  try {
    return config::load_yaml_file(path);
  } catch (const ConfigError& e) {
    throw name_indentation_tab(e, path);
  }
}

RunSpec parse_run_node(const YAML::Node& root, const fs::path& path,
                       const DeviceTypeNames& device_types, bool in_sweep) {
  const std::string file = path.string();
  if (root.IsNull()) {
    throw ConfigError(file, 0, 0, "", "the run configuration is empty; it needs at least 'module'");
  }
  MapReader top(root, file, "");
  top.allow_keys(kTopKeys);
  top.reject_unknown_keys();
  if (!in_sweep && top.contains("sweep")) {
    throw top.error("sweep",
                    "this configuration is a sweep of several runs: read it with "
                    "parse_sweep_config (kiln run does; kiln profile takes one run)");
  }
  const fs::path base_dir = fs::absolute(path).parent_path();

  RunSpec spec;
  spec.file = path;
  for (const std::string& key : kTopKeys) {
    if (top.contains(key)) {
      const YAML::Mark mark = top.required_node(key).Mark();
      if (mark.line >= 0) spec.positions[key] = {mark.line + 1, mark.column + 1};
    }
  }
  const std::string module_text = top.required<std::string>("module");
  spec.module = resolve_path(top, "module", module_text, base_dir);
  require_file(top, "module", spec.module, module_text, "module file");
  if (top.contains("function")) {
    spec.function =
        non_empty_string(top, "function", "", " (leave 'function' out to run the entry function)");
  }
  spec.device = non_empty_string(top, "device", spec.device, "");
  try {
    device_types.parse(spec.device);
  } catch (const Error& e) {
    throw top.error("device", e.what());
  }
  spec.exporter = non_empty_string(top, "export", spec.exporter, "");

  parse_evaluator(top.optional_map("evaluator"), &spec);

  if (std::optional<YAML::Node> inputs = top.node("inputs"); inputs && !inputs->IsNull()) {
    if (!inputs->IsSequence()) {
      throw top.error("inputs", "expected a list of inputs, got " + config::describe_node(*inputs));
    }
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < inputs->size(); ++i) {
      MapReader reader((*inputs)[i], file, config::index_key_path("inputs", i));
      InputSpec input = parse_input(reader, i, base_dir);
      auto [it, inserted] = seen.emplace(input.name, i);
      if (!inserted) {
        throw reader.error("name",
                           fmt::format("inputs[{}] is already named '{}'", it->second, input.name));
      }
      spec.inputs.push_back(std::move(input));
    }
  }

  if (std::optional<YAML::Node> outputs = top.node("outputs"); outputs && !outputs->IsNull()) {
    if (!outputs->IsSequence()) {
      throw top.error("outputs",
                      "expected a list of outputs, got " + config::describe_node(*outputs));
    }
    std::map<int32_t, size_t> seen;
    for (size_t i = 0; i < outputs->size(); ++i) {
      MapReader reader((*outputs)[i], file, config::index_key_path("outputs", i));
      OutputSpec output = parse_output(reader, spec.inputs, base_dir);
      auto [it, inserted] = seen.emplace(output.index, i);
      if (!inserted) {
        throw reader.error(reader.contains("name") ? "name" : "index",
                           fmt::format("input '{}' is already checked by outputs[{}]; merge the "
                                       "two entries",
                                       output.name, it->second));
      }
      spec.outputs.push_back(std::move(output));
    }
  }

  if (std::optional<MapReader> profile = top.optional_map("profile")) {
    ProfileSpec p;
    profile->allow_keys({"collectors", "calls", "table", "csv", "json", "trace"});
    profile->reject_unknown_keys();
    if (std::optional<YAML::Node> list = profile->node("collectors"); list && !list->IsNull()) {
      if (!list->IsSequence()) {
        throw profile->error("collectors",
                             "expected a list of collectors, got " + config::describe_node(*list));
      }
      for (size_t i = 0; i < list->size(); ++i) {
        const YAML::Node item = (*list)[i];
        ProfileSpec::Collector c;
        if (item.IsScalar()) {
          c.name = item.Scalar();
        } else {
          MapReader entry(item, file, config::index_key_path("profile.collectors", i));
          entry.allow_keys({"name", "options"});
          entry.reject_unknown_keys();
          c.name = entry.required<std::string>("name");
          if (std::optional<YAML::Node> options = entry.node("options")) {
            if (!options->IsMap()) {
              throw entry.error("options", "expected a mapping of the plugin's options, got " +
                                               config::describe_node(*options));
            }
            c.options_json = config::yaml_to_json(*options);
          }
        }
        if (c.name.empty()) throw profile->error("collectors", "a collector name is empty");
        p.collectors.push_back(std::move(c));
      }
    }
    p.calls = at_least<int32_t>(*profile, "calls", 1, 1);
    for (auto [key, field] : {std::pair{"table", &p.table}, std::pair{"csv", &p.csv},
                              std::pair{"json", &p.json}, std::pair{"trace", &p.trace}}) {
      if (profile->contains(key)) {
        *field = resolve_path(*profile, key, profile->required<std::string>(key), base_dir);
      }
    }
    spec.profile = std::move(p);
  }
  if (top.contains("remote")) {
    std::optional<YAML::Node> node = top.node("remote");
    if (node && node->IsNull()) {
      spec.remote = RemoteSpec{};
    } else if (std::optional<MapReader> remote = top.optional_map("remote")) {
      spec.remote = parse_remote(*remote, base_dir);
    }
  }
  if (std::optional<YAML::Node> results = top.node("result"); results && !results->IsNull()) {
    // One mapping (a check on the whole value) or a list of them.
    if (results->IsMap()) {
      MapReader reader(*results, file, "result");
      spec.result.push_back(parse_result(reader, base_dir));
    } else if (results->IsSequence()) {
      std::map<std::vector<int32_t>, size_t> seen;
      for (size_t i = 0; i < results->size(); ++i) {
        MapReader reader((*results)[i], file, config::index_key_path("result", i));
        ResultSpec result = parse_result(reader, base_dir);
        auto [it, inserted] = seen.emplace(result.element, i);
        if (!inserted) {
          throw config::error_at((*results)[i], file, reader.key_path(),
                                 fmt::format("{} is already checked by result[{}]; merge the two "
                                             "entries",
                                             result.name, it->second));
        }
        spec.result.push_back(std::move(result));
      }
    } else {
      throw top.error("result",
                      "expected a mapping (checks on the return value) or a list of "
                      "them, got " +
                          config::describe_node(*results));
    }
  }
  if (std::optional<MapReader> throughput = top.optional_map("throughput")) {
    spec.throughput = parse_throughput(*throughput);
  }
  return spec;
}

}  // namespace detail

RunSpec parse_run_config(const fs::path& path, const DeviceTypeNames& device_types) {
  return detail::parse_run_node(detail::load_run_file(path), path, device_types, false);
}

}  // namespace kiln::run
