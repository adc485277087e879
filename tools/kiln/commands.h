// SPDX-License-Identifier: Apache-2.0
// The `kiln` tool's subcommands. Each returns the process exit code (see docs/cli.md).
#ifndef KILN_TOOLS_KILN_COMMANDS_H_
#define KILN_TOOLS_KILN_COMMANDS_H_

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/detail/run_config.h"
#include "kiln/profiling/report.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/runtime.h"

namespace kiln::tool {

// Exit codes of the tool.
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // the command ran, but what it checked did not hold
  kExitUsage = 2,        // bad arguments or configuration
  kExitRuntime = 3,      // the runtime failed (plugin, device, module)
  // `kiln ab` and `kiln compare`: the samples could not tell a change from no change.
  kExitCouldNotTell = 4,
  // `kiln ab`: A and B are the same module with the same function and inputs.
  kExitSameModule = 5,
};

// A problem with the command line or the configuration it names (exit code 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Options every subcommand shares.
struct GlobalOptions {
  std::optional<std::filesystem::path> plugin_set;
  std::vector<std::filesystem::path> plugin_paths;
  bool json = false;
};

// How every command that loads plugins builds its one Runtime: --plugin-set and --plugin-path
// (searched before $KILN_PLUGIN_PATH), the environment as usual.
RuntimeOptions runtime_options(const GlobalOptions& options);

// Options of `kiln run`.
struct RunOptions {
  std::filesystem::path config;
  std::optional<std::string> device;  // overrides the config's device
  bool json = false;
  std::optional<bool> progress;  // default: when stderr is a terminal
  // Also write Google Benchmark's JSON document (top-level "benchmarks") here; "-": stdout.
  std::optional<std::filesystem::path> benchmark_out;
  // Where local measurements run (docs/isolation.md): "process" (a worker process, reused
  // across points) or "none" (in this process); unset: process for a sweep, none for a
  // single run.
  std::optional<std::string> isolation;
  // Seconds one isolated point may take before its worker is killed (0: no limit).
  double point_timeout_s = 600;
  // Points of a remote sweep measured at once, each on its own server of the tracker key.
  int jobs = 1;
  // Times a remote point whose server was lost is tried again on another server.
  int retries = 2;
};

// `kiln run RUN.yaml`: runs the config through local_run on a Runtime made from `global`;
// exit 1 when a check fails.
int run_run(const RunOptions& options, const GlobalOptions& global);

// Options of `kiln profile`.
struct ProfileOptions {
  std::filesystem::path config;
  std::optional<std::string> device;
  std::vector<std::string> collectors;  // added to the config's profile.collectors
  std::optional<int32_t> calls;         // overrides profile.calls
  bool json = false;
  // "process": the whole command again in a child process (supervised.h); "none": here.
  std::string isolation = "none";
  std::vector<std::string> arguments;  // the command line after the program name
};

// `kiln profile RUN.yaml`: profiles the run's function on a Runtime made from `global` and
// prints the report table.
int run_profile(const ProfileOptions& options, const GlobalOptions& global);

// Profiles `profile.calls` calls of the function `spec` names on `device` (the run's, parsed
// and checked once: checked_device) with `profile.collectors` and writes the report files
// `profile` asks for, all through `runtime`.
profiling::Report profile_run(const run::RunSpec& spec, const run::ProfileSpec& profile,
                              Device device, Runtime& runtime);

// Options of `kiln vm asm|disasm|stats` (docs/vm.md).
struct VmOptions {
  std::string command;  // "asm", "disasm" or "stats"
  std::filesystem::path input;
  std::filesystem::path output;  // asm: required; disasm: empty prints to stdout
};

// `kiln vm ...`: assembles a text VM program, prints an executable as text, or prints its
// statistics. A malformed text program is a usage error (2), a malformed executable a
// runtime error (3).
int run_vm(const VmOptions& options, const GlobalOptions& global);

// Options of `kiln llm generate|bench` (docs/llm.md).
struct LlmOptions {
  std::string command;            // "generate" or "bench"
  std::filesystem::path library;  // the compiled model library
  std::filesystem::path weights;  // its tensor-cache folder
  std::optional<std::string> device;
  // generate
  std::string prompt;  // token ids, comma- or space-separated
  int64_t max_new_tokens = 16;
  double temperature = 0;  // 0: greedy
  double top_p = 1;
  uint64_t seed = 0;
  // bench
  int64_t prompt_length = 128;
  int64_t decode_tokens = 32;
  int64_t batch = 1;
  int repeats = 5;  // launches after one warm-up
  bool profile = false;
  std::optional<std::filesystem::path> benchmark_out;
  // the KV cache
  int64_t page_size = 16;
  int64_t prefill_chunk = 512;
  int64_t max_total_length = 4096;
  bool json = false;
};

// `kiln llm generate`: prompt token ids in, generated token ids out (greedy or top-p with a
// seed). `kiln llm bench`: prefill tokens/s and decode ms/step with their range over launches,
// memory, optional Google Benchmark JSON and a per-kernel profile of one decode step.
int run_llm(const LlmOptions& options, const GlobalOptions& global);

