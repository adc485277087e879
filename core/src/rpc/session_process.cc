// SPDX-License-Identifier: Apache-2.0
#include "rpc/session_process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "kiln/error.h"
#include "rpc/connection.h"

extern char** environ;

namespace kiln::rpc {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kWorkerName[] = "kiln-rpc-session";
// Variables that hold secrets: never passed to a worker.
constexpr const char* kSecretVariables[] = {"KILN_RPC_TOKEN=", "KILN_TRACKER_TOKEN="};

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ValueError(fmt::format("{}: '{}' is not a number", flag, text));
  }
  return value;
}

double parse_seconds(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw ValueError(fmt::format("{}: '{}' is not a number of seconds", flag, text));
}

}  // namespace

std::vector<std::string> worker_arguments(const WorkerConfig& c) {
  std::vector<std::string> a = {
      "--sessions-root",
      c.sessions_root.string(),
      "--work-dir",
      c.work_dir.string(),
      "--id",
      std::to_string(c.id),
      "--peer",
      c.peer,
      "--timeout",
      fmt::format("{}", c.timeout_s),
      "--time-left",
      fmt::format("{}", c.time_left_s),
      "--max-memory",
      std::to_string(c.max_memory_bytes),
      "--max-handles",
      std::to_string(c.max_handles),
      "--max-upload",
      std::to_string(c.max_upload_bytes),
      "--idle-timeout-ms",
      std::to_string(c.idle_timeout_ms),
      "--write-timeout-ms",
      std::to_string(c.write_timeout_ms),
      "--log-level",
      std::to_string(static_cast<int>(c.log_level)),
      "--server-pid",
      std::to_string(c.server_pid),
  };
  if (c.test_functions) a.emplace_back("--test-functions");
  if (c.echo_function) a.emplace_back("--echo-function");
  if (c.plugin_set) {
    a.emplace_back("--plugin-set");
    a.push_back(c.plugin_set->string());
  }
  for (const fs::path& p : c.search_paths) {
    a.emplace_back("--search-path");
    a.push_back(p.string());
  }
  for (const fs::path& p : c.hidden_files) {
    a.emplace_back("--hide");
    a.push_back(p.string());
  }
  return a;
}

WorkerConfig parse_worker_arguments(const std::vector<std::string>& args) {
  WorkerConfig c;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--test-functions") {
      c.test_functions = true;
      continue;
    }
    if (flag == "--echo-function") {
      c.echo_function = true;
      continue;
    }
    if (i + 1 >= args.size()) throw ValueError(fmt::format("{} needs a value", flag));
    const std::string& v = args[++i];
    if (flag == "--sessions-root") {
      c.sessions_root = v;
    } else if (flag == "--work-dir") {
      c.work_dir = v;
    } else if (flag == "--id") {
      c.id = parse_number<uint64_t>(flag, v);
    } else if (flag == "--peer") {
      c.peer = v;
    } else if (flag == "--timeout") {
      c.timeout_s = parse_seconds(flag, v);
    } else if (flag == "--time-left") {
      c.time_left_s = parse_seconds(flag, v);
    } else if (flag == "--max-memory") {
      c.max_memory_bytes = parse_number<uint64_t>(flag, v);
    } else if (flag == "--max-handles") {
      c.max_handles = parse_number<uint64_t>(flag, v);
    } else if (flag == "--max-upload") {
      c.max_upload_bytes = parse_number<uint64_t>(flag, v);
    } else if (flag == "--idle-timeout-ms") {
      c.idle_timeout_ms = parse_number<int64_t>(flag, v);
    } else if (flag == "--write-timeout-ms") {
      c.write_timeout_ms = parse_number<int64_t>(flag, v);
    } else if (flag == "--log-level") {
      const int level = parse_number<int>(flag, v);
      if (level < static_cast<int>(LogLevel::kDebug) || level > static_cast<int>(LogLevel::kOff)) {
        throw ValueError(fmt::format("{}: {} is not a LogLevel (0 debug .. 4 off)", flag, level));
      }
      c.log_level = static_cast<LogLevel>(level);
    } else if (flag == "--server-pid") {
      c.server_pid = parse_number<pid_t>(flag, v);
    } else if (flag == "--plugin-set") {
      c.plugin_set = fs::path(v);
    } else if (flag == "--search-path") {
      c.search_paths.emplace_back(v);
    } else if (flag == "--hide") {
      c.hidden_files.emplace_back(v);
    } else {
      throw ValueError(fmt::format("unknown argument '{}'", flag));
    }
  }
  if (c.sessions_root.empty() || c.work_dir.empty()) {
    throw ValueError("--sessions-root and --work-dir are required");
  }
  return c;
}

