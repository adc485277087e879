// SPDX-License-Identifier: Apache-2.0
#include "rpc/session_process.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
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

// Writes `text` to the cgroup file `path`; whether it took it.
bool write_cgroup_file(const fs::path& path, const std::string& text) noexcept {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// This process's cgroup v2 directory (the mount point of the unified hierarchy joined with
// the "0::" line of /proc/self/cgroup); empty where there is none.
fs::path own_cgroup() {
  std::string relative;
  {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("0::", 0) == 0) relative = line.substr(3);
    }
  }
  if (relative.empty() || relative.find("(deleted)") != std::string::npos) return {};
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    // "<id> <parent> <dev> <root> <mount point> <options> [optional...] - <type> <source> ..."
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::vector<std::string> fields;
    size_t at = 0;
    for (int i = 0; i < 5 && at < dash; ++i) {
      const size_t end = line.find(' ', at);
      fields.push_back(line.substr(at, end - at));
      at = end + 1;
    }
    if (fields.size() < 5 || fields[3] != "/") continue;  // a mount of part of the tree
    return fs::path(fields[4]) / fs::path(relative).relative_path();
  }
  return {};
}

// A fresh cgroup for one worker (one session) under this process's own, or empty where the
// machine does not let this process make one (no cgroup v2, not writable, turned off).
fs::path make_session_cgroup() {
  if (const char* env = std::getenv("KILN_RPC_SESSION_CGROUP");
      env != nullptr && std::strcmp(env, "off") == 0) {
    return {};
  }
  static const fs::path parent = own_cgroup();
  if (parent.empty()) return {};
  static std::atomic<uint64_t> serial{0};
  fs::path dir = parent / fmt::format("kiln-session-{}-{}", ::getpid(), serial.fetch_add(1));
  if (::mkdir(dir.c_str(), 0755) != 0) return {};
  return dir;
}

}  // namespace

std::vector<std::string> worker_arguments(const WorkerConfig& c) {
  std::vector<std::string> a = {
      "--sessions-root",    c.sessions_root.string(),
      "--work-dir",         c.work_dir.string(),
      "--max-memory",       std::to_string(c.max_memory_bytes),
      "--max-handles",      std::to_string(c.max_handles),
      "--max-upload",       std::to_string(c.max_upload_bytes),
      "--idle-timeout-ms",  std::to_string(c.idle_timeout_ms),
      "--write-timeout-ms", std::to_string(c.write_timeout_ms),
      "--log-level",        std::to_string(static_cast<int>(c.log_level)),
      "--server-pid",       std::to_string(c.server_pid),
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
  if (!c.cgroup.empty()) {
    a.emplace_back("--cgroup");
    a.push_back(c.cgroup.string());
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
    } else if (flag == "--cgroup") {
      c.cgroup = v;
    } else {
      throw ValueError(fmt::format("unknown argument '{}'", flag));
    }
  }
  if (c.sessions_root.empty() || c.work_dir.empty()) {
    throw ValueError("--sessions-root and --work-dir are required");
  }
  return c;
}

std::string encode_session_start(const SessionStart& start) {
  const std::string args[] = {"--id",        std::to_string(start.id),
                              "--peer",      start.peer,
                              "--timeout",   fmt::format("{}", start.timeout_s),
                              "--time-left", fmt::format("{}", start.time_left_s)};
  std::string bytes;
  for (const std::string& a : args) {
    bytes += a;
    bytes.push_back('\0');
  }
  return bytes;
}

SessionStart decode_session_start(const std::string& bytes) {
  std::vector<std::string> args;
  for (size_t at = 0; at < bytes.size();) {
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos) throw ValueError("the session's start message is cut short");
    args.push_back(bytes.substr(at, end - at));
    at = end + 1;
  }
  SessionStart start;
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) throw ValueError(fmt::format("{} needs a value", flag));
    const std::string& v = args[i + 1];
    if (flag == "--id") {
      start.id = parse_number<uint64_t>(flag, v);
    } else if (flag == "--peer") {
      start.peer = v;
    } else if (flag == "--timeout") {
      start.timeout_s = parse_seconds(flag, v);
    } else if (flag == "--time-left") {
      start.time_left_s = parse_seconds(flag, v);
    } else {
      throw ValueError(fmt::format("unknown start argument '{}'", flag));
    }
  }
  return start;
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

