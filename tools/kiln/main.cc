// kiln: the command-line tool. Thin: every command calls the core library.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "kiln/config_error.h"
#include "kiln/error.h"
#include "kiln/version.h"

int main(int argc, char** argv) {
  using namespace kiln::tool;
  CLI::App app{
      "kiln: run compiled kernel modules on any device and time them honestly.\n"
      "Exit codes: 0 ok, 1 check failed, 2 usage or configuration error, 3 runtime "
      "error.",
      "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version() + " (plugin ABI " +
                                        kiln::abi_version() + ")");
  app.require_subcommand(1);
  GlobalOptions options;
  app.add_option("--plugin-set", options.plugin_set,
                 "Plugin set YAML to use (default: $KILN_PLUGIN_SET, else "
                 "<prefix>/share/kiln/plugins.yaml)");
  app.add_option("--plugin-path", options.plugin_paths,
                 "Extra directory to search for plugin manifests (repeatable; searched before "
                 "$KILN_PLUGIN_PATH)");

  auto* plugins = app.add_subcommand("plugins", "List every plugin considered, with its state");
  plugins->add_flag("--json", options.json, "Print JSON instead of a table");
  auto* devices = app.add_subcommand("devices", "List every device of every loaded backend");
  devices->add_flag("--json", options.json, "Print JSON instead of text");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    if (plugins->parsed()) return run_plugins(options);
    if (devices->parsed()) return run_devices(options);
  } catch (const kiln::ValueError& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return kExitRuntime;
  }
  return kExitUsage;
}
