// SPDX-License-Identifier: Apache-2.0
#include "cli_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "commands.h"
#include "kiln/config_error.h"
#include "kiln/device_backend.h"

namespace kiln::tool {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      current[j] = std::min(
          {previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto match = closest(word, candidates);
  return match ? fmt::format(" (did you mean '{}'?)", *match) : "";
}

// A validator of numbers that `ok` accepts; `rule` completes "must be ...".
CLI::Validator number_rule(bool (*ok)(double), const std::string& rule, const std::string& name) {
  return CLI::Validator(
      [ok, rule](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "";  // the conversion says what is wrong
        return ok(value) ? "" : fmt::format("must be {}, got {}", rule, text);
      },
      "", name);
}

}  // namespace

CLI::Validator at_least_one() {
  return number_rule([](double v) { return v >= 1; }, "at least 1", "AT_LEAST_ONE");
}
CLI::Validator greater_than_zero() {
  return number_rule([](double v) { return v > 0; }, "> 0", "POSITIVE");
}
CLI::Validator not_negative() {
  return number_rule([](double v) { return v >= 0; }, ">= 0", "NON_NEGATIVE");
}

std::optional<std::string> closest(const std::string& word,
                                   const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::optional<std::string> unknown_command_message(const CLI::App& app,
                                                   const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  if (names.empty()) return std::nullopt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return std::nullopt;
    if (arg.size() > 1 && arg[0] == '-') {
      // An option of this level that takes a value: the next argument is that value.
      const bool inline_value = arg.find('=') != std::string::npos;
      const CLI::Option* opt = app.get_option_no_throw(arg.substr(0, arg.find('=')));
      if (opt != nullptr && !inline_value && opt->get_expected_min() > 0) ++i;
      continue;
    }
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (s->check_name(arg)) sub = s;
    }
    if (sub != nullptr) {
      return unknown_command_message(*sub,
                                     std::vector<std::string>(args.begin() + i + 1, args.end()));
    }
    const std::string parent = app.get_parent() == nullptr ? "" : app.get_name() + " ";
    return fmt::format("unknown {}command '{}'{}; commands: {}", parent, arg,
                       did_you_mean(arg, names), fmt::join(names, ", "));
  }
  return std::nullopt;
}

Device checked_device(const Runtime& runtime, const run::RunSpec& spec,
                      const std::optional<Device>& option) {
  const Device device = option ? *option : runtime.parse_device(spec.device);
  if (spec.remote) return device;
  const Ref<DeviceBackend> backend = runtime.find_backend(device.type);
  if (!backend) return device;  // the run says which backends are loaded
  std::string why_none;
  const int32_t count = backend->device_count(&why_none);
  if (device.id >= 0 && device.id < count) return device;
  const std::string first = runtime.device_str(Device{device.type, 0});
  const std::string message =
      fmt::format("device {} does not exist: {}", runtime.device_str(device),
                  count <= 0   ? fmt::format("there is no such device ({})", why_none)
                  : count == 1 ? fmt::format("there is one ({})", first)
                               : fmt::format("there are {} ({} to {})", count, first,
                                             runtime.device_str(Device{device.type, count - 1})));
  if (option) throw ConfigError("", 0, 0, "--device", message);
  throw run::error_at(spec, "device", message);
}

void check_function(const Module& module, const std::string& function, const run::RunSpec& spec) {
  if (module.has_function(function)) return;
  const std::vector<std::string> names = module.function_names();
  throw run::error_at(
      spec, "function",
      fmt::format("the module '{}' has no function '{}'{}; it has: {}", spec.module.string(),
                  function, did_you_mean(function, names),
                  names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
}

void check_exporter(const Runtime& runtime, const run::RunSpec& spec) {
  const std::vector<std::string> builtin = {"tar", "so", "ndk"};
  std::vector<std::string> names = runtime.exporter_names();
  if (std::find(builtin.begin(), builtin.end(), spec.exporter) != builtin.end() ||
      std::find(names.begin(), names.end(), spec.exporter) != names.end()) {
    return;
  }
  throw run::error_at(
      spec, "export",
      fmt::format(
          "unknown exporter '{}'{}; {}{}", spec.exporter, did_you_mean(spec.exporter, names),
          names.empty() ? "no exporter is loaded (see `kiln plugins`)"
                        : fmt::format("the loaded exporters are: {}", fmt::join(names, ", ")),
          runtime.not_active_hint("exporter:" + spec.exporter)));
}

double parse_threshold(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '%' || t.back() == ' ')) t.pop_back();
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !(v >= 0) || !std::isfinite(v)) {
    throw UsageError(
        fmt::format("--threshold: expected a percentage >= 0 such as 5% or 2.5, got '{}'", text));
  }
  return v / 100;
}

}  // namespace kiln::tool
