// SPDX-License-Identifier: Apache-2.0
// parse_sweep_config: a run configuration's `sweep:` section expanded into ordinary run
// configurations, one per point of the cross product of its axes.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/yaml_reader.h"
#include "kiln/config_error.h"
#include "kiln/detail/run_config.h"
#include "kiln/error.h"
#include "run/parse.h"

namespace kiln::run {
namespace {

namespace fs = std::filesystem;

// A sweep has at most this many points: a typo in a long list should not start a week of runs.
constexpr size_t kMaxPoints = 100000;

// Where a swept parameter goes in the configuration.
enum class Target {
  kTop,        // function, device, export
  kAllInputs,  // shape, dtype: every generated tensor input (one with `shape`)
  kInput,      // inputs.<name>.<key>
  kEvaluator,  // number, repeat, ... or evaluator.<key>
  kNoise,      // evaluator.noise.<key>
  kThroughput  // throughput.bytes, throughput.flops
};

struct Param {
  std::string name;  // as written in the sweep
  Target target = Target::kTop;
  std::string key;                  // the key set in the target mapping
  std::vector<size_t> input_index;  // kInput: that input; kAllInputs: every generated one
};

const std::vector<std::string> kTopParams = {"function", "device", "export"};

// Compact flow text of a value for labels: "cpu", "[1024, 1024]", "{shape: [4], number: 3}".
std::string flow_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  std::vector<std::string> parts;
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) parts.push_back(flow_text(item));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (kv.first.Scalar() == "name") continue;
      parts.push_back(fmt::format("{}: {}", kv.first.Scalar(), flow_text(kv.second)));
    }
    return fmt::format("{{{}}}", fmt::join(parts, ", "));
  }
  return "null";
}

// The name of inputs[i] as the parser gives it: its `name`, else "arg<i>".
std::string input_name(const YAML::Node& input, size_t index) {
  if (input.IsMap() && input["name"] && input["name"].IsScalar()) return input["name"].Scalar();
  return "arg" + std::to_string(index);
}

// Whether inputs[i] is a generated tensor (it has `shape` and neither `npy` nor `scalar`).
bool is_generated(const YAML::Node& input) {
  return input.IsMap() && input["shape"] && !input["npy"] && !input["scalar"];
}

// Every parameter name a sweep takes for this configuration, for did-you-mean messages.
std::vector<std::string> known_params(const YAML::Node& inputs) {
  std::vector<std::string> names = kTopParams;
  names.insert(names.end(), {"shape", "dtype"});
  for (const std::string& key : detail::evaluator_keys()) {
    if (key == "noise") continue;
    names.push_back(key);
    names.push_back("evaluator." + key);
  }
  for (const std::string& key : detail::noise_keys()) names.push_back("evaluator.noise." + key);
  names.insert(names.end(), {"throughput.bytes", "throughput.flops"});
  if (inputs && inputs.IsSequence()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (const std::string& key : detail::input_keys()) {
        if (key != "name")
          names.push_back(fmt::format("inputs.{}.{}", input_name(inputs[i], i), key));
      }
    }
  }
  return names;
}

