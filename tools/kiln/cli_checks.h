// SPDX-License-Identifier: Apache-2.0
// Checks of the `kiln` command line and of what a run config asks of the runtime, each failing
// with a message that says what exists: number ranges, unknown commands, device indices,
// function names, exporter names.
#ifndef KILN_TOOLS_KILN_CLI_CHECKS_H_
#define KILN_TOOLS_KILN_CLI_CHECKS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/detail/run_config.h"
#include "kiln/device.h"
#include "kiln/module.h"
#include "kiln/runtime.h"

namespace kiln::tool {

// Validators for numeric options: "must be at least 1, got 0" / "must be > 0, got 0" /
// "must be >= 0, got -1" (CLI11's own print their range with 300 digits). Text that is not a
// number passes, for the option's conversion to refuse.
CLI::Validator at_least_one();
CLI::Validator greater_than_zero();
CLI::Validator not_negative();

// `--threshold`'s value: "5%", "5" and "2.5 %" all mean that many percent. Returns the
// fraction (0.05); UsageError for anything but a finite number >= 0.
double parse_threshold(const std::string& text);

// When `args` (argv without the program name) names a command `app` does not have where a
// command is expected, e.g. `kiln rn`: "unknown command 'rn' (did you mean 'run'?); commands:
// plugins, devices, run, ...". Global options before the command and their values are skipped;
// a known command with commands of its own (`kiln vm`) is looked into the same way.
std::optional<std::string> unknown_command_message(const CLI::App& app,
                                                   const std::vector<std::string>& args);

// The candidate closest to `word` (edit distance at most max(2, size / 3)), if any.
std::optional<std::string> closest(const std::string& word,
                                   const std::vector<std::string>& candidates);

// The device a run of `spec` uses: `option` (--device, which the command parses once) when
// given, else spec.device parsed here, once; a run passes the Device on and never parses the
// name again. Checked against the devices its backend has: an index the backend lacks is a
// ConfigError at the config's `device` key (or about --device), "device cpu:3 does not exist:
// there is one (cpu:0)". A remote run's devices are the server's: only the name is checked here.
Device checked_device(const Runtime& runtime, const run::RunSpec& spec,
                      const std::optional<Device>& option);

// Throws a ConfigError at the config's `function` key when `module` (loaded from spec.module)
// has no function `function`, naming the module's own path, its functions and the closest one.
void check_function(const Module& module, const std::string& function, const run::RunSpec& spec);

// Throws a ConfigError at the config's `export` key, listing the loaded exporters, when
// spec.exporter is neither a built-in name ("tar", "so", "ndk") nor a loaded exporter.
void check_exporter(const Runtime& runtime, const run::RunSpec& spec);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_CLI_CHECKS_H_
