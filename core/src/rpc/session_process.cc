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
  if (c.session_key || c.tls) a.emplace_back("--tls");
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
    if (flag == "--tls") {
      c.tls = true;
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

namespace {

// Flag / value pairs as NUL-terminated strings: the bodies of channel messages.
std::string encode_pairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string bytes;
  for (const auto& [flag, value] : pairs) {
    bytes += flag;
    bytes.push_back('\0');
    bytes += value;
    bytes.push_back('\0');
  }
  return bytes;
}

// The pairs of encode_pairs; throws ValueError naming `what` when the bytes are cut short.
std::vector<std::pair<std::string, std::string>> decode_pairs(const std::string& bytes,
                                                              const char* what) {
  std::vector<std::string> args;
  for (size_t at = 0; at < bytes.size();) {
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos) throw ValueError(fmt::format("{} is cut short", what));
    args.push_back(bytes.substr(at, end - at));
    at = end + 1;
  }
  if (args.size() % 2 != 0) {
    throw ValueError(fmt::format("{}: {} needs a value", what, args.back()));
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < args.size(); i += 2) pairs.emplace_back(args[i], args[i + 1]);
  return pairs;
}

[[noreturn]] void unknown_argument(const char* what, const std::string& flag) {
  throw ValueError(fmt::format("{}: unknown argument '{}'", what, flag));
}

const char* outcome_name(HandshakeReport::Outcome o) {
  switch (o) {
    case HandshakeReport::Outcome::kVerified:
      return "verified";
    case HandshakeReport::Outcome::kWrongKey:
      return "wrong-key";
    case HandshakeReport::Outcome::kTimedOut:
      return "timed-out";
    case HandshakeReport::Outcome::kClosed:
      return "closed";
    case HandshakeReport::Outcome::kNotTls:
      return "not-tls";
  }
  return "closed";
}

}  // namespace

std::string encode_session_start(const SessionStart& start) {
  std::vector<std::pair<std::string, std::string>> pairs = {
      {"--id", std::to_string(start.id)},
      {"--peer", start.peer},
      {"--timeout", fmt::format("{}", start.timeout_s)},
      {"--time-left", fmt::format("{}", start.time_left_s)}};
  if (!start.accepted_hello.empty()) pairs.emplace_back("--accepted-hello", start.accepted_hello);
  return encode_pairs(pairs);
}

SessionStart decode_session_start(const std::string& bytes) {
  constexpr char kWhat[] = "the session's start message";
  SessionStart start;
  for (const auto& [flag, v] : decode_pairs(bytes, kWhat)) {
    if (flag == "--id") {
      start.id = parse_number<uint64_t>(flag, v);
    } else if (flag == "--peer") {
      start.peer = v;
    } else if (flag == "--timeout") {
      start.timeout_s = parse_seconds(flag, v);
    } else if (flag == "--time-left") {
      start.time_left_s = parse_seconds(flag, v);
    } else if (flag == "--accepted-hello") {
      start.accepted_hello = v;
    } else {
      unknown_argument(kWhat, flag);
    }
  }
  return start;
}

std::string encode_handshake_request(const HandshakeRequest& request) {
  return encode_pairs(
      {{"--peer", request.peer}, {"--time-left", fmt::format("{}", request.time_left_s)}});
}

HandshakeRequest decode_handshake_request(const std::string& bytes) {
  constexpr char kWhat[] = "the handshake request";
  HandshakeRequest request;
  for (const auto& [flag, v] : decode_pairs(bytes, kWhat)) {
    if (flag == "--peer") {
      request.peer = v;
    } else if (flag == "--time-left") {
      request.time_left_s = parse_seconds(flag, v);
    } else {
      unknown_argument(kWhat, flag);
    }
  }
  return request;
}

std::string encode_handshake_report(const HandshakeReport& report) {
  std::vector<std::pair<std::string, std::string>> pairs = {
      {"--outcome", outcome_name(report.outcome)}, {"--detail", report.detail}};
  if (report.hello) {
    pairs.emplace_back("--version", std::to_string(report.version));
    pairs.emplace_back("--key", report.key);
    pairs.emplace_back("--session-timeout", fmt::format("{}", report.session_timeout_s));
  }
  return encode_pairs(pairs);
}