fs::path find_session_worker(const fs::path& configured) {
  if (!configured.empty()) {
    if (::access(configured.c_str(), X_OK) != 0) {
      throw RuntimeError(
          fmt::format("the session worker '{}' is not an executable file", configured.string()));
    }
    return configured;
  }
  if (const char* env = std::getenv("KILN_RPC_SESSION_WORKER"); env != nullptr && *env != 0) {
    return find_session_worker(env);
  }
  std::vector<fs::path> tried;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_session_worker), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::error_code ec;
    const fs::path lib_dir = fs::canonical(info.dli_fname, ec).parent_path();
    for (const fs::path& candidate :
         {lib_dir.parent_path() / "libexec" / "kiln" / kWorkerName,
          lib_dir.parent_path() / "bin" / kWorkerName, lib_dir / kWorkerName}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      tried.push_back(candidate);
    }
  }
  std::string where;
  for (const fs::path& p : tried) where += (where.empty() ? "" : ", ") + p.string();
  throw RuntimeError(fmt::format(
      "cannot find the session worker {} (looked at {}); set $KILN_RPC_SESSION_WORKER or "
      "ServerOptions::session_worker, or run sessions in the server's process "
      "(--session-isolation thread)",
      kWorkerName, where.empty() ? "nothing: libkiln's location is unknown" : where));
}

SessionProcess::SessionProcess(const fs::path& worker, const WorkerConfig& config, int session_fd) {
  std::vector<std::string> args = worker_arguments(config);
  args.insert(args.begin(), worker.string());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    bool secret = false;
    for (const char* prefix : kSecretVariables) {
      secret = secret || std::strncmp(*e, prefix, std::strlen(prefix)) == 0;
    }
    if (!secret) envp.push_back(*e);
  }
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, session_fd, 3);
  posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const int rc = ::posix_spawn(&pid_, worker.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    pid_ = -1;
    throw RuntimeError(
        fmt::format("cannot start the session worker {}: {}", worker.string(), std::strerror(rc)));
  }
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

SessionProcess::~SessionProcess() {
  if (!status_ && pid_ > 0) {
    signal(SIGKILL);
    wait(std::nullopt);
  }
  if (pidfd_ >= 0) ::close(pidfd_);
}

void SessionProcess::signal(int sig) noexcept {
  if (status_ || pid_ <= 0) return;
  // The group: processes the session spawned go too (unless they left it).
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

std::optional<int> SessionProcess::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (status_) return status_;
  const auto deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, timeout ? WNOHANG : 0);
    if (r == pid_) {
      status_ = status;
      // The group's leftovers (a process the session started and did not wait for).
      ::kill(-pid_, SIGKILL);
      return status_;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {  // reaped elsewhere (a SIGCHLD handler set to SIG_IGN): gone all the same
      status_ = 0;
      return status_;
    }
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(20));
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count()));
    } else {
      std::this_thread::sleep_for(slice);
    }
  }
}

bool crashed(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL && WTERMSIG(status) != SIGTERM;
}

