// SPDX-License-Identifier: Apache-2.0
// The session worker (kiln-rpc-session): one RPC session in a process of its own
// (rpc/session_process.h). It confines itself before it serves anything uploaded:
//   1. non-dumpable, and ends with the server (PR_SET_PDEATHSIG);
//   2. a mount namespace of its own where it can make one (as root, or in a user namespace):
//      the server's token files read as empty, and the sessions' root shows only this
//      session's directory;
//   3. no capabilities and no new privileges: it cannot read the memory, environment or
//      descriptors of the server or of other sessions (all non-dumpable), whoever runs them;
//   4. its process tree ends with it (issue 37, item 3): the session's socket is close-on-exec
//      (a process an uploaded kernel starts does not hold it), it joins the session's cgroup
//      where the server made one, and as a child subreaper it kills and reaps every descendant
//      (orphaned, setsid() or not) before it exits.
// Under a token it holds the session's TLS connection (issue 37, item 9): it gets the key the
// server derived from the token (never the token) first on its channel, and runs each client's
// TLS handshake and reads its hello itself, before anything uploaded runs; the server gets a
// report of each and decides. OpenSSL needs nothing the confinement takes away (getrandom(2) for
// its key shares; its configuration file stays readable).
// What it could not do is logged once, and docs/rpc.md says what a session can reach then.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "kiln/error.h"
#include "kiln/plugin_discovery.h"
#include "kiln/runtime.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/session_process.h"
#include "rpc/session_server.h"
#include "runtime/builtin_libraries.h"

namespace kiln::rpc {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSessionFd = 3;
// How long a call that ignores cancellation may run on once the session must end.
constexpr auto kCancelGrace = std::chrono::seconds(2);
// How long the worker spends killing and reaping its descendants as it ends.
constexpr auto kEndDescendantsLimit = std::chrono::milliseconds(500);

void warn_session(const std::string& m) { log(LogLevel::kWarn, "rpc-session", m); }

bool write_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A mount namespace of this process's own; in a user namespace (mapping this user to itself)
// when it lacks CAP_SYS_ADMIN. Returns why not, or "".
std::string enter_mount_namespace() {
  if (::unshare(CLONE_NEWNS) == 0) return "";
  const int direct = errno;
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    return fmt::format("unshare(CLONE_NEWNS): {}; with a user namespace: {}", std::strerror(direct),
                       std::strerror(errno));
  }
  if (!write_file("/proc/self/setgroups", "deny") ||
      !write_file("/proc/self/uid_map", fmt::format("{} {} 1", uid, uid)) ||
      !write_file("/proc/self/gid_map", fmt::format("{} {} 1", gid, gid))) {
    return fmt::format("cannot map the user in a user namespace: {}", std::strerror(errno));
  }
  return "";
}

