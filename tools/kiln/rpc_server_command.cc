// SPDX-License-Identifier: Apache-2.0
// `kiln rpc-server`: docs/rpc.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

namespace fs = std::filesystem;

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
  server_options.tracker_token =
      read_tracker_token(options.tracker_token_file, "--tracker-token-file");
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
  rpc::TokenSource token;
  token.value = options.token;
  token.file = options.token_file;
  token.variable = rpc::TokenVariable::kRpc;
  token.value_name = "--token";
  token.file_name = "--token-file";
  server_options.token = resolve_token_option(token);
  if (options.token_file) server_options.secret_files.push_back(fs::absolute(*options.token_file));
  if (options.tracker_token_file) {
    server_options.secret_files.push_back(fs::absolute(*options.tracker_token_file));
  }
  server_options.isolation = options.session_isolation == "thread"
                                 ? rpc::SessionIsolation::kThread
                                 : rpc::SessionIsolation::kProcess;
  server_options.prestarted_sessions = options.prestarted_sessions;

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

int run_rpc_token(const RpcTokenOptions& options) {
  const std::string token = rpc::generate_token();
  if (!options.output) {
    std::printf("%s\n", token.c_str());
    return kExitOk;
  }
  // O_EXCL: never over an existing file (a token in use, or a link planted there).
  const int fd = ::open(options.output->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw UsageError(fmt::format("--output: cannot create '{}': {}", options.output->string(),
                                 std::strerror(errno)));
  }
  const std::string line = token + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) {
    const int err = errno;
    ::unlink(options.output->c_str());
    throw RuntimeError(
        fmt::format("cannot write '{}': {}", options.output->string(), std::strerror(err)));
  }
  std::fprintf(stderr, "kiln rpc-token: wrote a 256-bit token to %s (mode 0600)\n",
               options.output->c_str());
  return kExitOk;
}

}  // namespace kiln::tool