// Options of `kiln rpc-server` (docs/rpc.md).
struct RpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 9090;
  int port_end = 9199;
  std::optional<std::string> tracker;
  std::string key;
  std::optional<std::string> custom_addr;
  std::optional<std::filesystem::path> work_dir;
  double session_timeout = 0;
  int max_sessions = 1;
  uint64_t max_session_memory = 0;
  double handshake_timeout = 10;           // seconds for the whole handshake
  double idle_timeout = 600;               // seconds a session's client may stay silent; 0: none
  double write_timeout = 60;               // seconds a client may leave reply data unread; 0: none
  uint64_t max_handles = 65536;            // per session; 0: none
  uint64_t max_upload_bytes = 4ull << 30;  // per session; 0: none
  bool enable_test_functions = false;      // offer rpc.test.* / testing.* (tests only)
  bool allow_insecure = false;             // a non-loopback --host without a token
  std::optional<std::string> token;
  std::optional<std::filesystem::path> token_file;
  std::optional<std::filesystem::path> plugins;  // plugin set YAML
  std::string session_isolation = "process";     // "process" or "thread"
  // Session processes started ahead (a session then starts in ~1 ms, not ~10-25 ms); 0: none.
  int prestarted_sessions = 1;
  // The tracker's token (else $KILN_TRACKER_TOKEN), when the tracker requires one.
  std::optional<std::filesystem::path> tracker_token_file;
  bool verbose = false;
};

// `kiln rpc-server`: serves RPC sessions until SIGINT or SIGTERM.
int run_rpc_server(const RpcServerOptions& options, const GlobalOptions& global);

// Options of `kiln rpc-token`.
struct RpcTokenOptions {
  std::optional<std::filesystem::path> output;  // a new file (0600); unset: stdout
};
// `kiln rpc-token`: prints (or writes) a new random token.
int run_rpc_token(const RpcTokenOptions& options);

// Options of `kiln tracker` (docs/tracker.md).
struct TrackerCommandOptions {
  std::string host = "127.0.0.1";
  int port = 9190;  // 0: any free port
  int port_end = 9199;
  std::string stop_key;                      // empty: a random one
  double handshake_timeout = 10;             // seconds for the magic and first message
  double idle_timeout = 30;                  // seconds a mere client may stay silent; 0: none
  size_t max_connections = 4096;             // open at once
  size_t max_connections_per_address = 256;  // open at once from one peer address
  size_t max_held_bytes = 64u << 20;         // free values and requests, all peers
  // The tracker token (else $KILN_TRACKER_TOKEN): peers must hold it (TLS 1.3).
  std::optional<std::filesystem::path> token_file;
};

// `kiln tracker`: serves the tracker protocol until SIGINT, SIGTERM or STOP.
int run_tracker(const TrackerCommandOptions& options);

// A command's token by rpc::resolve_token (kiln/rpc/rpc_config.h: --token, else --token-file,
// else the environment variable, else none); its ValueError (an empty --token, a token file that
// cannot be read) becomes a UsageError with the same message.
std::string resolve_token_option(const rpc::TokenSource& source);
// The tracker token of a command: the first line of `file` when given (UsageError naming `flag`
// when it cannot be read), else $KILN_TRACKER_TOKEN, else empty (no token).
std::string read_tracker_token(const std::optional<std::filesystem::path>& file, const char* flag);

// Options of `kiln query` (docs/tracker.md).
struct QueryOptions {
  std::optional<std::string> tracker;  // HOST:PORT; default from the environment
  bool json = false;
  double timeout = 5;  // seconds to connect
  // The tracker's token (else $KILN_TRACKER_TOKEN), when it requires one.
  std::optional<std::filesystem::path> tracker_token_file;
};

// `kiln query`: prints the tracker's text summary (or its SUMMARY JSON); exit 3 when the
// tracker cannot be reached, 2 for a malformed HOST:PORT.
int run_query(const QueryOptions& options);

// Options of `kiln compare` (docs/cli.md).
struct CompareOptions {
  std::filesystem::path baseline;
  std::filesystem::path contender;
  std::string threshold = "5%";   // a change within this is "no change"
  std::string metric = "median";  // median, mean or min of the per-repeat times
  double alpha = 0.05;            // significance level of the U-test
  bool json = false;
};

// `kiln compare A.json B.json`: per benchmark the change from A to B, a Mann-Whitney U-test
// p-value and a verdict; exit 1 when a benchmark is slower beyond the threshold and
// significantly so, kExitCouldNotTell when none is but some could not be told, 2 for unreadable
// or malformed input.
int run_compare(const CompareOptions& options);

// `kiln ab A.yaml B.yaml`: two single-run configs timed in one run, alternating in a random
// order per round (kiln::testing::ab_run).
struct AbCommandOptions {
  std::filesystem::path config_a, config_b;
  std::optional<std::string> device;                 // --device, for both sides
  int32_t rounds = 20;                               // rounds, each timing A once and B once
  int32_t max_rounds = 160;                          // more rounds while it could not tell
  std::string threshold = "5%";                      // a change within this is "no change"
  double alpha = 0.05;                               // 1 - the confidence of the interval
  std::optional<uint64_t> seed;                      // the order's seed (default: random, printed)
  std::vector<std::filesystem::path> plugin_path_b;  // B's plugin folders (two builds)
  std::optional<bool> progress;                      // --progress / --no-progress
  bool json = false;
};

// Runs and checks each side once, then times both in `rounds` interleaved rounds (more, up to
// `max_rounds`, while it cannot tell) and prints each side's module file and content hash, the
// ratio B / A with its interval and the verdict. Exit 0 for no change or faster, 1 when B is
// slower beyond the threshold with the interval above 1 (or a side's check fails), 2 for bad
// arguments or configs, 3 for a failure while running, kExitCouldNotTell when the rounds could
// not tell, kExitSameModule when A and B are the same module, function and inputs.
int run_ab(const AbCommandOptions& options, const GlobalOptions& global);

// `kiln plugins`: every plugin considered, its version, ABI, state and reason.
int run_plugins(const GlobalOptions& options);
// `kiln devices`: every device of every loaded backend, or why a backend has none.
int run_devices(const GlobalOptions& options);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_COMMANDS_H_