// The parameter `name` names, or nullopt when it names none (the caller then treats the key
// as a group axis or reports it). Throws `error` (a message) for an `inputs.` name whose input
// or key does not exist.
std::optional<Param> find_param(const std::string& name, const YAML::Node& inputs,
                                std::string* error) {
  Param p;
  p.name = name;
  const auto& evaluator = detail::evaluator_keys();
  const auto is_evaluator_key = [&](const std::string& key) {
    return key != "noise" && std::find(evaluator.begin(), evaluator.end(), key) != evaluator.end();
  };
  if (std::find(kTopParams.begin(), kTopParams.end(), name) != kTopParams.end()) {
    p.target = Target::kTop;
    p.key = name;
    return p;
  }
  if (name == "shape" || name == "dtype") {
    p.target = Target::kAllInputs;
    p.key = name;
    if (inputs && inputs.IsSequence()) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (is_generated(inputs[i])) p.input_index.push_back(i);
      }
    }
    if (p.input_index.empty()) {
      *error = fmt::format(
          "'{}' sets the {} of every generated tensor input (one with 'shape'), and this "
          "configuration has none; name an input: inputs.<name>.{}",
          name, name, name);
    }
    return p;
  }
  const std::string evaluator_prefix = "evaluator.";
  const std::string noise_prefix = "evaluator.noise.";
  if (name.rfind(noise_prefix, 0) == 0) {
    const std::string key = name.substr(noise_prefix.size());
    const auto& noise = detail::noise_keys();
    if (std::find(noise.begin(), noise.end(), key) == noise.end()) return std::nullopt;
    p.target = Target::kNoise;
    p.key = key;
    return p;
  }
  if (is_evaluator_key(name) || (name.rfind(evaluator_prefix, 0) == 0 &&
                                 is_evaluator_key(name.substr(evaluator_prefix.size())))) {
    p.target = Target::kEvaluator;
    p.key = name.rfind(evaluator_prefix, 0) == 0 ? name.substr(evaluator_prefix.size()) : name;
    return p;
  }
  if (name == "throughput.bytes" || name == "throughput.flops") {
    p.target = Target::kThroughput;
    p.key = name.substr(std::string("throughput.").size());
    return p;
  }
  if (name.rfind("inputs.", 0) == 0) {
    const size_t dot = name.rfind('.');
    const std::string input = name.substr(7, dot > 7 ? dot - 7 : 0);
    const std::string key = name.substr(dot + 1);
    const auto& keys = detail::input_keys();
    if (dot <= 7 || key == "name" || std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::vector<std::string> settable;
      for (const std::string& k : keys) {
        if (k != "name") settable.push_back(k);
      }
      *error = fmt::format("'{}': expected inputs.<input name>.<key>, the key one of {}", name,
                           fmt::join(settable, ", "));
      return p;
    }
    std::vector<std::string> names;
    if (inputs && inputs.IsSequence()) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        names.push_back(input_name(inputs[i], i));
        if (names.back() == input) p.input_index = {i};
      }
    }
    if (p.input_index.empty()) {
      *error = fmt::format("'{}': no input is named '{}'", name, input);
      if (auto suggestion = config::closest_match(input, names)) {
        *error += fmt::format(" (did you mean '{}'?)", *suggestion);
      }
      *error += names.empty() ? "; the configuration has no inputs"
                              : fmt::format("; inputs: {}", fmt::join(names, ", "));
      return p;
    }
    p.target = Target::kInput;
    p.key = key;
    return p;
  }
  return std::nullopt;
}

// Sets `value` at the parameter's place in `root` (a fresh load of the file, without `sweep`).
// The node keeps its own mark, so that errors about it point at the sweep's value.
void apply(YAML::Node& root, const Param& p, const YAML::Node& value) {
  switch (p.target) {
    case Target::kTop:
      root[p.key] = value;
      return;
    case Target::kAllInputs:
    case Target::kInput: {
      YAML::Node inputs = root["inputs"];
      for (size_t i : p.input_index) {
        YAML::Node input = inputs[i];
        input[p.key] = value;
      }
      return;
    }
    case Target::kEvaluator: {
      YAML::Node evaluator = root["evaluator"];
      evaluator[p.key] = value;
      return;
    }
    case Target::kNoise: {
      YAML::Node noise = root["evaluator"]["noise"];
      noise[p.key] = value;
      return;
    }
    case Target::kThroughput: {
      YAML::Node throughput = root["throughput"];
      throughput[p.key] = value;
      return;
    }
  }
}

// The places a parameter writes, to refuse two axes that set the same one.
std::vector<std::string> places(const Param& p) {
  switch (p.target) {
    case Target::kAllInputs:
    case Target::kInput: {
      std::vector<std::string> out;
      for (size_t i : p.input_index) out.push_back(fmt::format("inputs[{}].{}", i, p.key));
      return out;
    }
    case Target::kEvaluator:
      return {"evaluator." + p.key};
    case Target::kNoise:
      return {"evaluator.noise." + p.key};
    case Target::kThroughput:
      return {"throughput." + p.key};
    case Target::kTop:
    default:
      return {p.key};
  }
}

// A parsed axis: its name, the parameters it sets and a label per value (the values' nodes are
// read again from each point's load of the file: see value_node).
struct AxisDef {
  std::string name;
  bool group = false;         // a list of mappings that each set several parameters
  std::vector<Param> params;  // for a plain axis: the one parameter
  std::vector<std::string> labels;
};

// The value node of axis `a`, value `v`, parameter `name` in `sweep` (one load of the file).
YAML::Node value_node(const YAML::Node& sweep, size_t a, size_t v, const AxisDef& axis,
                      const std::string& param) {
  size_t i = 0;
  for (const auto& kv : sweep) {
    if (i++ != a) continue;
    const YAML::Node item = kv.second[v];
    return axis.group ? item[param] : item;
  }
  return YAML::Node();
}

// True when `node` is a list of numbers (a shape written where a list of shapes belongs).
bool is_flat_list(const YAML::Node& node) {
  if (!node.IsSequence() || node.size() == 0) return false;
  return std::all_of(node.begin(), node.end(), [](const YAML::Node& n) { return n.IsScalar(); });
}

