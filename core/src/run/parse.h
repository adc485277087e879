// SPDX-License-Identifier: Apache-2.0
// What parse_run_config and parse_sweep_config share inside core/src/run.
#ifndef KILN_SRC_RUN_PARSE_H_
#define KILN_SRC_RUN_PARSE_H_

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/detail/run_config.h"

namespace kiln::run::detail {

// The keys a run config's top level, an input entry, `evaluator:` and `evaluator.noise:` take.
const std::vector<std::string>& top_keys();
const std::vector<std::string>& input_keys();
const std::vector<std::string>& evaluator_keys();
const std::vector<std::string>& noise_keys();

// Loads the YAML document at `path`: NotFoundError when it cannot be read, ConfigError for its
// syntax (a tab in the indentation named as such).
YAML::Node load_run_file(const std::filesystem::path& path);

// Parses a loaded run configuration (`root`, read from `path`). A `sweep:` key is refused
// unless `in_sweep` (the sweep's own parser has taken it out of `root` by then).
RunSpec parse_run_node(const YAML::Node& root, const std::filesystem::path& path,
                       const DeviceTypeNames& device_types, bool in_sweep);

}  // namespace kiln::run::detail

#endif  // KILN_SRC_RUN_PARSE_H_
