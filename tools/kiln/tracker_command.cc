// SPDX-License-Identifier: Apache-2.0
// `kiln tracker` and `kiln query`: docs/tracker.md.
#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "commands.h"
#include "kiln/logging.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/tracker.h"

namespace kiln::tool {

namespace {

int parse_port(const std::string& text, const std::string& what) {
  try {
    return rpc::RPCConfig::parse_port(text, what);
  } catch (const ValueError& e) {
    throw UsageError(e.what());
  }
}

// Each connection takes a descriptor: raises the soft limit so that --max-connections fit
// (the tracker makes room by closing idle connections when descriptors run out anyway).
void raise_descriptor_limit(size_t max_connections) {
  constexpr rlim_t kReserve = 64;  // the listener, logs, what the runtime opens
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + kReserve;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
    (void)::getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    log(LogLevel::kWarn, "tracker",
        fmt::format("only {} file descriptors (ulimit -n) for --max-connections {}: when they run "
                    "out, the connection idle the longest is closed for a new one",
                    limit.rlim_cur, max_connections));
  }
}

}  // namespace

std::string resolve_token_option(const rpc::TokenSource& source) {
  try {
    return rpc::resolve_token(source);
  } catch (const ValueError& e) {
    throw UsageError(e.what());
  }
}

std::string read_tracker_token(const std::optional<std::filesystem::path>& file, const char* flag) {
  rpc::TokenSource source;
  source.file = file;
  source.file_name = flag;
  source.variable = rpc::TokenVariable::kTracker;
  return resolve_token_option(source);
}

int run_tracker(const TrackerCommandOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    throw UsageError(fmt::format("--port {} is out of range (0-65535)", options.port));
  }
  raise_descriptor_limit(options.max_connections);
  // Signals are taken by sigtimedwait below; the tracker's thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  rpc::TrackerOptions tracker_options;
  tracker_options.host = options.host;
  tracker_options.port = options.port;
  tracker_options.port_end = options.port_end;
  tracker_options.stop_key = options.stop_key;
  tracker_options.handshake_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.handshake_timeout * 1000));
  tracker_options.max_connections = options.max_connections;
  tracker_options.max_connections_per_address = options.max_connections_per_address;
  tracker_options.max_held_bytes = options.max_held_bytes;
  tracker_options.idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.idle_timeout * 1000));
  tracker_options.token = read_tracker_token(options.token_file, "--token-file");
  std::optional<rpc::Tracker> started;
  try {
    started.emplace(tracker_options);
  } catch (const ValueError& e) {
    throw UsageError(e.what());  // a token too short
  }
  rpc::Tracker& tracker = *started;
  std::printf("kiln tracker listening on %s:%d%s\n", options.host.c_str(), tracker.port(),
              tracker_options.token.empty() ? "" : " (tracker token: TLS)");
  std::fflush(stdout);
  log(LogLevel::kDebug, "tracker", fmt::format("stop key: {}", tracker.stop_key()));

  while (!tracker.wait(std::chrono::milliseconds(0))) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "kiln tracker: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
  }
  tracker.stop();
  tracker.wait(std::chrono::seconds(5));
  return kExitOk;
}

int run_query(const QueryOptions& options) {
  std::string host;
  int port = 0;
  if (options.tracker) {
    try {
      const rpc::HostPort tracker = rpc::parse_host_port(*options.tracker);
      host = tracker.host;
      port = tracker.port;
    } catch (const ValueError& e) {
      throw UsageError(fmt::format("--tracker: {}", e.what()));
    }
  } else {
    host = "127.0.0.1";
    port = 9190;
    if (auto env_host = rpc::tracker_env("HOST")) host = env_host->value;
    if (auto env_port = rpc::tracker_env("PORT"))
      port = parse_port(env_port->value, env_port->variable);
  }
  if (!(options.timeout > 0)) throw UsageError("--timeout must be > 0");
  std::optional<rpc::TrackerSession> session;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout * 1000));
  const std::string tracker_token =
      read_tracker_token(options.tracker_token_file, "--tracker-token-file");
  try {
    session.emplace(rpc::TrackerSession::connect(host, port, timeout, tracker_token));
    if (options.json) {
      std::printf("%s\n", session->summary().json.c_str());
    } else {
      std::fputs(session->text_summary().c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: cannot query the tracker at %s:%d: %s\n", host.c_str(), port,
                 e.what());
    return kExitRuntime;
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace kiln::tool