// Checks the values of `param` in a plain axis: shapes must be lists.
void check_param_value(const Param& p, const YAML::Node& value, const std::string& file,
                       const std::string& key_path) {
  if (p.key == "shape" && !value.IsSequence()) {
    throw config::error_at(value, file, key_path,
                           fmt::format("a shape is a list of dimensions such as [1024, 1024], got "
                                       "{}",
                                       config::describe_node(value)));
  }
}

std::vector<AxisDef> parse_axes(const YAML::Node& sweep, const YAML::Node& inputs,
                                const std::string& file) {
  if (!sweep.IsMap() || sweep.size() == 0) {
    throw config::error_at(sweep, file, "sweep",
                           "expected a mapping of swept parameters to lists of values, such as "
                           "{device: [cpu, opencl], shape: [[1024], [1048576]]}, got " +
                               config::describe_node(sweep));
  }
  std::vector<AxisDef> axes;
  std::map<std::string, std::string> written;  // place -> the axis that sets it
  const std::vector<std::string> known = known_params(inputs);
  // " (did you mean 'device'?)" for a name close to a known parameter, else "".
  const auto did_you_mean = [&](const std::string& name) {
    const auto suggestion = config::closest_match(name, known);
    return suggestion ? fmt::format(" (did you mean '{}'?)", *suggestion) : std::string();
  };
  const auto not_a_parameter = [&](const std::string& name) {
    return fmt::format("'{}' is not a parameter{}", name, did_you_mean(name));
  };
  const auto claim = [&](const Param& p, const AxisDef& axis, const YAML::Node& at,
                         const std::string& key_path) {
    for (const std::string& place : places(p)) {
      auto [it, inserted] = written.emplace(place, axis.name);
      if (!inserted && it->second != axis.name) {
        throw config::error_at(at, file, key_path,
                               fmt::format("'{}' sets {}, which the axis '{}' sets too; a "
                                           "parameter can be swept by one axis only",
                                           p.name, place, it->second));
      }
    }
  };
  for (const auto& kv : sweep) {
    AxisDef axis;
    axis.name = kv.first.Scalar();
    const std::string key_path = config::join_key_path("sweep", axis.name);
    const YAML::Node values = kv.second;
    std::string error;
    std::optional<Param> param = find_param(axis.name, inputs, &error);
    if (!error.empty()) throw config::error_at(kv.first, file, key_path, error);
    if (!values.IsSequence() || values.size() == 0) {
      std::string message =
          fmt::format("expected a non-empty list of values, got {}", config::describe_node(values));
      if (!param) {
        message =
            not_a_parameter(axis.name) +
            "; a sweep key is a parameter (function, device, export, shape, dtype, "
            "inputs.<name>.<key>, number, repeat, ..., evaluator.noise.<key>, throughput.bytes, "
            "throughput.flops) with a list of values, or an axis name with a list of mappings "
            "that each set several parameters together";
      }
      throw config::error_at(values, file, key_path, message);
    }
    if (param) {
      if (param->key == "shape" && is_flat_list(values)) {
        throw config::error_at(
            values, file, key_path,
            fmt::format("expected a list of shapes such as [[1024], [4096]], got a list of "
                        "numbers {} (one shape per point: write [{}] for a single one)",
                        flow_text(values), flow_text(values)));
      }
      for (size_t v = 0; v < values.size(); ++v) {
        check_param_value(*param, values[v], file, config::index_key_path(key_path, v));
      }
      claim(*param, axis, kv.first, key_path);
      axis.params.push_back(*param);
      for (const YAML::Node& value : values) axis.labels.push_back(flow_text(value));
    } else {
      // A group axis: each value a mapping of parameters (and an optional `name`).
      axis.group = true;
      std::set<std::string> seen;  // the group's parameters, each claimed once
      for (size_t v = 0; v < values.size(); ++v) {
        const YAML::Node item = values[v];
        const std::string item_path = config::index_key_path(key_path, v);
        if (!item.IsMap()) {
          const std::string message =
              not_a_parameter(axis.name) +
              fmt::format(
                  "; as an axis of grouped settings its values must be mappings of parameters, got "
                  "{} at index {}",
                  config::describe_node(item), v);
          throw config::error_at(kv.first, file, key_path, message);
        }
        for (const auto& setting : item) {
          const std::string name = setting.first.Scalar();
          const std::string setting_path = config::join_key_path(item_path, name);
          if (name == "name") {
            if (!setting.second.IsScalar() || setting.second.Scalar().empty()) {
              throw config::error_at(setting.second, file, setting_path,
                                     "expected a non-empty label");
            }
            continue;
          }
          std::string why;
          std::optional<Param> p = find_param(name, inputs, &why);
          if (!why.empty()) throw config::error_at(setting.first, file, setting_path, why);
          if (!p) {
            throw config::error_at(
                setting.first, file, setting_path,
                fmt::format("unknown parameter '{}'{}", name, did_you_mean(name)));
          }
          check_param_value(*p, setting.second, file, setting_path);
          if (seen.insert(name).second) {
            claim(*p, axis, setting.first, setting_path);
            axis.params.push_back(*p);
          }
        }
        axis.labels.push_back(item["name"] ? item["name"].Scalar() : flow_text(item));
      }
    }
    // Two equal values would make two points that cannot be told apart.
    for (size_t v = 0; v < axis.labels.size(); ++v) {
      for (size_t w = 0; w < v; ++w) {
        if (axis.labels[v] == axis.labels[w]) {
          throw config::error_at(
              values[v], file, config::index_key_path(key_path, v),
              fmt::format("the value {} is listed twice (also at index {})", axis.labels[v], w));
        }
      }
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

}  // namespace

SweepSpec parse_sweep_config(const fs::path& path, const DeviceTypeNames& device_types) {
  SweepSpec out;
  out.file = path;
  const std::string file = path.string();
  const YAML::Node root = detail::load_run_file(path);
  if (!root.IsMap() || !root["sweep"]) {
    SweepPoint point;
    point.spec = detail::parse_run_node(root, path, device_types, false);
    out.points.push_back(std::move(point));
    return out;
  }
  const YAML::Node sweep = root["sweep"];
  if (root["profile"]) {
    // Every point would write the same report files in turn.
    throw config::error_at(root["profile"], file, "profile",
                           "a sweep cannot have a 'profile:' section (each point would replace "
                           "the report files of the one before); profile one run with kiln "
                           "profile");
  }
  const std::vector<AxisDef> defs = parse_axes(sweep, root["inputs"], file);
  size_t total = 1;
  for (const AxisDef& axis : defs) {
    total *= axis.labels.size();
    if (total > kMaxPoints) {
      throw config::error_at(sweep, file, "sweep",
                             fmt::format("the cross product has more than {} points", kMaxPoints));
    }
    out.axes.push_back({axis.name, axis.labels});
  }
  // Each point parses its own copy of the file's text, read once here (it was read and checked
  // above); a copy keeps every node's file position for the point's errors, which YAML::Clone
  // would not.
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (!in || in.bad()) throw NotFoundError("cannot read configuration file '" + file + "'");
    text = buffer.str();
  }
  // The first axis varies slowest, as nested loops written in the file's order.
  std::vector<size_t> at(defs.size(), 0);
  for (size_t index = 0; index < total; ++index) {
    size_t rest = index;
    for (size_t a = defs.size(); a-- > 0;) {
      at[a] = rest % defs[a].labels.size();
      rest /= defs[a].labels.size();
    }
    SweepPoint point;
    point.index = index;
    std::vector<std::string> parts;
    for (size_t a = 0; a < defs.size(); ++a) {
      point.values.push_back(defs[a].labels[at[a]]);
      parts.push_back(fmt::format("{}={}", defs[a].name, defs[a].labels[at[a]]));
    }
    point.label = fmt::format("{}", fmt::join(parts, ", "));
    try {
      // A fresh load per point: the settings replace nodes of this copy only.
      YAML::Node copy = config::load_yaml_string(text, file);
      const YAML::Node copy_sweep = static_cast<const YAML::Node&>(copy)["sweep"];
      copy.remove("sweep");
      for (size_t a = 0; a < defs.size(); ++a) {
        for (const Param& p : defs[a].params) {
          YAML::Node value = value_node(copy_sweep, a, at[a], defs[a], p.name);
          if (value) apply(copy, p, value);
        }
      }
      point.spec = detail::parse_run_node(copy, path, device_types, true);
      // Each point saves to files of its own: out.npy -> out.point3.npy.
      const auto per_point = [&](std::optional<fs::path>& file) {
        if (file) {
          *file = file->parent_path() / fmt::format("{}.point{}{}", file->stem().string(),
                                                    index + 1, file->extension().string());
        }
      };
      for (OutputSpec& output : point.spec->outputs) per_point(output.save);
      for (ResultSpec& result : point.spec->result) per_point(result.save);
    } catch (const Error& e) {
      point.error = e.what();
    }
    out.points.push_back(std::move(point));
  }
  return out;
}

}  // namespace kiln::run