HandshakeReport decode_handshake_report(const std::string& bytes) {
  constexpr char kWhat[] = "the handshake report";
  HandshakeReport report;
  bool outcome_seen = false;
  for (const auto& [flag, v] : decode_pairs(bytes, kWhat)) {
    if (flag == "--outcome") {
      bool known = false;
      for (const auto o : {HandshakeReport::Outcome::kVerified, HandshakeReport::Outcome::kWrongKey,
                           HandshakeReport::Outcome::kTimedOut, HandshakeReport::Outcome::kClosed,
                           HandshakeReport::Outcome::kNotTls}) {
        if (v == outcome_name(o)) {
          report.outcome = o;
          known = true;
        }
      }
      if (!known) throw ValueError(fmt::format("{}: unknown outcome '{}'", kWhat, v));
      outcome_seen = true;
    } else if (flag == "--detail") {
      report.detail = v;
    } else if (flag == "--version") {
      report.hello = true;
      report.version = parse_number<uint16_t>(flag, v);
    } else if (flag == "--key") {
      report.key = v;
    } else if (flag == "--session-timeout") {
      report.session_timeout_s = parse_seconds(flag, v);
    } else {
      unknown_argument(kWhat, flag);
    }
  }
  if (!outcome_seen) throw ValueError(fmt::format("{} has no --outcome", kWhat));
  return report;
}

std::string encode_hello_answer(const HelloAnswer& answer) {
  return encode_pairs({{"--status", std::to_string(answer.status)}, {"--message", answer.message}});
}

HelloAnswer decode_hello_answer(const std::string& bytes) {
  constexpr char kWhat[] = "the hello answer";
  HelloAnswer answer;
  for (const auto& [flag, v] : decode_pairs(bytes, kWhat)) {
    if (flag == "--status") {
      answer.status = parse_number<int>(flag, v);
    } else if (flag == "--message") {
      answer.message = v;
    } else {
      unknown_argument(kWhat, flag);
    }
  }
  return answer;
}

namespace {

constexpr uint32_t kMaxChannelMessageBytes = 64 << 10;

}  // namespace

void send_channel_message(int fd, ChannelMessage kind, const std::string& body, int passed_fd) {
  const auto length = static_cast<uint32_t>(body.size() + 1);
  std::string bytes(reinterpret_cast<const char*>(&length), sizeof(length));
  bytes.push_back(static_cast<char>(kind));
  bytes += body;
  iovec iov{bytes.data(), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (passed_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &passed_fd, sizeof(int));
  }
  // A blocking socket and a message far below its buffer: the first sendmsg takes it all (the
  // socket with it) or the other end is gone; a rest, if any, follows without the socket.
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = 0;
    if (sent == 0) {
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } else {
      n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw RuntimeError(fmt::format("the session process's channel: {}",
                                     n < 0 ? std::strerror(errno) : "closed"));
    }
    sent += static_cast<size_t>(n);
  }
}

std::optional<std::pair<ChannelMessage, std::string>> read_channel_message(int fd, int* passed_fd) {
  *passed_fd = -1;
  uint32_t length = 0;
  size_t got = 0;
  const auto gone = [&]() -> std::optional<std::pair<ChannelMessage, std::string>> {
    if (*passed_fd >= 0) ::close(*passed_fd);
    *passed_fd = -1;
    return std::nullopt;
  };
  while (got < sizeof(length)) {
    iovec iov{reinterpret_cast<char*>(&length) + got, sizeof(length) - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return gone();
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
        if (*passed_fd < 0) {
          *passed_fd = passed;
        } else {
          ::close(passed);
        }
      }
    }
    got += static_cast<size_t>(n);
  }
  if (length == 0 || length > kMaxChannelMessageBytes) {
    gone();
    throw ValueError(
        fmt::format("a channel message of {} bytes (1 to {})", length, kMaxChannelMessageBytes));
  }
  std::string text(length, '\0');
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::recv(fd, text.data() + at, text.size() - at, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return gone();
    at += static_cast<size_t>(n);
  }
  const auto kind = static_cast<ChannelMessage>(text[0]);
  return std::make_pair(kind, text.substr(1));
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

