// `kiln rpc-server`: docs/rpc.md.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"

namespace kiln::tool {

namespace {

std::string read_token(const RpcServerOptions& options) {
  if (options.token) {
    if (options.token->empty()) throw UsageError("--token is empty");
    return *options.token;
  }
  if (options.token_file) {
    try {
      return rpc::read_token_file(*options.token_file);
    } catch (const ValueError& e) {
      throw UsageError(fmt::format("--token-file: {}", e.what()));
    }
  }
  if (const char* env = std::getenv("KILN_RPC_TOKEN"); env != nullptr && *env != '\0') return env;
  return {};
}

}  // namespace

int run_rpc_server(const RpcServerOptions& options, const GlobalOptions& global) {
  if (options.verbose && log_level() > LogLevel::kInfo) set_log_level(LogLevel::kInfo);
  GlobalOptions runtime_global = global;
  if (options.plugins) runtime_global.plugin_set = options.plugins;
  Runtime runtime(runtime_options(runtime_global));

  rpc::ServerOptions server_options;
  server_options.host = options.host;
  server_options.port = options.port;
  server_options.port_end = options.port_end;
  server_options.key = options.key;
  server_options.tracker = options.tracker;
  server_options.custom_addr = options.custom_addr;
  if (options.work_dir) server_options.work_dir = *options.work_dir;
  server_options.session_timeout_s = options.session_timeout;
  server_options.max_sessions = options.max_sessions;
  server_options.max_session_memory = options.max_session_memory;
  server_options.handshake_timeout_s = options.handshake_timeout;
  server_options.idle_timeout_s = options.idle_timeout;
  server_options.write_timeout_s = options.write_timeout;
  server_options.max_handles = options.max_handles;
  server_options.max_upload_bytes = options.max_upload_bytes;
  server_options.test_hooks.test_functions = options.enable_test_functions;
  server_options.allow_insecure = options.allow_insecure;
  server_options.token = read_token(options);

  // Signals are taken by sigwait below, not by whichever thread they land on.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<rpc::Server> started;
  try {
    started = std::make_unique<rpc::Server>(server_options, runtime);
  } catch (const ValueError& e) {
    throw UsageError(e.what());  // a bad --tracker, --key, --port ...
  }
  rpc::Server& server = *started;
  std::printf("kiln rpc-server listening on %s:%d (key '%s', at most %d session%s%s%s)\n",
              options.host.c_str(), server.port(), options.key.c_str(), options.max_sessions,
              options.max_sessions == 1 ? "" : "s", server_options.token.empty() ? "" : ", token",
              options.tracker ? fmt::format(", tracker {}", *options.tracker).c_str() : "");
  log(LogLevel::kInfo, "rpc-server", fmt::format("work directory {}", server.work_dir().string()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kiln rpc-server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (!server.stop()) {
    // A call ignored the stop and runs on in a thread that uses this process's runtime: end
    // the process now rather than destroy what it uses (the work directory is already gone).
    std::fprintf(stderr, "kiln rpc-server: a call did not end; exiting without waiting for it\n");
    std::fflush(stderr);
    std::_Exit(kExitOk);
  }
  return kExitOk;
}

}  // namespace kiln::tool
