// SPDX-License-Identifier: Apache-2.0
// kiln: the command-line tool. Thin: every command calls the core library.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli_checks.h"
#include "commands.h"
#include "crash_note.h"
#include "kiln/config_error.h"
#include "kiln/error.h"
#include "kiln/temp_dir.h"
#include "kiln/version.h"
#include "terminal_text.h"

namespace {

// An error's text can carry a server's or a file's words: control characters (ANSI escapes
// among them) are written out, not sent to the terminal.
void print_error(const std::exception& e) {
  std::fprintf(stderr, "kiln: error: %s\n", kiln::tool::printable_lines(e.what()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::tool;
  install_crash_note();
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

  RunOptions run_options;
  auto* run = app.add_subcommand(
      "run", "Run a module's function from a YAML run config and time it (docs/run-config.md)");
  run->add_option("config", run_options.config, "The run config (YAML)")->required();
  run->add_option("--device", run_options.device,
                  "Device to run on, overriding the config's (e.g. cpu, opencl:0)");
  run->add_flag("--json", run_options.json, "Print one JSON document instead of text");
  // Two plain flags: CLI11 2.1 gives an optional<bool> flag a value even when it is absent.
  bool progress_on = false, progress_off = false;
  run->add_flag("--progress", progress_on,
                "Show progress while measuring: a redrawn line on a terminal, plain lines "
                "elsewhere (default: $KILN_PROGRESS, else only when stderr is a terminal)");
  run->add_flag("--no-progress", progress_off, "Never show progress")->excludes("--progress");
  run->add_option("--benchmark-out", run_options.benchmark_out,
                  "Also write the timing as Google Benchmark JSON to this file, readable by its "
                  "compare.py and by kiln compare (default: not written; - for stdout)");
  run->add_option("--isolation", run_options.isolation,
                  "Where local measurements run: process (a worker process that a crashing or "
                  "hanging kernel takes down instead of kiln; reused across points) or none (in "
                  "kiln's process) (default: process for a sweep, none for a single run; "
                  "docs/isolation.md)")
      ->check(CLI::IsMember({"process", "none"}));
  run->add_option("--point-timeout", run_options.point_timeout_s,
                  "Seconds an isolated or remote run or point may take before it is ended (its "
                  "worker killed, its session closed) and fails as hung (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--jobs", run_options.jobs,
                  "Points of a sweep with a remote: section measured at once, each on its own "
                  "server of the tracker key")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--retries", run_options.retries,
                  "Times a remote point whose server is lost mid-point is tried again on another "
                  "server")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  CompareOptions compare_options;
  auto* compare = app.add_subcommand(
      "compare",
      "Compare two timing JSON files (kiln run --json or --benchmark-out, Google Benchmark): "
      "change, U-test p-value and verdict per benchmark; exit 1 on a significant regression, 4 "
      "when the files could not tell");
  compare->add_option("baseline", compare_options.baseline, "The baseline JSON (A)")->required();
  compare->add_option("contender", compare_options.contender, "The JSON to judge (B)")->required();
  compare
      ->add_option("--threshold", compare_options.threshold,
                   "Changes within this percentage are no change; a slower one beyond it that "
                   "is significant fails (e.g. 5%, 2.5)")
      ->capture_default_str();
  compare
      ->add_option("--metric", compare_options.metric,
                   "Statistic of the per-repeat times compared: median, mean or min")
      ->capture_default_str()
      ->check(CLI::IsMember({"median", "mean", "min"}));
  compare
      ->add_option("--alpha", compare_options.alpha,
                   "Significance level of the two-sided Mann-Whitney U-test")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  compare->add_flag("--json", compare_options.json, "Print JSON instead of a table");

  AbCommandOptions ab_options;
  auto* ab = app.add_subcommand(
      "ab",
      "Time two run configs in one run, alternating A and B in random order per round: the "
      "ratio B/A with a confidence interval and a verdict; exit 1 when B is slower, 4 when it "
      "could not tell, 5 when A and B are the same module");
  ab->add_option("a", ab_options.config_a, "Run config A, the baseline (YAML)")->required();
  ab->add_option("b", ab_options.config_b, "Run config B, the contender (YAML)")->required();
  ab->add_option("--device", ab_options.device,
                 "Device both run on, overriding the configs' (e.g. cpu, opencl:0)");
  ab->add_option("--rounds", ab_options.rounds,
                 "Rounds, each timing A once and B once (at least 6)")
      ->capture_default_str()
      ->check(CLI::Range(6, 100000));
  ab->add_option("--max-rounds", ab_options.max_rounds,
                 "While it cannot tell, take more rounds (doubling) up to this many")
      ->capture_default_str()
      ->check(CLI::Range(6, 1000000));
  ab->add_option("--threshold", ab_options.threshold,
                 "Changes within this percentage are no change (e.g. 5%, 2.5)")
      ->capture_default_str();
  ab->add_option("--alpha", ab_options.alpha,
                 "1 - the confidence of the interval of B/A (0.05: a 95% interval)")
      ->capture_default_str()
      ->check(CLI::Range(0.0001, 0.5));
  ab->add_option("--seed", ab_options.seed,
                 "Seed of the per-round order (default: a random one, printed)");
  ab->add_option("--plugin-path-b", ab_options.plugin_path_b,
                 "Plugin folder(s) B loads instead of --plugin-path's: compare two builds of "
                 "one plugin (repeatable)");
  bool ab_progress_on = false, ab_progress_off = false;
  ab->add_flag("--progress", ab_progress_on,
               "Show progress (default: $KILN_PROGRESS, else only when stderr is a terminal)");
  ab->add_flag("--no-progress", ab_progress_off, "Never show progress")->excludes("--progress");
  ab->add_flag("--json", ab_options.json, "Print one JSON document instead of text");

  ProfileOptions profile_options;
  auto* profile =
      app.add_subcommand("profile",
                         "Profile calls of a run config's function and print the report table "
                         "(docs/profiling.md)");
  profile->add_option("config", profile_options.config, "The run config (YAML)")->required();
  profile->add_option("--device", profile_options.device,
                      "Device to run on, overriding the config's");
  profile->add_option("--collector", profile_options.collectors,
                      "Metric collector to use, e.g. perf (repeatable; added to the config's)");
  profile
      ->add_option("--calls", profile_options.calls,
                   "Calls to profile (default: the config's, else 1)")
      ->check(at_least_one());
  profile->add_flag("--json", profile_options.json, "Print the report as JSON instead of a table");
  profile
      ->add_option("--isolation", profile_options.isolation,
                   "process: profile in a child process, so that a crashing kernel or plugin is "
                   "reported (exit 3) instead of ending kiln; none: in kiln's process "
                   "(docs/isolation.md)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // the child's added "none"
      ->check(CLI::IsMember({"process", "none"}));

  VmOptions vm_options;
  auto* vm = app.add_subcommand("vm",
                                "Assemble, disassemble and inspect VM executables "
                                "(docs/vm.md)");
  vm->require_subcommand(1);
  auto* vm_asm = vm->add_subcommand("asm",
                                    "Assemble a text VM program (.kvmt) into a binary "
                                    "executable (.kvm)");
  vm_asm->add_option("input", vm_options.input, "The text program (.kvmt)")->required();
  vm_asm
      ->add_option("-o,--output", vm_options.output, "The executable to write (.kvm; - for stdout)")
      ->required();
  auto* vm_disasm = vm->add_subcommand(
      "disasm",
      "Print an executable (.kvm, or TVM's: a Relax library .so or VMExecutable) as text");
  vm_disasm->add_option("input", vm_options.input, "The executable")->required();
  vm_disasm->add_option("-o,--output", vm_options.output,
                        "Write the text to this file instead of stdout");
  auto* vm_stats = vm->add_subcommand("stats", "Print the statistics of a binary executable");
  vm_stats->add_option("input", vm_options.input, "The executable (as for disasm)")->required();

  LlmOptions llm_options;
  auto* llm = app.add_subcommand(
      "llm",
      "Run an LLM compiled the MLC way (model library + tensor-cache weights) (docs/llm.md)");
  llm->require_subcommand(1);
  auto* llm_generate = llm->add_subcommand("generate", "Generate token ids from prompt token ids");
  auto* llm_bench = llm->add_subcommand(
      "bench", "Time prefill (tokens/s) and decode (ms/step) with their range over launches");
  for (CLI::App* sub : {llm_generate, llm_bench}) {
    sub->add_option("library", llm_options.library, "The compiled model library (.so)")->required();
    sub->add_option("--weights", llm_options.weights,
                    "The weight folder (tensor-cache.json or ndarray-cache.json + shards)")
        ->required();
    sub->add_option("--device", llm_options.device, "Device to run on (default: cpu)");
    sub->add_option("--page-size", llm_options.page_size, "Tokens per KV-cache page")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_option("--prefill-chunk", llm_options.prefill_chunk,
                    "Most new tokens in one forward pass (raised to fit bench's batch)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_option("--max-total-length", llm_options.max_total_length,
                    "KV-cache capacity in tokens over all sequences (raised to fit bench's)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_flag("--json", llm_options.json, "Print JSON instead of text");
  }
  llm_generate->add_option("--prompt", llm_options.prompt, "Prompt token ids, e.g. 1,2,3")
      ->required();
  llm_generate->add_option("--max-new-tokens", llm_options.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  llm_generate
      ->add_option("--temperature", llm_options.temperature,
                   "Sampling temperature; 0 is greedy (argmax)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  llm_generate->add_option("--top-p", llm_options.top_p, "Nucleus sampling threshold in (0, 1]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  llm_generate->add_option("--seed", llm_options.seed, "Seed of the uniform samples top-p uses")
      ->capture_default_str();
  llm_bench->add_option("--prompt-length", llm_options.prompt_length, "Prompt tokens a sequence")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  llm_bench->add_option("--decode-tokens", llm_options.decode_tokens, "Decode steps a launch")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  llm_bench->add_option("--batch", llm_options.batch, "Sequences decoded together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  llm_bench
      ->add_option("--repeats", llm_options.repeats,
                   "Launches measured after one warm-up (at least 3 for a range worth reading)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  llm_bench->add_option("--seed", llm_options.seed, "Seed of the random prompts")
      ->capture_default_str();
  llm_bench->add_flag("--profile", llm_options.profile,
                      "Also profile one decode step: each VM call and KV-cache kernel a row");
  llm_bench->add_option("--benchmark-out", llm_options.benchmark_out,
                        "Also write Google Benchmark JSON to this file (- for stdout)");

  RpcServerOptions server_options;
  auto* server = app.add_subcommand(
      "rpc-server", "Serve RPC sessions: remote devices for rpc_run and `kiln run` (docs/rpc.md)");
  server->add_option("--host", server_options.host, "Address to listen on")->capture_default_str();
  server->add_option("--port", server_options.port, "First port to try (0: any free port)")
      ->capture_default_str();
  server
      ->add_option("--port-end", server_options.port_end,
                   "Listen on the first free port in [port, port-end)")
      ->capture_default_str();
  server->add_option("--tracker", server_options.tracker,
                     "Register with the tracker at HOST:PORT (default: no tracker)");
  server->add_option("--key", server_options.key,
                     "The key clients and the tracker know this server by (default: empty)");
  server->add_option("--custom-addr", server_options.custom_addr,
                     "Address the tracker hands to clients (default: the address the tracker "
                     "sees)");
  server->add_option("--work-dir", server_options.work_dir,
                     "Folder for session work directories (default: a fresh folder in the "
                     "temporary directory)");
  server
      ->add_option("--session-timeout", server_options.session_timeout,
                   "Longest session in seconds; 0 = what the client asks (default: 0)")
      ->check(not_negative());
  server
      ->add_option("--max-sessions", server_options.max_sessions,
                   "Sessions served at once; more are refused as busy")
      ->capture_default_str()
      ->check(at_least_one());
  server->add_option("--max-session-memory", server_options.max_session_memory,
                     "Bytes of memory one session may hold, whoever allocated it (allocations and "
                     "tensors that calls return); 0 = no limit (default: 0)");
  server
      ->add_option("--handshake-timeout", server_options.handshake_timeout,
                   "Seconds a client has for the whole handshake")
      ->capture_default_str()
      ->check(greater_than_zero());
  server
      ->add_option("--idle-timeout", server_options.idle_timeout,
                   "Seconds a session's client may stay silent between requests; 0 = unlimited")
      ->capture_default_str()
      ->check(not_negative());
  server
      ->add_option("--write-timeout", server_options.write_timeout,
                   "Seconds a client may leave reply data unread; 0 = unlimited")
      ->capture_default_str()
      ->check(not_negative());
  server
      ->add_option(
          "--max-handles", server_options.max_handles,
          "Handles (remote tensors, functions, modules) one session may hold; 0 = no limit")
      ->capture_default_str();
  server
      ->add_option("--max-upload-bytes", server_options.max_upload_bytes,
                   "Bytes one session may upload; 0 = no limit")
      ->capture_default_str();
  server->add_flag("--enable-test-functions", server_options.enable_test_functions,
                   "Offer Kiln's own diagnostic functions (testing.echo, rpc.test.*; for tests "
                   "only: rpc.test.sleep holds a session as long as asked)");
  server->add_flag("--allow-insecure", server_options.allow_insecure,
                   "Listen on a non-loopback --host without a token (anyone who can reach the "
                   "port can run code on this machine)");
  auto* token_opt = server->add_option(
      "--token", server_options.token,
      "Shared token clients must prove they hold (visible in ps: prefer --token-file or "
      "$KILN_RPC_TOKEN)");
  server
      ->add_option("--token-file", server_options.token_file,
                   "Read the shared token from this file's first line")
      ->excludes(token_opt);
  server->add_option("--plugins", server_options.plugins,
                     "Plugin set YAML for the sessions' runtime (default: as --plugin-set)");
  server
      ->add_option("--session-isolation", server_options.session_isolation,
                   "process: each session in a process of its own (a crash or a backdoor ends "
                   "with it; it cannot read the token or other sessions' files); thread: in "
                   "this process, sharing it (docs/rpc.md, \"Sessions are processes\")")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "thread"}));
  server
      ->add_option("--prestarted-sessions", server_options.prestarted_sessions,
                   "Session processes kept started ahead, each for one session (a session then "
                   "starts in well under a millisecond instead of ~10 ms); 0: start each when "
                   "its session begins")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  server->add_option("--tracker-token-file", server_options.tracker_token_file,
                     "Read the tracker's token from this file's first line, when the tracker "
                     "requires one (default: $KILN_TRACKER_TOKEN)");
  server->add_flag("-v,--verbose", server_options.verbose, "Log sessions as they start and end");

  TrackerCommandOptions tracker_options;
  auto* tracker = app.add_subcommand(
      "tracker", "Serve the RPC tracker protocol (TVM-compatible; docs/tracker.md)");
  tracker->add_option("--host", tracker_options.host, "Address to listen on")
      ->capture_default_str();
  tracker->add_option("--port", tracker_options.port, "First port to try (0: any free port)")
      ->capture_default_str();
  tracker
      ->add_option("--port-end", tracker_options.port_end,
                   "Listen on the first free port in [port, port-end)")
      ->capture_default_str();
  tracker->add_option("--stop-key", tracker_options.stop_key,
                      "Key a STOP command must carry (default: a random key)");
  tracker
      ->add_option("--handshake-timeout", tracker_options.handshake_timeout,
                   "Seconds a connection has to send the magic and its first message")
      ->capture_default_str()
      ->check(greater_than_zero());
  tracker
      ->add_option("--max-connections", tracker_options.max_connections, "Connections open at once")
      ->capture_default_str()
      ->check(at_least_one());
  tracker
      ->add_option("--max-connections-per-address", tracker_options.max_connections_per_address,
                   "Connections open at once from one peer address")
      ->capture_default_str()
      ->check(at_least_one());
  tracker
      ->add_option("--max-held-bytes", tracker_options.max_held_bytes,
                   "Bytes of free servers and waiting requests held for all peers")
      ->capture_default_str()
      ->check(at_least_one());
  tracker
      ->add_option("--idle-timeout", tracker_options.idle_timeout,
                   "Seconds a connection that neither serves (PUT) nor waits (REQUEST) may stay "
                   "silent before it is closed; 0 = unlimited")
      ->capture_default_str()
      ->check(not_negative());
  tracker->add_option("--token-file", tracker_options.token_file,
                      "Require the tracker token in this file's first line: peers must complete "
                      "a TLS 1.3 handshake keyed by it (TVM's clients cannot). Default: "
                      "$KILN_TRACKER_TOKEN, else none");
  RpcTokenOptions token_options;
  auto* token = app.add_subcommand(
      "rpc-token", "Print a new random token (256 bits) for rpc-server / tracker --token-file");
  token->add_option("-o,--output", token_options.output,
                    "Write it to this new file (mode 0600) instead of printing it");

  QueryOptions query_options;
  auto* query = app.add_subcommand(
      "query", "Print a tracker's servers and queues (like TVM's query_rpc_tracker)");
  query->add_option("--tracker", query_options.tracker,
                    "The tracker's HOST:PORT (default: $KILN_TRACKER_HOST / $KILN_TRACKER_PORT, "
                    "else $TVM_TRACKER_HOST / $TVM_TRACKER_PORT, else 127.0.0.1:9190)");
  query->add_flag("--json", query_options.json, "Print the SUMMARY reply's JSON instead of text");
  query->add_option("--timeout", query_options.timeout, "Seconds to wait for the tracker")
      ->capture_default_str();
  query->add_option("--tracker-token-file", query_options.tracker_token_file,
                    "Read the tracker's token from this file's first line, when the tracker "
                    "requires one (default: $KILN_TRACKER_TOKEN)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 says "A subcommand is required" for `kiln rn`: name the word and the commands.
    if (e.get_exit_code() != 0) {
      if (auto message =
              unknown_command_message(app, std::vector<std::string>(argv + 1, argv + argc))) {
        std::fprintf(stderr, "kiln: error: %s\n", message->c_str());
        return kExitUsage;
      }
    }
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (run->parsed() || profile->parsed() || ab->parsed()) {
    // Directories of earlier runs killed before they could clean up, then this run's own
    // removed even on ^C or SIGTERM.
    kiln::remove_stale_temporary_directories();
    kiln::install_temporary_directory_signal_cleanup();
  }
  try {
    if (plugins->parsed()) return run_plugins(options);
    if (server->parsed()) return run_rpc_server(server_options, options);
    if (token->parsed()) return run_rpc_token(token_options);
    if (tracker->parsed()) return run_tracker(tracker_options);
    if (query->parsed()) return run_query(query_options);
    if (compare->parsed()) return run_compare(compare_options);
    if (ab->parsed()) {
      if (ab_progress_on) ab_options.progress = true;
      if (ab_progress_off) ab_options.progress = false;
      return run_ab(ab_options, options);
    }
    if (devices->parsed()) return run_devices(options);
    if (profile->parsed()) {
      profile_options.arguments.assign(argv + 1, argv + argc);
      return run_profile(profile_options, options);
    }
    if (llm->parsed()) {
      llm_options.command = llm_generate->parsed() ? "generate" : "bench";
      return run_llm(llm_options, options);
    }
    if (vm->parsed()) {
      vm_options.command = vm_asm->parsed() ? "asm" : vm_disasm->parsed() ? "disasm" : "stats";
      return run_vm(vm_options, options);
    }
    if (run->parsed()) {
      if (progress_on) run_options.progress = true;
      if (progress_off) run_options.progress = false;
      return run_run(run_options, options);
    }
  } catch (const UsageError& e) {
    print_error(e);
    return kExitUsage;
  } catch (const kiln::ConfigError& e) {
    print_error(e);
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(e);
    return kExitRuntime;
  }
  return kExitUsage;
}