SessionProcess::SessionProcess(const fs::path& worker, const WorkerConfig& given) {
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
  if (config.session_key) {
    // First on the channel, before the worker reads anything else from it.
    try {
      const auto& key = *config.session_key;
      send_channel_message(channel_, ChannelMessage::kKey,
                           std::string(reinterpret_cast<const char*>(key.data()), key.size()), -1);
    } catch (const std::exception& e) {
      signal(SIGKILL);
      wait(std::nullopt);
      close_channel();
      throw RuntimeError(
          fmt::format("cannot give the session worker {} its key: {}", pid_, e.what()));
    }
  }
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
  try {
    if (channel_ < 0) throw RuntimeError("its channel is closed");
    send_channel_message(channel_, ChannelMessage::kStart, encode_session_start(start), session_fd);
  } catch (const std::exception& e) {
    throw RuntimeError(
        fmt::format("cannot hand session {} to its process {}: {}", start.id, pid_, e.what()));
  }
}

void SessionProcess::handshake(int client_fd, const HandshakeRequest& request) {
  inbox_.clear();
  try {
    if (channel_ < 0) throw RuntimeError("its channel is closed");
    send_channel_message(channel_, ChannelMessage::kHandshake, encode_handshake_request(request),
                         client_fd);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("cannot hand the connection from {} to session process {}: {}",
                                   request.peer, pid_, e.what()));
  }
}

std::optional<std::pair<ChannelMessage, std::string>> SessionProcess::receive(
    Clock::time_point until) {
  // Messages from the worker are small; read without blocking past `until`, whatever it does.
  while (true) {
    if (inbox_.size() >= sizeof(uint32_t)) {
      uint32_t length = 0;
      std::memcpy(&length, inbox_.data(), sizeof(length));
      if (length == 0 || length > kMaxChannelMessageBytes) {
        throw RuntimeError(
            fmt::format("session process {} sent a message of {} bytes", pid_, length));
      }
      if (inbox_.size() >= sizeof(length) + length) {
        const auto kind = static_cast<ChannelMessage>(inbox_[sizeof(length)]);
        std::string body = inbox_.substr(sizeof(length) + 1, length - 1);
        inbox_.erase(0, sizeof(length) + length);
        return std::make_pair(kind, std::move(body));
      }
    }
    const auto now = Clock::now();
    if (now >= until) return std::nullopt;
    pollfd p{channel_, POLLIN, 0};
    const int r = ::poll(
        &p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(until - now).count()));
    if (r < 0 && errno != EINTR) {
      throw RuntimeError(
          fmt::format("poll on session process {}'s channel: {}", pid_, std::strerror(errno)));
    }
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::recv(channel_, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      inbox_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      throw RuntimeError(fmt::format("session process {} ended before it answered", pid_));
    }
  }
}

std::optional<HandshakeReport> SessionProcess::report(Clock::time_point until) {
  const auto message = receive(until);
  if (!message) return std::nullopt;
  if (message->first != ChannelMessage::kReport) {
    throw RuntimeError(fmt::format("session process {} sent '{}', not its handshake report", pid_,
                                   static_cast<char>(message->first)));
  }
  try {
    return decode_handshake_report(message->second);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("session process {}: {}", pid_, e.what()));
  }
}

bool SessionProcess::answer(const HelloAnswer& answer, Clock::time_point until) {
  try {
    if (channel_ < 0) throw RuntimeError("its channel is closed");
    send_channel_message(channel_, ChannelMessage::kAnswer, encode_hello_answer(answer), -1);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("cannot answer through session process {}: {}", pid_, e.what()));
  }
  const auto message = receive(until);
  if (!message) return false;
  if (message->first != ChannelMessage::kAnswered) {
    throw RuntimeError(fmt::format("session process {} sent '{}', not that it answered", pid_,
                                   static_cast<char>(message->first)));
  }
  return true;
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