SessionProcess::SessionProcess(const fs::path& worker, const WorkerConfig& given)
    : write_timeout_(given.write_timeout_ms) {
  WorkerConfig config = given;
  // The channel: the worker's start message, then (under a token) the session's plaintext.
  int pair[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw RuntimeError(
        fmt::format("cannot make a socket pair for a session worker: {}", std::strerror(errno)));
  }
  channel_ = pair[0];
  const int session_fd = pair[1];
  cgroup_ = make_session_cgroup();
  config.cgroup = cgroup_;
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
  ::close(session_fd);
  if (rc != 0) {
    pid_ = -1;
    close_channel();
    end_cgroup();
    throw RuntimeError(
        fmt::format("cannot start the session worker {}: {}", worker.string(), std::strerror(rc)));
  }
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

SessionProcess::SessionProcess(const fs::path& worker, const WorkerConfig& config, int session_fd)
    : SessionProcess(worker, config) {
  SessionStart start;
  start.id = config.id;
  start.peer = config.peer;
  start.timeout_s = config.timeout_s;
  start.time_left_s = config.time_left_s;
  begin(start, session_fd);
  close_channel();
}

void SessionProcess::begin(const SessionStart& start, int session_fd) {
  const std::string text = encode_session_start(start);
  // A 4-byte length, then the text; the socket, when there is one, rides on the first byte.
  const auto length = static_cast<uint32_t>(text.size());
  std::string bytes(reinterpret_cast<const char*>(&length), sizeof(length));
  bytes += text;
  iovec iov{bytes.data(), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (session_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &session_fd, sizeof(int));
  }
  // A blocking socket and a message far below its buffer: all of it goes, or the worker is gone.
  ssize_t sent = -1;
  do {
    sent = channel_ >= 0 ? ::sendmsg(channel_, &msg, MSG_NOSIGNAL) : -1;
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(bytes.size())) {
    throw RuntimeError(fmt::format("cannot hand session {} to its process {}: {}", start.id, pid_,
                                   sent < 0 ? std::strerror(errno) : "the message was cut"));
  }
}

void SessionProcess::close_channel() noexcept {
  if (channel_ >= 0) ::close(channel_);
  channel_ = -1;
}

bool SessionProcess::exited() const {
  if (status_) return true;
  if (pidfd_ < 0) return false;
  pollfd p{pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

SessionProcess::~SessionProcess() {
  close_channel();
  if (!status_ && pid_ > 0) {
    signal(SIGKILL);
    wait(std::nullopt);
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  end_cgroup();  // a no-op when wait() removed it
}

void SessionProcess::signal(int sig) noexcept {
  if (status_ || pid_ <= 0) return;
  // The group: processes the session spawned go too (unless they left it: the cgroup, where
  // there is one, holds those as well).
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
  if (sig == SIGKILL && !cgroup_.empty()) write_cgroup_file(cgroup_ / "cgroup.kill", "1");
}

void SessionProcess::end_cgroup() noexcept {
  // Once; cgroup_ itself never changes after construction (signal() may read it meanwhile).
  if (cgroup_.empty() || cgroup_ended_.exchange(true)) return;
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  // cgroup.kill (Linux 5.14) kills the whole cgroup at once; else each process it lists,
  // again until none is left (one may fork meanwhile).
  const bool killed = write_cgroup_file(cgroup_ / "cgroup.kill", "1");
  while (true) {
    if (!killed) {
      std::ifstream procs(cgroup_ / "cgroup.procs");
      for (pid_t p = 0; procs >> p;) ::kill(p, SIGKILL);
    }
    if (::rmdir(cgroup_.c_str()) == 0 || errno == ENOENT) break;
    if (errno != EBUSY || Clock::now() >= deadline) {
      log(LogLevel::kWarn, "rpc-server",
          fmt::format("cannot remove the session's cgroup {}: {}", cgroup_.string(),
                      std::strerror(errno)));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::optional<int> SessionProcess::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (status_) return status_;
  const auto deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, timeout ? WNOHANG : 0);
    if (r == pid_) {
      status_ = status;
      // The group's and the cgroup's leftovers (a process the session started that outlived
      // the worker: it crashed or was killed before it could end them itself).
      ::kill(-pid_, SIGKILL);
      end_cgroup();
      return status_;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {  // reaped elsewhere (a SIGCHLD handler set to SIG_IGN): gone all the same
      status_ = 0;
      ::kill(-pid_, SIGKILL);
      end_cgroup();
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

namespace {

// The slowest a client may take reply data: the plain path's rule (session_server.cc,
// kMinSessionBytesPerSecond with Connection::set_min_throughput), 1 MiB/s after the write
// timeout.
constexpr uint64_t kRelayMinBytesPerSecond = uint64_t{1} << 20;

// Bytes on their way in one direction: a buffer of fixed capacity that reads and decryption
// fill in place (one copy less than reading into a chunk and appending it).
class Pipe {
 public:
  explicit Pipe(size_t capacity) : bytes_(capacity) {}
  bool empty() const { return begin_ == end_; }
  size_t size() const { return end_ - begin_; }
  const uint8_t* data() const { return bytes_.data() + begin_; }
  // Room for more at the end. What waits moves to the front when the end is reached and little
  // waits (a cheap move); a full buffer waits to drain instead.
  size_t room() {
    if (end_ == bytes_.size() && begin_ > 0 && size() <= kCompactBytes) {
      std::memmove(bytes_.data(), bytes_.data() + begin_, size());
      end_ -= begin_;
      begin_ = 0;
    }
    return bytes_.size() - end_;
  }
  uint8_t* space() { return bytes_.data() + end_; }
  // `n` bytes were put at space().
  void filled(size_t n) { end_ += n; }
  // `n` bytes from data() were sent.
  void took(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  void clear() { begin_ = end_ = 0; }

 private:
  static constexpr size_t kCompactBytes = size_t{64} << 10;
  std::vector<uint8_t> bytes_;
  size_t begin_ = 0;  // bytes before this one are sent
  size_t end_ = 0;    // bytes from this one are free
};

// The deadline of reply data the relay holds for the client: from the moment some is waiting,
// the write timeout plus 1 s per kRelayMinBytesPerSecond of every byte queued until the client
// took them all; and no wait for the client longer than the write timeout. A client that takes
// a little now and then cannot stretch it. No deadline with a write timeout of 0.
class ReplyDeadline {
 public:
  explicit ReplyDeadline(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  // `n` more bytes wait for the client.
  void queued(size_t n) {
    if (timeout_.count() <= 0) return;
    const auto now = Clock::now();
    if (!deadline_) {
      deadline_ = now + timeout_;
      last_progress_ = now;
    }
    *deadline_ += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(n) / kRelayMinBytesPerSecond));
  }
  // The client took some; `drained`: all that waited.
  void took(bool drained) {
    last_progress_ = Clock::now();
    if (drained) deadline_.reset();
  }
  // The earlier of the two limits, or none.
  std::optional<Clock::time_point> next() const {
    if (!deadline_) return std::nullopt;
    return std::min(*deadline_, last_progress_ + timeout_);
  }
  // Why the client lost its session, or "" while it is in time.
  std::string passed(size_t waiting) const {
    const auto limit = next();
    if (!limit || Clock::now() < *limit) return "";
    if (Clock::now() >= last_progress_ + timeout_) {
      return fmt::format("the client took no reply data for {} ms ({} bytes waiting)",
                         timeout_.count(), waiting);
    }
    return fmt::format(
        "the client took reply data too slowly: it must take it within the write timeout of {} "
        "ms plus 1 s per {} bytes ({} bytes waiting)",
        timeout_.count(), kRelayMinBytesPerSecond, waiting);
  }

 private:
  std::chrono::milliseconds timeout_;
  std::optional<Clock::time_point> deadline_;
  Clock::time_point last_progress_;
};

}  // namespace

std::string relay(Connection& client, int worker_fd, const SessionProcess& worker,
                  const std::atomic<bool>& stop) {
  using Outcome = tls::Session::Io::Outcome;
  // Per direction: a few socket buffers' worth, so that each wake-up moves a lot.
  constexpr size_t kBufferBytes = size_t{512} << 10;
  constexpr int kStopCheckMs = 100;  // how often `stop` is looked at while nothing happens
  tls::Session& tls = *client.tls_session();
  // Many records per socket read; every read below goes on until kWouldBlock before a poll.
  tls.read_ahead();
  const int client_fd = client.fd();
  ::fcntl(client_fd, F_SETFL, ::fcntl(client_fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(worker_fd, F_SETFL, ::fcntl(worker_fd, F_GETFL) | O_NONBLOCK);
  Pipe to_worker(kBufferBytes);
  Pipe to_client(kBufferBytes);
  ReplyDeadline reply_deadline(worker.write_timeout());
  bool client_sends = true;    // no close_notify, EOF or failure from the client yet
  bool worker_sends = true;    // the worker's end may still give bytes
  bool worker_takes = true;    // the worker's end still takes bytes
  bool worker_exited = false;  // its pidfd polled readable (without one, its end's EOF tells)
  // What a TLS read / write that would block waits for on the client's socket (0: nothing),
  // until poll() reports it: no read or write is tried again before (no would-block calls).
  short read_waits = 0;
  short write_waits = 0;
  bool worker_readable = true;  // false after a would-block recv, until poll() reports POLLIN
  while (!stop.load()) {
    bool moved = false;  // something happened this round: go on without waiting in poll
    // Client -> worker: decrypt what arrived (and what TLS already holds), record after record
    // until none is left or the buffer is full.
    while (client_sends && worker_takes && read_waits == 0 && to_worker.room() > 0) {
      const tls::Session::Io io = tls.read(to_worker.space(), to_worker.room());
      switch (io.outcome) {
        case Outcome::kData:
          moved = true;
          to_worker.filled(io.bytes);
          break;
        case Outcome::kWouldBlock:
          read_waits = io.wants_write ? POLLOUT : POLLIN;
          break;
        case Outcome::kPeerClosed:
          // close_notify or a half-close: the client sends no more, but may still read. The
          // worker sees the end of its input and ends the session; replies until then go out.
          moved = true;
          client_sends = false;
          break;
        case Outcome::kFailed:
          if (io.error == EPROTO) {
            return fmt::format("the encrypted channel failed its integrity check ({})",
                               tls.error());
          }
          return fmt::format("the client's connection failed: {}", std::strerror(io.error));
      }
    }
    if (!client_sends && to_worker.empty() && worker_takes) {
      ::shutdown(worker_fd, SHUT_WR);
      worker_takes = false;
    }
    if (!to_worker.empty() && worker_takes) {
      const ssize_t n = ::send(worker_fd, to_worker.data(), to_worker.size(), MSG_NOSIGNAL);
      if (n > 0) {
        to_worker.took(static_cast<size_t>(n));
        moved = true;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        // The worker's end closed: what the client sends now has nobody to go to.
        worker_takes = false;
        to_worker.clear();
        moved = true;
      }
    }
    // Worker -> client: as much as the buffer takes in one read, then encrypted and written
    // record after record until it is sent or the client's socket is full.
    if (worker_sends && worker_readable && to_client.room() > 0) {
      const ssize_t got = ::recv(worker_fd, to_client.space(), to_client.room(), 0);
      if (got > 0) {
        moved = true;
        to_client.filled(static_cast<size_t>(got));
        reply_deadline.queued(static_cast<size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR) || worker_exited) {
        // It ended the session, its end failed, or it exited and all it wrote is here (a
        // process it started may hold its end open: that must not keep the session).
        worker_sends = false;
        moved = true;
      } else if (errno == EAGAIN) {
        worker_readable = false;
      }
    }
    while (!to_client.empty() && write_waits == 0) {
      const tls::Session::Io io = tls.write(to_client.data(), to_client.size());
      switch (io.outcome) {
        case Outcome::kData:
          moved = true;
          to_client.took(io.bytes);
          reply_deadline.took(to_client.empty());
          break;
        case Outcome::kWouldBlock:
          write_waits = io.wants_write ? POLLOUT : POLLIN;
          break;
        case Outcome::kPeerClosed:
          return "the client closed the connection";
        case Outcome::kFailed:
          if (io.error == EPROTO) {
            return fmt::format("the encrypted channel failed ({})", tls.error());
          }
          return fmt::format("the client's connection failed: {}", std::strerror(io.error));
      }
    }
    if (!worker_sends && to_client.empty()) return "the session ended";
    if (std::string late = reply_deadline.passed(to_client.size()); !late.empty()) return late;
    if (moved) continue;

    // Nothing to do now: wait for one of the sockets or the worker's exit. A descriptor is
    // polled only for what would let the relay go on, so that a hang-up that changes nothing
    // (reported whatever is asked) cannot wake it again and again.
    pollfd fds[3];
    short client_events = static_cast<short>(read_waits | write_waits);
    const bool decrypted_waits =
        client_sends && worker_takes && to_worker.room() > 0 && tls.pending() > 0;
    if (decrypted_waits) {  // decrypted data waits in TLS: read it rather than wait
      read_waits = 0;
      continue;
    }
    // The client's socket is always watched: POLLHUP / POLLERR there end the relay.
    fds[0] = {client_fd, client_events, 0};
    short worker_events = 0;
    if (worker_sends && to_client.room() > 0) worker_events |= POLLIN;
    if (!to_worker.empty() && worker_takes) worker_events |= POLLOUT;
    fds[1] = {worker_events != 0 ? worker_fd : -1, worker_events, 0};
    fds[2] = {worker_exited ? -1 : worker.exit_fd(), POLLIN, 0};
    int wait_ms = kStopCheckMs;
    if (const auto limit = reply_deadline.next()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*limit - Clock::now());
      wait_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, kStopCheckMs));
    }
    const int r = ::poll(fds, 3, wait_ms);
    if (r < 0 && errno != EINTR) return fmt::format("poll failed: {}", std::strerror(errno));
    if (r <= 0) continue;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      // Reset, or closed in both directions: nothing can reach the client any more.
      return "the client's connection was closed or reset";
    }
    if ((fds[0].revents & read_waits) != 0) read_waits = 0;
    if ((fds[0].revents & write_waits) != 0) write_waits = 0;
    if ((fds[1].revents & (POLLIN | POLLERR | POLLHUP)) != 0) worker_readable = true;
    if ((fds[1].revents & (POLLERR | POLLHUP)) != 0 && (worker_events & POLLIN) == 0) {
      // Its end closed while the relay only had bytes for it: they have nobody to go to.
      worker_takes = false;
      to_worker.clear();
    }
    if ((fds[2].revents & POLLIN) != 0) {
      // Exited: what it wrote is in its end already; read that, then end (above).
      worker_exited = true;
      worker_readable = true;
      worker_takes = false;
      to_worker.clear();
    }
  }
  return "the server is stopping";
}

int end_descendants(std::chrono::milliseconds limit) noexcept {
  const auto deadline = Clock::now() + limit;
  const pid_t self = ::getpid();
  int reaped = 0;
  while (true) {
    // Children (orphaned descendants among them, this process being a subreaper): killed.
    if (DIR* proc = ::opendir("/proc")) {
      while (const dirent* e = ::readdir(proc)) {
        pid_t pid = 0;
        const char* name = e->d_name;
        const auto [end, ec] = std::from_chars(name, name + std::strlen(name), pid);
        if (ec != std::errc() || *end != 0 || pid == self) continue;
        char path[64];
        std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char stat[512];
        const ssize_t n = ::read(fd, stat, sizeof(stat) - 1);
        ::close(fd);
        if (n <= 0) continue;
        stat[n] = 0;
        // "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces and parentheses.
        const char* close_paren = std::strrchr(stat, ')');
        int ppid = 0;
        char state = 0;
        if (close_paren != nullptr && std::sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 &&
            ppid == self) {
          ::kill(pid, SIGKILL);
        }
      }
      ::closedir(proc);
    }
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(-1, &status, WNOHANG | __WALL);
      if (r > 0) {
        ++reaped;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return reaped;  // ECHILD: none left
      break;                     // some still running (dying)
    }
    if (Clock::now() >= deadline) return reaped;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void make_non_dumpable() noexcept { ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

}  // namespace kiln::rpc
