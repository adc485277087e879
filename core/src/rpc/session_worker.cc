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
// What it could not do is logged once, and docs/rpc.md says what a session can reach then.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "kiln/error.h"
#include "kiln/plugin_discovery.h"
#include "kiln/runtime.h"
#include "rpc/connection.h"
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

void warn(const std::string& m) { log(LogLevel::kWarn, "rpc-session", m); }

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
      warn(
          fmt::format("session {} with {}: a call did not return within {} s of the end of the "
                      "session; ending its process",
                      state.id, state.conn->peer(), kCancelGrace.count()));
      end_descendants(kEndDescendantsLimit);
      std::fflush(nullptr);
      ::_exit(4);
    }
  }
}

// Waits for the server's start message on the channel (kSessionFd): a 4-byte length and the
// encoded SessionStart, the client's socket riding on it with SCM_RIGHTS when the session is
// not relayed; that socket then replaces the channel on kSessionFd. nullopt when the server
// closed the channel first (it no longer needs this worker). Throws ValueError for a message
// that does not parse.
std::optional<SessionStart> wait_for_session() {
  constexpr uint32_t kMaxStartBytes = 64 << 10;
  uint32_t length = 0;
  size_t got = 0;
  int passed = -1;
  while (got < sizeof(length)) {
    iovec iov{reinterpret_cast<char*>(&length) + got, sizeof(length) - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(kSessionFd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (passed >= 0) ::close(passed);
      return std::nullopt;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && passed < 0) {
        std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
      }
    }
    got += static_cast<size_t>(n);
  }
  if (length > kMaxStartBytes) {
    throw ValueError(
        fmt::format("a start message of {} bytes (at most {})", length, kMaxStartBytes));
  }
  std::string text(length, '\0');
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::recv(kSessionFd, text.data() + at, text.size() - at, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (passed >= 0) ::close(passed);
      return std::nullopt;
    }
    at += static_cast<size_t>(n);
  }
  if (passed >= 0) {
    // The client's socket becomes the session's; the channel (its old occupant) closes.
    ::dup3(passed, kSessionFd, O_CLOEXEC);
    ::close(passed);
  }
  return decode_session_start(text);
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
    warn(fmt::format("session process {}: {}", self, why));
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
    warn(fmt::format("session process {}: cannot enter its work directory: {}", self,
                     std::strerror(errno)));
  }

  // Ready: everything above may happen before a client asked for a session (a worker started
  // ahead); from here on this process serves the one session it is handed.
  std::optional<SessionStart> start;
  try {
    start = wait_for_session();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-rpc-session: %s\n", e.what());
    return 2;
  }
  if (!start) return 0;  // the server closed the channel: no session for this process

  SessionState state;
  state.conn = Connection::adopt(kSessionFd, start->peer);
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