// Makes `work_dir` the only directory visible under `root` and every `hidden` file read as
// empty, in this process's mount namespace. Returns what it could not do, or "".
std::string confine_files(const fs::path& root, const fs::path& work_dir,
                          const std::vector<fs::path>& hidden) {
  if (std::string why = enter_mount_namespace(); !why.empty()) return why;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return fmt::format("cannot make the mounts private: {}", std::strerror(errno));
  }
  for (const fs::path& file : hidden) {
    if (::mount("/dev/null", file.c_str(), nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) {
      return fmt::format("cannot hide a token file: {}", std::strerror(errno));
    }
  }
  if (work_dir.parent_path() != root) return "";
  // Hold the session's directory, cover the root with an empty private tmpfs, and put the
  // directory back under its own name: other sessions' directories are out of sight.
  const int dir_fd = ::open(work_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return fmt::format("cannot open the session directory: {}", std::strerror(errno));
  const std::string held = fmt::format("/proc/self/fd/{}", dir_fd);
  std::string why;
  if (::mount("kiln-sessions", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k") !=
      0) {
    why = fmt::format("cannot cover the sessions' root: {}", std::strerror(errno));
  } else if (::mkdir(work_dir.c_str(), 0700) != 0 ||
             ::mount(held.c_str(), work_dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    why = fmt::format("cannot show the session's directory: {}", std::strerror(errno));
  }
  ::close(dir_fd);
  return why;
}

// Drops every capability (bounding, ambient, effective, permitted, inheritable) and forbids
// gaining new ones. Returns what failed, or "".
std::string drop_privileges() {
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  for (int cap = 0; cap <= 63; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    return fmt::format("cannot drop capabilities: {}", std::strerror(errno));
  }
  return "";
}

// Ends the session at its deadline or on SIGTERM/SIGINT/SIGHUP; ends the process when a call
// ignores that for kCancelGrace. Runs until the session finished.
void watch(SessionState& state, const sigset_t& signals) {
  std::optional<Clock::time_point> must_end_by;
  while (!state.finished.load()) {
    timespec tick{0, 100'000'000L};
    const int sig = ::sigtimedwait(&signals, nullptr, &tick);
    if (state.finished.load()) break;  // woken by session_worker_main as the session ended
    const auto now = Clock::now();
    if (sig > 0) {
      // Also when a hang-up of the client cancelled the session already: the server asks it
      // to end, and a call that ignores that gets the grace, no more.
      state.cancelled = true;
      state.conn->shutdown();
      if (!must_end_by) must_end_by = now + kCancelGrace;
    }
    if (state.deadline && now >= *state.deadline && !state.timed_out.load()) {
      expire_session(state);
      if (!must_end_by) must_end_by = now + kCancelGrace;
    }
    if (must_end_by && now >= *must_end_by && !state.finished.load()) {
      warn_session(
          fmt::format("session {} with {}: a call did not return within {} s of the end of the "
                      "session; ending its process",
                      state.id, state.conn->peer(), kCancelGrace.count()));
      end_descendants(kEndDescendantsLimit);
      std::fflush(nullptr);
      ::_exit(4);
    }
  }
}

// The key a worker under a token gets first on its channel (kSessionFd), as a server-side
// session Context. Throws RuntimeError when it does not come or is not a key.
std::unique_ptr<tls::Context> receive_key() {
  int passed = -1;
  auto message = read_channel_message(kSessionFd, &passed);
  if (passed >= 0) ::close(passed);
  tls::Context::KeyBytes key{};
  if (!message || message->first != ChannelMessage::kKey || message->second.size() != key.size()) {
    throw RuntimeError("the server did not send the session key first");
  }
  std::memcpy(key.data(), message->second.data(), key.size());
  auto context =
      std::make_unique<tls::Context>(tls::Context::Side::kServer, tls::Purpose::kSession, key);
  OPENSSL_cleanse(key.data(), key.size());
  OPENSSL_cleanse(message->second.data(), message->second.size());
  return context;
}

// Runs the TLS handshake keyed by `context` on `conn` and reads the client's hello, both by
// `deadline` (the server's one handshake deadline); what came of it, for the server.
HandshakeReport run_handshake(Connection& conn, const tls::Context& context,
                              Clock::time_point deadline) {
  HandshakeReport report;
  const auto limit = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  conn.set_timeouts(std::max(limit, std::chrono::milliseconds(1)),
                    std::max(limit, std::chrono::milliseconds(1)));
  conn.set_deadline(deadline);
  try {
    conn.start_tls(context, deadline);
  } catch (const tls::HandshakeError& e) {
    using Kind = tls::HandshakeError::Kind;
    switch (e.kind()) {
      case Kind::kWrongKey:
        report.outcome = HandshakeReport::Outcome::kWrongKey;
        break;
      case Kind::kTimedOut:
        report.outcome = HandshakeReport::Outcome::kTimedOut;
        break;
      case Kind::kClosed:
        report.outcome = HandshakeReport::Outcome::kClosed;
        break;
      case Kind::kNotTls:
        report.outcome = HandshakeReport::Outcome::kNotTls;
        break;
    }
    report.detail = e.what();
    return report;
  } catch (const std::exception& e) {
    report.outcome = HandshakeReport::Outcome::kClosed;
    report.detail = e.what();
    return report;
  }
  report.outcome = HandshakeReport::Outcome::kVerified;
  try {
    const handshake::ClientHello hello = handshake::read_client_hello(conn);
    report.hello = true;
    report.version = hello.version;
    report.key = hello.key;
    report.session_timeout_s = hello.session_timeout_s;
  } catch (const std::exception& e) {
    report.detail = e.what();
  }
  return report;
}

// What the worker waits for until its session is given: the start message and the client's
// connection (the socket that rode on it, or the one a handshake here verified).
struct Handed {
  SessionStart start;
  std::unique_ptr<Connection> conn;
};

// Waits on the channel (kSessionFd) for the server's messages until it hands this worker its
// session: a start message with the client's socket (that socket then replaces the channel on
// kSessionFd); under a token (`context`), handshake requests first, each reported, then
// answered with a refusal (the worker then waits for the next client) or with the start
// message. nullopt when the server closed the channel first (it no longer needs this worker).
// Throws ValueError or RuntimeError for messages that do not parse or come out of turn.
std::optional<Handed> wait_for_session(const tls::Context* context) {
  std::unique_ptr<Connection> verified;  // the client of the last handshake, hello read
  while (true) {
    int passed = -1;
    auto message = read_channel_message(kSessionFd, &passed);
    if (!message) return std::nullopt;
    const auto [kind, body] = std::move(*message);
    if (kind == ChannelMessage::kStart) {
      Handed handed;
      handed.start = decode_session_start(body);
      if (passed >= 0) {
        // The client's socket becomes the session's; the channel (its old occupant) closes.
        ::dup3(passed, kSessionFd, O_CLOEXEC);
        ::close(passed);
        handed.conn = Connection::adopt(kSessionFd, handed.start.peer);
        return handed;
      }
      if (!verified || handed.start.accepted_hello.empty()) {
        throw RuntimeError("a start message without a client");
      }
      handed.conn = std::move(verified);
      // The server hello, by the handshake's deadline still; a client gone by then ends the
      // session at its first read.
      try {
        handshake::send_server_hello(*handed.conn, wire::HelloStatus::kAccepted,
                                     handed.start.accepted_hello);
      } catch (const std::exception& e) {
        log(LogLevel::kInfo, "rpc-session",
            fmt::format("session {} with {}: the accepted hello did not reach the client: {}",
                        handed.start.id, handed.start.peer, e.what()));
      }
      handed.conn->set_deadline(std::nullopt);
      ::close(kSessionFd);  // the channel: nothing more comes on it
      return handed;
    }
    if (passed >= 0 && kind != ChannelMessage::kHandshake) ::close(passed);
    if (kind == ChannelMessage::kHandshake) {
      verified.reset();
      if (context == nullptr || passed < 0) {
        if (passed >= 0) ::close(passed);
        throw RuntimeError("a handshake request without a key or without a client");
      }
      const HandshakeRequest request = decode_handshake_request(body);
      auto conn = Connection::adopt(passed, request.peer);
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(request.time_left_s));
      const HandshakeReport report = run_handshake(*conn, *context, deadline);
      if (report.hello) verified = std::move(conn);
      send_channel_message(kSessionFd, ChannelMessage::kReport, encode_handshake_report(report),
                           -1);
      continue;  // a connection that did not verify closes here
    }
    if (kind == ChannelMessage::kAnswer) {
      const HelloAnswer answer = decode_hello_answer(body);
      if (verified) {
        try {
          handshake::send_server_hello(*verified, static_cast<wire::HelloStatus>(answer.status),
                                       answer.message);
        } catch (const std::exception&) {
          // The client left: nothing to tell it.
        }
        verified.reset();
      }
      send_channel_message(kSessionFd, ChannelMessage::kAnswered, "", -1);
      continue;
    }
    throw RuntimeError(
        fmt::format("an unexpected message '{}' on the channel", static_cast<char>(kind)));
  }
}

// Joins the cgroup `dir` (its cgroup.procs); returns why not, or "".
std::string join_cgroup(const fs::path& dir) {
  if (write_file((dir / "cgroup.procs").c_str(), "0")) return "";
  return fmt::format("cannot join the session's cgroup {}: {}", dir.string(), std::strerror(errno));
}

}  // namespace

int session_worker_main(int argc, char** argv) {
  make_non_dumpable();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // Nothing this process starts may hold the session's socket: a child that did would keep the
  // session (and the server's slot) open after this process ended.
  ::fcntl(kSessionFd, F_SETFD, FD_CLOEXEC);
  // Orphaned descendants become this process's children (not init's), so that it can end them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  WorkerConfig config;
  try {
    config = parse_worker_arguments(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "kiln-rpc-session: %s\nThis program serves one session of `kiln rpc-server`; "
                 "the server starts it.\n",
                 e.what());
    return 2;
  }
  if (config.server_pid > 0 && ::getppid() != config.server_pid) return 3;  // the server is gone
  set_log_level(config.log_level);
  // First, before anything here can start a process: all of them then belong to the cgroup.
  if (!config.cgroup.empty()) {
    if (std::string why = join_cgroup(config.cgroup); !why.empty()) {
      log(LogLevel::kInfo, "rpc-session",
          fmt::format("session process {}: {}; its descendants are ended by this process alone",
                      ::getpid(), why));
    }
  }
  struct stat st {};
  if (::fstat(kSessionFd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    std::fprintf(stderr, "kiln-rpc-session: descriptor %d is not the session's socket\n",
                 kSessionFd);
    return 2;
  }

  const fs::path work_dir = config.work_dir;
  const pid_t self = ::getpid();
  if (std::string why = confine_files(config.sessions_root, work_dir, config.hidden_files);
      !why.empty()) {
    log(LogLevel::kInfo, "rpc-session",
        fmt::format("session process {}: files not confined ({}): the session can read what "
                    "the server's user can (docs/rpc.md, \"What a session can reach\")",
                    self, why));
  }
  if (std::string why = drop_privileges(); !why.empty()) {
    warn_session(fmt::format("session process {}: {}", self, why));
  }
  // Under a token the server's key comes first: the TLS handshakes of its clients run here.
  std::unique_ptr<tls::Context> tls_context;
  if (config.tls) {
    try {
      tls_context = receive_key();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln-rpc-session: %s\n", e.what());
      return 2;
    }
  }

  // Signals are taken by the watcher only (every thread started below inherits the mask).
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, sig);
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RuntimeOptions runtime_options;
  runtime_options.plugin_set = config.plugin_set.value_or(fs::path());
  runtime_options.search_paths = config.search_paths;
  runtime_options.search_install_prefix = false;
  Runtime runtime(runtime_options);
  // The builtin libraries (libkiln_llm: the LLM runtime's VM builtins), for this runtime; and,
  // as in TVM's server, the work directory is the current one, so a relative path given to a
  // function (a weight folder to vm.builtin.tensor_cache.load) names an uploaded file.
  load_builtin_libraries(runtime);
  if (::chdir(work_dir.c_str()) != 0) {
    warn_session(fmt::format("session process {}: cannot enter its work directory: {}", self,
                             std::strerror(errno)));
  }

  // Ready: everything above may happen before a client asked for a session (a worker started
  // ahead); from here on this process serves the one session it is handed.
  std::optional<Handed> handed;
  try {
    handed = wait_for_session(tls_context.get());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-rpc-session: %s\n", e.what());
    return 2;
  }
  if (!handed) return 0;  // the server closed the channel: no session for this process
  tls_context.reset();    // the session's Connection holds what it needs
  const SessionStart* start = &handed->start;

  SessionState state;
  state.conn = std::move(handed->conn);
  state.id = start->id;
  state.timeout_s = start->timeout_s;
  if (start->timeout_s > 0) {
    state.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(start->time_left_s));
  }
  state.max_memory_bytes = config.max_memory_bytes;
  state.max_handles = config.max_handles;
  state.max_upload_bytes = config.max_upload_bytes;
  state.idle_timeout = std::chrono::milliseconds(config.idle_timeout_ms);
  state.write_timeout = std::chrono::milliseconds(config.write_timeout_ms);
  state.enable_test_functions = config.test_functions;
  state.enable_echo = config.echo_function;

  std::thread watcher([&] { watch(state, signals); });
  serve_session_in(state, work_dir, runtime);
  state.finished = true;
  // Wakes the watcher now rather than at its next tick: the client's close() waits for this
  // process to end (it measured 100 ms per session).
  ::pthread_kill(watcher.native_handle(), SIGHUP);
  watcher.join();
  end_descendants(kEndDescendantsLimit);
  return 0;
}

}  // namespace kiln::rpc