std::string relay(Connection& client, int worker_fd, const SessionProcess& worker,
                  const std::atomic<bool>& stop) {
  constexpr size_t kBufferBytes = size_t{256} << 10;
  std::vector<uint8_t> to_worker;
  std::vector<uint8_t> to_client;
  size_t to_worker_at = 0;
  size_t to_client_at = 0;
  bool client_open = true;  // the client may still send
  bool worker_open = true;  // the worker may still send
  bool tls_wants_write = false;
  tls::Session& tls = *client.tls_session();
  const int client_fd = client.fd();
  ::fcntl(client_fd, F_SETFL, ::fcntl(client_fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(worker_fd, F_SETFL, ::fcntl(worker_fd, F_GETFL) | O_NONBLOCK);
  std::vector<uint8_t> chunk(size_t{64} << 10);
  while (!stop.load()) {
    bool moved = false;  // bytes moved this round: go on without waiting in poll
    // Client -> worker: decrypt what arrived (and what TLS already holds).
    if (client_open && to_worker.size() < kBufferBytes) {
      tls_wants_write = false;  // as the last TLS call says, below
      const ssize_t got = tls.recv(chunk.data(), chunk.size());
      if (got > 0) {
        moved = true;
        to_worker.insert(to_worker.end(), chunk.begin(), chunk.begin() + got);
      } else if (got == 0) {
        client_open = false;
        ::shutdown(worker_fd, SHUT_WR);
      } else if (errno == EPROTO) {
        return fmt::format("the encrypted channel failed its integrity check ({})", tls.error());
      } else if (errno != EAGAIN && errno != EINTR) {
        return fmt::format("the client's connection failed: {}", std::strerror(errno));
      } else {
        tls_wants_write = tls.wants_write();
      }
    }
    if (to_worker_at < to_worker.size()) {
      const ssize_t n = ::send(worker_fd, to_worker.data() + to_worker_at,
                               to_worker.size() - to_worker_at, MSG_NOSIGNAL);
      if (n > 0) {
        to_worker_at += static_cast<size_t>(n);
        moved = true;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return "the session worker stopped reading";
      if (to_worker_at == to_worker.size()) {
        to_worker.clear();
        to_worker_at = 0;
      }
    }
    // Worker -> client.
    if (worker_open && to_client.size() < kBufferBytes) {
      const ssize_t got = ::recv(worker_fd, chunk.data(), chunk.size(), 0);
      if (got > 0) {
        moved = true;
        to_client.insert(to_client.end(), chunk.begin(), chunk.begin() + got);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        worker_open = false;  // it ended the session, or its end of the pair failed
      }
    }
    if (to_client_at < to_client.size()) {
      tls_wants_write = false;
      const ssize_t n = tls.send(to_client.data() + to_client_at, to_client.size() - to_client_at);
      if (n > 0) {
        to_client_at += static_cast<size_t>(n);
        moved = true;
      }
      if (n < 0) {
        if (errno == EPROTO) {
          return fmt::format("the encrypted channel failed ({})", tls.error());
        }
        if (errno != EAGAIN && errno != EINTR) return "the client's connection closed";
        tls_wants_write = tls.wants_write();
      }
      if (to_client_at == to_client.size()) {
        to_client.clear();
        to_client_at = 0;
      }
    }
    if (!worker_open && to_client.empty()) return "the session ended";
    if (!client_open && !worker_open) return "the client closed the connection";
    if (moved) continue;
    // Wait for something to do.
    pollfd fds[3];
    nfds_t count = 0;
    short client_events = 0;
    if ((client_open && to_worker.size() < kBufferBytes) || tls_wants_write)
      client_events |= POLLIN;
    if (!to_client.empty() || tls_wants_write) client_events |= POLLOUT;
    fds[count++] = {client_fd, client_events, 0};
    short worker_events = 0;
    if (worker_open && to_client.size() < kBufferBytes) worker_events |= POLLIN;
    if (!to_worker.empty()) worker_events |= POLLOUT;
    fds[count++] = {worker_fd, worker_events, 0};
    if (worker.exit_fd() >= 0) fds[count++] = {worker.exit_fd(), POLLIN, 0};
    if (client_open && to_worker.size() < kBufferBytes && tls.pending() > 0) {
      continue;  // decrypted bytes wait already
    }
    const int r = ::poll(fds, count, 100);
    if (r < 0 && errno != EINTR) return fmt::format("poll failed: {}", std::strerror(errno));
    if ((fds[0].revents & (POLLERR | POLLHUP)) != 0 && (fds[0].revents & POLLIN) == 0) {
      client_open = false;
      ::shutdown(worker_fd, SHUT_WR);
      if (to_client.empty()) return "the client closed the connection";
    }
  }
  return "the server is stopping";
}

void make_non_dumpable() noexcept { ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

}  // namespace kiln::rpc
