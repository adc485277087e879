// The `kiln` tool's subcommands. Each returns the process exit code (see docs/cli.md).
#ifndef KILN_TOOLS_KILN_COMMANDS_H_
#define KILN_TOOLS_KILN_COMMANDS_H_

#include <filesystem>
#include <optional>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::tool {

// Exit codes of the tool.
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // the command ran, but what it checked did not hold
  kExitUsage = 2,        // bad arguments or configuration
  kExitRuntime = 3,      // the runtime failed (plugin, device, module)
};

// Options every subcommand shares.
struct GlobalOptions {
  std::optional<std::filesystem::path> plugin_set;
  std::vector<std::filesystem::path> plugin_paths;
  bool json = false;
};

RuntimeOptions runtime_options(const GlobalOptions& options);

// `kiln plugins`: every plugin considered, its version, ABI, state and reason.
int run_plugins(const GlobalOptions& options);
// `kiln devices`: every device of every loaded backend, or why a backend has none.
int run_devices(const GlobalOptions& options);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_COMMANDS_H_
