// SPDX-License-Identifier: Apache-2.0
// kiln::rpc::Server: kiln/rpc/server.h.
#include "kiln/rpc/server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>

#include <algorithm>
#include <boost/asio.hpp>
#include <condition_variable>
#include <deque>
#include <list>
#include <thread>

#include "kiln/detail/wait_status.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/logging.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/tracker.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
#include "rpc/auth_throttle.h"
#include "rpc/handshake.h"
#include "rpc/listen.h"
#include "rpc/log_throttle.h"
#include "rpc/session_process.h"
#include "rpc/session_server.h"
#include "rpc/socket_io.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {

namespace fs = std::filesystem;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

void info(const std::string& message) { log(LogLevel::kInfo, "rpc-server", message); }
void warn(const std::string& message) { log(LogLevel::kWarn, "rpc-server", message); }

// At most this many connections may be in their handshake at once; when full, the oldest is
// ended to make room for a new one, so a flood of idle connections cannot exhaust threads and
// a client that completes its handshake at once always gets a slot.
constexpr int kMaxHandshakes = 32;
// Handshakes from one peer address at once: one host cannot take every handshake slot. When
// an address is at its limit its oldest handshake is ended for the new one, so that peers
// dripping bytes cannot shut out clients from the same address.
constexpr int kMaxHandshakesPerAddress = 8;
// Connections ended to make room are counted until their threads leave (at once: their
// sockets are shut down). Past these counts new connections are refused, which bounds the
// threads a burst of connections can start.
constexpr int kMaxHandshakeThreads = 2 * kMaxHandshakes;
constexpr int kMaxHandshakeThreadsPerAddress = 2 * kMaxHandshakesPerAddress;
constexpr auto kHousekeepingPeriod = std::chrono::milliseconds(100);
// How long past its deadline a session worker may run before it is killed: it ends itself at
// the deadline, and a call that ignores cancellation gets 2 s (session_worker.cc).
constexpr auto kWorkerKillAfterDeadline = std::chrono::seconds(4);
constexpr auto kWorkerTellsAfter = 2 * kHousekeepingPeriod;
// How long after a session took a process started ahead its replacement starts: starting one
// (exec, confinement, the runtime: ~10 ms of CPU) at once competed for the CPU with the session
// just handed over, whose first calls are what the pool is for (docs/benchmarks.md, "Sessions
// started ahead").
constexpr auto kRefillDelay = std::chrono::milliseconds(20);
// How long past the handshake deadline the server waits for a session process's report of a
// handshake it runs before it kills the process: its handshake ends at the deadline itself,
// and the server shuts the connection down then (housekeeping), which ends it at once.
constexpr auto kReportGrace = std::chrono::milliseconds(500);

std::chrono::milliseconds seconds_to_ms(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// Whether `host` (an address or a name) is a loopback address; a name counts when every
// address it resolves to is.
bool is_loopback_host(const std::string& host) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) return address.is_loopback();
  if (host == "localhost") return true;
  asio::io_context io;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, "", ec);
  if (ec || results.empty()) return true;  // binding reports it
  for (const auto& r : results) {
    if (!r.endpoint().address().is_loopback()) return false;
  }
  return true;
}

// Removes default work directories that servers of this user left when they crashed:
// "kiln-rpc-<uid>-<pid>-XXXXXX" in `temp`, real directories (never links) owned by this user
// whose <pid> is a process that is gone.
void remove_leftover_work_dirs(const fs::path& temp) {
  const std::string prefix = fmt::format("kiln-rpc-{}-", getuid());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(temp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
      continue;
    }
    long pid = 0;
    try {
      size_t used = 0;
      pid = std::stol(name.substr(prefix.size()), &used);
      if (name.compare(prefix.size() + used, 1, "-") != 0) continue;
    } catch (const std::exception&) {
      continue;
    }
    if (pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);  // does not follow links inside
    info(fmt::format("removed {}, left by server process {} which is gone", entry.path().string(),
                     pid));
  }
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions o, Runtime& r) : options(std::move(o)), runtime(r), acceptor(io) {}

  bool isolated() const { return options.isolation == SessionIsolation::kProcess; }

  ServerOptions options;
  Runtime runtime;  // a handle: the server keeps the runtime its sessions use
  asio::io_context io;
  tcp::acceptor acceptor;
  int port = 0;
  fs::path work_dir;
  bool own_work_dir = false;
  std::unique_ptr<TrackerRegistration> registration;
  std::unique_ptr<tls::Context> tls;  // with a token: the key sessions' TLS is checked with
  fs::path worker_path;               // process isolation: kiln-rpc-session
  AuthThrottle auth;
  // Peers can provoke refusals at will: a flood must not flood the log too.
  LogThrottle refusals{LogLevel::kWarn, "rpc-server", "refused connections"};

  struct Running {
    std::shared_ptr<SessionState> state;
    std::thread thread;
  };
  // A session process started before its session, with the directory it confined itself to.
  struct Prestarted {
    std::shared_ptr<SessionProcess> process;
    fs::path dir;
    // Started by the pool's thread (its parent thread for PR_SET_PDEATHSIG), so that it may go
    // back to the pool after a handshake that gave it no session; one started by a connection's
    // thread dies with that thread.
    bool pooled = false;
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::list<Running> connections;
  int handshakes = 0;
  std::map<std::string, int> handshakes_by_address;
  std::deque<Prestarted> pool;  // started ahead, oldest first (process isolation)
  bool pool_closing = false;    // keep_pool() empties the pool and returns
  // No replacement starts before this (kRefillDelay after a process was taken).
  std::chrono::steady_clock::time_point refill_after;
  bool stuck = false;  // stop() left a call running
  int active = 0;
  bool stopping = false;
  bool stopped = false;
  uint64_t next_id = 1;
  std::thread io_thread;
  std::thread housekeeping_thread;
  std::thread registration_thread;
  // Starts the pool's processes, and so is their parent thread (PR_SET_PDEATHSIG): it runs
  // until every session ended, in stop().
  std::thread pool_thread;

  void accept() {
    acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec) {
        if (ec != asio::error::operation_aborted) {
          warn(fmt::format("accept failed: {}", ec.message()));
          accept();
        }
        return;
      }
      on_connection(std::move(socket));
      accept();
    });
  }

  void on_connection(tcp::socket socket) {
    boost::system::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    std::string ip = "unknown";
    if (!ec) {
      asio::ip::address address = remote.address();
      if (address.is_v6() && address.to_v6().is_v4_mapped()) {
        address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
      }
      ip = address.to_string();
    }
    const std::string peer = ec ? "unknown peer" : fmt::format("{}:{}", ip, remote.port());
    std::lock_guard lock(mu);
    if (stopping) return;
    // find(), not []: a refused address must not leave an entry behind.
    const auto from_here = handshakes_by_address.find(ip);
    const int here = from_here != handshakes_by_address.end() ? from_here->second : 0;
    if (here >= kMaxHandshakeThreadsPerAddress || handshakes >= kMaxHandshakeThreads) {
      refusals.log(fmt::format(
          "{} handshakes are in progress or ending ({} from {}); closing the connection from {}",
          handshakes, here, ip, peer));
      return;
    }
    // Full, for the address or overall: the oldest handshake (from that address, or from any)
    // makes room. A client that completes its handshake at once always gets a slot; peers
    // that drip bytes lose theirs to it.
    if (here >= kMaxHandshakesPerAddress &&
        !end_oldest_handshake(&ip, fmt::format("{} handshakes from {} are in progress", here, ip),
                              peer)) {
      return;
    }
    if (handshakes >= kMaxHandshakes &&
        !end_oldest_handshake(nullptr, fmt::format("{} handshakes are in progress", handshakes),
                              peer)) {
      return;
    }
    ++handshakes;
    ++handshakes_by_address[ip];
    auto state = std::make_shared<SessionState>();
    state->conn = std::make_unique<Connection>(std::move(socket), peer);
    state->id = next_id++;
    state->peer_ip = ip;
    state->in_handshake = true;
    state->handshake_started = std::chrono::steady_clock::now();
    state->max_memory_bytes = options.max_session_memory;
    state->max_handles = options.max_handles;
    state->max_upload_bytes = options.max_upload_bytes;
    state->idle_timeout = seconds_to_ms(options.idle_timeout_s);
    state->write_timeout = seconds_to_ms(options.write_timeout_s);
    state->enable_test_functions = options.test_hooks.test_functions;
    state->enable_echo = options.test_hooks.echo_function;
    connections.push_back(Running{state, {}});
    connections.back().thread = std::thread([this, state] { run_connection(*state); });
  }

  // Ends the oldest connection still in its handshake (from address `ip`, or from any when
  // null) to make room for `peer`; false, having logged why, when there is none (under `mu`).
  // A connection whose first flight proved the token is never chosen: its handshake goes on in
  // a session process, which may take long to start (a cold start, a loaded machine), and
  // connections that prove nothing must not push a token holder out (issue 37, defect 5).
  bool end_oldest_handshake(const std::string* ip, const std::string& why,
                            const std::string& peer) {
    Running* oldest = nullptr;
    for (auto& r : connections) {
      if (r.state->in_handshake && !r.state->first_flight_verified &&
          (ip == nullptr || r.state->peer_ip == *ip) &&
          (oldest == nullptr || r.state->handshake_started < oldest->state->handshake_started)) {
        oldest = &r;
      }
    }
    if (oldest == nullptr) {
      refusals.log(fmt::format("{}; closing the connection from {}", why, peer));
      return false;
    }
    refusals.log(fmt::format("{}: ending the oldest, from {}, to make room for {}", why,
                             oldest->state->conn->peer(), peer));
    oldest->state->in_handshake = false;  // counted until its thread leaves
    oldest->state->conn->shutdown();
    return true;
  }

  // The end of `state`'s handshake: one deadline from its connection's acceptance for all of
  // it (the TLS handshake, the throttle's wait, the hello), however the bytes come.
  std::chrono::steady_clock::time_point handshake_deadline(const SessionState& state) const {
    return state.handshake_started + seconds_to_ms(options.handshake_timeout_s);
  }

  // Frees the session's slot (once: a timeout frees it before the session thread returns).
  void release_slot(SessionState& state) {
    if (!state.slot_released.exchange(true)) --active;
  }

  // Handshake, then the session. Runs on the connection's own thread.
  void run_connection(SessionState& state) {
    bool holds_slot = false;
    // Under a token with process isolation: the session process that ran the TLS handshake and
    // holds the client's verified connection.
    std::optional<Prestarted> handshaker;
    try {
      holds_slot = handshake(state, handshaker);
    } catch (const std::exception& e) {
      refusals.log(fmt::format("handshake with {} failed: {}", state.conn->peer(), e.what()));
    }
    if (!holds_slot && handshaker) discard(*handshaker);
    {
      std::lock_guard lock(mu);
      --handshakes;
      state.in_handshake = false;
      auto it = handshakes_by_address.find(state.peer_ip);
      if (it != handshakes_by_address.end() && --it->second <= 0) handshakes_by_address.erase(it);
    }
    if (holds_slot) {
      if (isolated()) {
        serve_in_worker(state, handshaker);
      } else {
        serve_session(state, work_dir, runtime);
      }
      {
        std::lock_guard lock(mu);
        release_slot(state);
      }
      cv.notify_all();  // the registration thread registers the free slot again
    }
    // Closed only now: a client's close() returns once it sees this, with the slot free.
    state.conn->shutdown();
    state.finished = true;
    cv.notify_all();
  }

  // Runs the TLS handshake of a client that says it holds the token, at the time the
  // throttle admits it: here (sessions on threads), or in a session process (process
  // isolation), which then holds the connection and reads the client's hello; `hello` is it,
  // and `handshaker` that process. Returns false (having logged why) when it is refused.
  bool authenticate(SessionState& state, std::chrono::steady_clock::time_point deadline,
                    std::optional<handshake::ClientHello>& hello,
                    std::optional<Prestarted>& handshaker) {
    Connection& conn = *state.conn;
    const std::string source = AuthThrottle::source_of(state.peer_ip);
    const auto admitted = auth.admit(source, std::chrono::steady_clock::now(), deadline);
    if (!admitted) {
      refusals.log(fmt::format(
          "refused {}: too many wrong tokens lately; its token cannot be checked before its "
          "handshake deadline",
          conn.peer()));
      return false;
    }
    // Every admitted check is recorded once; one that ends without an answer gives back its
    // place in the guessing lane.
    AuthThrottle::Outcome outcome = AuthThrottle::Outcome::kUndecided;
    struct Record {
      AuthThrottle& auth;
      const std::string& source;
      const AuthThrottle::Outcome& outcome;
      ~Record() { auth.record(source, outcome, std::chrono::steady_clock::now()); }
    } record{auth, source, outcome};
    const auto at = *admitted;
    while (std::chrono::steady_clock::now() < at) {
      {
        std::lock_guard lock(mu);
        if (stopping || !state.in_handshake) return false;
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          at - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
    }
    const auto refused = [&](bool wrong_key, const std::string& detail) {
      if (wrong_key) outcome = AuthThrottle::Outcome::kWrong;
      refusals.log(fmt::format("refused {}: {} ({})", conn.peer(),
                               wrong_key ? "the TLS handshake failed: it does not hold the token"
                                         : "the TLS handshake did not complete",
                               detail));
      return false;
    };
    if (isolated()) {
      // The client's first flight is checked here first (its PSK binder), without consuming
      // it: a client without the token, or one that drips its first flight, never costs a
      // session process; the process runs the real handshake from the same bytes.
      try {
        (void)tls::check_first_flight(*tls, conn.fd(), deadline);
      } catch (const tls::HandshakeError& e) {
        return refused(e.kind() == tls::HandshakeError::Kind::kWrongKey, e.what());
      }
      {
        std::lock_guard lock(mu);
        if (stopping || !state.in_handshake) return false;
        state.first_flight_verified = true;
      }
      std::optional<HandshakeReport> report = handshake_in_worker(state, deadline, handshaker);
      if (!report) return false;  // logged
      if (report->outcome != HandshakeReport::Outcome::kVerified) {
        recycle(*handshaker);
        handshaker.reset();
        return refused(report->outcome == HandshakeReport::Outcome::kWrongKey, report->detail);
      }
      outcome = AuthThrottle::Outcome::kRight;
      if (!report->hello) {
        recycle(*handshaker);
        handshaker.reset();
        refusals.log(fmt::format("handshake with {} failed: {}", conn.peer(), report->detail));
        return false;
      }
      hello = handshake::ClientHello{report->version, report->key, report->session_timeout_s};
      return true;
    }
    try {
      conn.start_tls(*tls, deadline);
    } catch (const tls::HandshakeError& e) {
      return refused(e.kind() == tls::HandshakeError::Kind::kWrongKey, e.what());
    }
    outcome = AuthThrottle::Outcome::kRight;
    return true;
  }

  // Hands the client's socket to a session process (one started ahead, else one started now)
  // for the TLS handshake and the hello, and waits for its report until the handshake deadline
  // (and kReportGrace). Returns the report with the process in `handshaker`, or nullopt (having
  // logged why; the process ended) when no process could take the connection or none reported
  // in time: a process that did not report by then is killed with its whole tree.
  std::optional<HandshakeReport> handshake_in_worker(SessionState& state,
                                                     std::chrono::steady_clock::time_point deadline,
                                                     std::optional<Prestarted>& handshaker) {
    Connection& conn = *state.conn;
    std::optional<Prestarted> ready = take_prestarted();
    for (int attempt = 0; attempt < 2 && !handshaker; ++attempt) {
      Prestarted p;
      try {
        p = ready_or_new(ready);
      } catch (const std::exception& e) {
        warn(fmt::format("connection from {} not served: {}", conn.peer(), e.what()));
        return std::nullopt;
      }
      HandshakeRequest request;
      request.peer = conn.peer();
      request.time_left_s = std::max(
          0.001,
          std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      try {
        p.process->handshake(conn.fd(), request);
        handshaker = std::move(p);
      } catch (const std::exception& e) {
        warn(fmt::format("{}; starting another", e.what()));
        discard(p);
      }
    }
    if (!handshaker) return std::nullopt;
    std::optional<HandshakeReport> report;
    std::string why;
    try {
      report = handshaker->process->report(deadline + kReportGrace);
      if (!report) {
        why = fmt::format("session process {} did not report the handshake by its deadline",
                          handshaker->process->pid());
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!report) {
      refusals.log(fmt::format("connection from {}: {}; ending that process", conn.peer(), why));
      discard(*handshaker);
      handshaker.reset();
    }
    return report;
  }

  // Returns whether the client got a session slot. With a token nothing about the server
  // (its key, whether it is busy) is said before the client proved it holds the token: the
  // connection is TLS keyed by the token, and the hello comes inside it.
  bool handshake(SessionState& state, std::optional<Prestarted>& handshaker) {
    Connection& conn = *state.conn;
    const auto limit = seconds_to_ms(options.handshake_timeout_s);
    conn.set_timeouts(limit, limit);
    // One deadline for the whole handshake: dripping bytes does not extend it. Every wait here
    // is bounded by it, and housekeeping() ends a connection still in its handshake past it.
    const auto deadline = handshake_deadline(state);
    conn.set_deadline(deadline);
    // The server hello: sent by the session process that holds the client's TLS connection
    // when there is one (which then waits for the next client), else here.
    const auto send_hello = [&](wire::HelloStatus status, const std::string& message) {
      if (handshaker) {
        // Once it went out (the server closes its copy of the socket when this returns); a
        // process that did not say so by the deadline is ended.
        if (handshaker->process->answer(HelloAnswer{static_cast<int>(status), message},
                                        deadline + kReportGrace)) {
          recycle(*handshaker);
        } else {
          discard(*handshaker);
        }
        handshaker.reset();
      } else {
        handshake::send_server_hello(conn, status, message);
      }
    };
    const auto refuse = [&](wire::HelloStatus status, const std::string& message) {
      refusals.log(fmt::format("refused {}: {}", conn.peer(), message));
      send_hello(status, message);
      return false;
    };
    std::optional<handshake::ClientHello> hello_in_tls;
    if (tls) {
      uint8_t first = 0;
      if (poll_until(conn.fd(), POLLIN, deadline) <= 0 ||
          ::recv(conn.fd(), &first, 1, MSG_PEEK) != 1) {
        refusals.log(fmt::format("{} sent nothing during the handshake", conn.peer()));
        return false;
      }
      if (!tls::starts_tls(first)) {
        // A plaintext hello: a client without the token (or a TVM client, answered by
        // read_client_hello). Told only that a token is needed.
        handshake::read_client_hello(conn);
        return refuse(wire::HelloStatus::kAuthRequired,
                      "this server requires a token: connect with it (the channel is then TLS "
                      "1.3 keyed by the token)");
      }
      if (!authenticate(state, deadline, hello_in_tls, handshaker)) return false;
    }
    const handshake::ClientHello hello =
        hello_in_tls ? *hello_in_tls : handshake::read_client_hello(conn);
    if (hello.version != wire::kProtocolVersion) {
      return refuse(wire::HelloStatus::kVersionMismatch,
                    fmt::format("this server speaks Kiln RPC protocol version {}, the client {}",
                                wire::kProtocolVersion, hello.version));
    }
    const std::string prefix = "client:";
    const bool from_client = hello.key.rfind(prefix, 0) == 0;
    const std::string key = from_client ? hello.key.substr(prefix.size()) : std::string();
    const std::string server_key = "server:" + options.key;
    bool key_ok = key == options.key;
    if (registration) {
      const auto keys = registration->outstanding();
      key_ok = std::find(keys.begin(), keys.end(), key) != keys.end();
    }
    if (!from_client || !key_ok) {
      return refuse(wire::HelloStatus::kKeyMismatch,
                    fmt::format("key '{}' does not match this server{}", key,
                                registration ? " (request a server through the tracker)"
                                             : fmt::format(" (its key is '{}')", options.key)));
    }
    std::string busy;  // why the client is told the server is busy (sent without `mu`)
    {
      std::lock_guard lock(mu);
      // Ended to make room, or past its deadline (housekeeping): its connection is closed.
      if (!state.in_handshake) return false;
      if (active >= options.max_sessions || (registration && !registration->claim(key))) {
        busy = fmt::format("the server is busy: {} of {} sessions are running", active,
                           options.max_sessions);
      } else {
        ++active;
        // From here the connection holds a slot: neither ended for room nor by the handshake's
        // deadline in housekeeping() (the answer below is still bounded by the deadline).
        state.in_handshake = false;
      }
    }
    if (!busy.empty()) {
      info(fmt::format("refused {}: {}", conn.peer(), busy));
      send_hello(wire::HelloStatus::kBusy, busy);  // it may take the pool's lock (recycle)
      return false;
    }
    try {
      // The session process that holds the TLS connection sends it with the session's start.
      if (!handshaker) handshake::send_server_hello(conn, wire::HelloStatus::kAccepted, server_key);
    } catch (...) {
      std::lock_guard lock(mu);
      release_slot(state);  // the client left before its session started: the slot is free
      throw;
    }
    double timeout = hello.session_timeout_s;
    if (options.session_timeout_s > 0 && (timeout <= 0 || options.session_timeout_s < timeout)) {
      timeout = options.session_timeout_s;
    }
    conn.set_deadline(std::nullopt);
    {
      std::lock_guard lock(mu);
      state.timeout_s = timeout;
      if (timeout > 0) {
        state.deadline = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(timeout));
      }
    }
    info(fmt::format("session {} with {} started (timeout {}{})", state.id, conn.peer(),
                     timeout > 0 ? fmt::format("{} s", timeout) : "none",
                     conn.encrypted() || handshaker ? ", encrypted" : ""));
    return true;
  }

  // A session process and its directory: started, confined and waiting for its session
  // (SessionProcess::begin). Throws what make_session_directory and SessionProcess throw.
  Prestarted start_worker() {
    Prestarted p;
    p.dir = make_session_directory(work_dir);
    WorkerConfig config;
    config.sessions_root = work_dir;
    config.work_dir = p.dir;
    config.max_memory_bytes = options.max_session_memory;
    config.max_handles = options.max_handles;
    config.max_upload_bytes = options.max_upload_bytes;
    config.idle_timeout_ms = seconds_to_ms(options.idle_timeout_s).count();
    config.write_timeout_ms = seconds_to_ms(options.write_timeout_s).count();
    config.test_functions = options.test_hooks.test_functions;
    config.echo_function = options.test_hooks.echo_function;
    config.plugin_set = runtime.plugin_set_path();
    config.search_paths = runtime.search_paths();
    config.log_level = log_level();
    config.hidden_files = options.secret_files;
    config.server_pid = ::getpid();
    if (tls) config.session_key = tls->key();
    try {
      p.process = std::make_shared<SessionProcess>(worker_path, config);
    } catch (...) {
      remove_session_directory(p.dir);
      throw;
    }
    return p;
  }

  // Ends a session process that got no session (killed and reaped) and removes its directory.
  static void discard(Prestarted& p) {
    p.process.reset();
    remove_session_directory(p.dir);
  }

  // A session process whose handshake gave it no session (it waits for the next client): back
  // to the pool when it came from there and the pool has room, else discarded.
  void recycle(Prestarted& p) {
    {
      std::lock_guard lock(mu);
      if (p.pooled && !pool_closing && !stopping &&
          pool.size() < static_cast<size_t>(options.prestarted_sessions) && !p.process->exited()) {
        pool.push_front(std::move(p));
        return;
      }
    }
    discard(p);
  }

  // Takes the oldest pre-started process still alive, or nullopt (pool empty or off); the pool
  // thread replaces it kRefillDelay later.
  // The process in `ready` (which is emptied), else one started now. Throws as start_worker().
  Prestarted ready_or_new(std::optional<Prestarted>& ready) {
    if (!ready) return start_worker();
    Prestarted p = std::move(*ready);
    ready.reset();
    return p;
  }

  std::optional<Prestarted> take_prestarted() {
    std::optional<Prestarted> taken;
    std::vector<Prestarted> dead;
    {
      std::lock_guard lock(mu);
      while (!taken && !pool.empty()) {
        Prestarted p = std::move(pool.front());
        pool.pop_front();
        if (p.process->exited()) {
          dead.push_back(std::move(p));
        } else {
          taken = std::move(p);
          refill_after = std::chrono::steady_clock::now() + kRefillDelay;
        }
      }
    }
    cv.notify_all();
    for (Prestarted& p : dead) discard(p);
    return taken;
  }

  // Keeps options.prestarted_sessions processes started ahead: replaces each one taken (after
  // kRefillDelay), and each one that died while it waited (checked every kHousekeepingPeriod),
  // until stop() ends
  // the sessions; then kills and reaps the pool's processes and removes their directories.
  void keep_pool() {
    const auto target = static_cast<size_t>(options.prestarted_sessions);
    std::unique_lock lock(mu);
    auto retry_at = std::chrono::steady_clock::time_point::min();
    while (!pool_closing) {
      std::vector<Prestarted> dead;
      for (auto it = pool.begin(); it != pool.end();) {
        if (it->process->exited()) {
          dead.push_back(std::move(*it));
          it = pool.erase(it);
        } else {
          ++it;
        }
      }
      const auto now = std::chrono::steady_clock::now();
      const auto refill_at = std::max(retry_at, refill_after);
      const bool wanted = !stopping && pool.size() < target;
      const bool refill = wanted && now >= refill_at;
      if (dead.empty() && !refill) {
        auto wait =
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(kHousekeepingPeriod);
        if (wanted) wait = std::min(wait, refill_at - now);
        cv.wait_for(lock, wait);
        continue;
      }
      lock.unlock();
      for (Prestarted& p : dead) {
        warn(fmt::format("session process {} exited before it was given a session; replacing it",
                         p.process->pid()));
        discard(p);
      }
      // One that dies again soon is replaced after a second, not at once: a worker that cannot
      // start must not make the pool start one after another.
      if (!dead.empty()) retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      std::optional<Prestarted> fresh;
      if (refill) {
        try {
          fresh = start_worker();
        } catch (const std::exception& e) {
          warn(fmt::format("cannot start a session process ahead (trying again in 1 s): {}",
                           e.what()));
          retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        }
      }
      lock.lock();
      if (fresh) {
        fresh->pooled = true;
        pool.push_back(std::move(*fresh));
      }
    }
    std::deque<Prestarted> left;
    left.swap(pool);
    lock.unlock();
    for (Prestarted& p : left) discard(p);
  }

  // Serves the session in a worker process (session_process.h): `handshaker`, the one that ran
  // the session's TLS handshake and holds its connection, or else one started ahead or now,
  // handed the client's socket. Waits for it to end, and removes its directory, crashed or not.
  void serve_in_worker(SessionState& state, std::optional<Prestarted>& handshaker) {
    Connection& conn = *state.conn;
    if (conn.buffered() > 0) {
      // Bytes read past the hello would not reach the worker: a client sends nothing before
      // the server's answer (docs/rpc-protocol.md §2).
      warn(
          fmt::format("session {} with {}: the client sent {} bytes before the server's "
                      "answer; ending the session",
                      state.id, conn.peer(), conn.buffered()));
      if (handshaker) discard(*handshaker);
      handshaker.reset();
      return;
    }
    // Under a token the session process holds the TLS connection: only it can talk to the
    // client (nothing here can tell the client of a crash).
    const bool holds_tls = handshaker.has_value();
    // A process started ahead when there is one, else one started now; one that cannot take the
    // session (it died since) is replaced by one started now, once (not under a token: only the
    // process that ran the handshake holds the TLS connection).
    std::optional<Prestarted> ready;
    ready.swap(handshaker);  // the caller's is empty from here
    if (!holds_tls) ready = take_prestarted();
    std::shared_ptr<SessionProcess> worker;
    fs::path dir;
    for (int attempt = 0; attempt < (holds_tls ? 1 : 2) && !worker; ++attempt) {
      Prestarted p;
      try {
        p = ready_or_new(ready);
      } catch (const std::exception& e) {
        warn(fmt::format("session {} with {} not served: {}", state.id, conn.peer(), e.what()));
        break;
      }
      SessionStart start;
      start.id = state.id;
      start.peer = conn.peer();
      start.timeout_s = state.timeout_s;
      if (state.deadline) {
        // The worker tells the client a moment after this server freed the slot at the
        // deadline (housekeeping), so that a client told its session expired finds it free.
        start.time_left_s =
            std::max(0.001, std::chrono::duration<double>(*state.deadline + kWorkerTellsAfter -
                                                          std::chrono::steady_clock::now())
                                .count());
      }
      if (holds_tls) start.accepted_hello = "server:" + options.key;
      try {
        p.process->begin(start, holds_tls ? -1 : conn.fd());
        p.process->close_channel();
        worker = p.process;
        dir = p.dir;
      } catch (const std::exception& e) {
        warn(fmt::format("session {} with {}: {}{}", state.id, conn.peer(), e.what(),
                         holds_tls ? "" : "; starting another"));
        discard(p);
      }
    }
    if (worker) {
      {
        std::lock_guard lock(mu);
        state.worker = worker;
      }
      std::optional<int> status = worker->wait(std::nullopt);
      if (crashed(*status)) {
        warn(
            fmt::format("session {} with {}: its process {} (a crash in an uploaded module, a "
                        "kernel or a plugin); the server goes on",
                        state.id, conn.peer(), kiln::detail::describe_wait_status(*status)));
        if (!holds_tls) tell_crash(conn, *status);
      } else {
        info(fmt::format("session {} with {}: its process {}", state.id, conn.peer(),
                         kiln::detail::describe_wait_status(*status)));
      }
      std::lock_guard lock(mu);
      state.worker.reset();
    } else if (!holds_tls) {
      std::vector<uint8_t> body;
      wire::Writer w(body);
      w.i32(KILN_ERROR_RUNTIME);
      w.str("the server cannot start a process for the session; see its log");
      try {
        conn.write_frame(wire::Code::kException, body);
      } catch (const std::exception&) {
      }
    }
    if (!dir.empty()) remove_session_directory(dir);
  }

  // Tells a client whose session process crashed why its request got no answer (as the
  // reply it waits for; a client that was not waiting sees a closed connection).
  static void tell_crash(Connection& conn, int status) {
    ::fcntl(conn.fd(), F_SETFL, ::fcntl(conn.fd(), F_GETFL) & ~O_NONBLOCK);
    conn.set_timeouts(std::chrono::seconds(1), std::chrono::seconds(1));
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.i32(KILN_ERROR_RUNTIME);
    w.str(fmt::format(
        "the session's process on the server {}: a crash in an uploaded module, a kernel or a "
        "plugin. The server goes on; start a new session",
        kiln::detail::describe_wait_status(status)));
    try {
      conn.write_frame(wire::Code::kException, body);
    } catch (const std::exception&) {
    }
  }

  void housekeeping() {
    std::unique_lock lock(mu);
    while (!stopping) {
      cv.wait_for(lock, kHousekeepingPeriod);
      const auto now = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<SessionState>> expired;
      std::list<Running> done;  // joined below, without `mu`: a thread may still be leaving
      for (auto it = connections.begin(); it != connections.end();) {
        if (it->state->finished) {
          done.splice(done.end(), connections, it++);
          continue;
        }
        if (it->state->in_handshake && now >= handshake_deadline(*it->state)) {
          // Past its handshake deadline and still in it: whatever its thread waits for (a
          // read, the throttle), it ends now and the address's handshake is given back.
          it->state->in_handshake = false;  // counted until its thread leaves
          it->state->conn->shutdown();
        }
        if (it->state->worker && it->state->deadline &&
            now >= *it->state->deadline + kWorkerKillAfterDeadline) {
          it->state->worker->signal(SIGKILL);  // it did not end itself
        }
        if (it->state->deadline && now >= *it->state->deadline && !it->state->timed_out) {
          if (isolated()) it->state->timed_out = true;  // seen; the worker tells the client
          expired.push_back(it->state);
          // The slot is free at once, even while a call that ignores call_cancelled() runs
          // on: a session cannot outlive its timeout by holding a call.
          release_slot(*it->state);
        }
        ++it;
      }
      lock.unlock();
      for (auto& r : done) r.thread.join();
      for (auto& s : expired) {
        info(fmt::format("session {} with {} reached its timeout of {} s", s->id, s->conn->peer(),
                         s->timeout_s));
        if (!isolated()) expire_session(*s);  // a worker ends itself at its deadline
      }
      lock.lock();
    }
  }

  // Keeps one tracker resource per free slot. On a thread of its own: an exchange with a
  // tracker that stopped answering blocks for up to its I/O timeout, and session timeouts
  // must not wait for it. Wakes early when a session ends, to register again at once.
  void keep_registered() {
    std::unique_lock lock(mu);
    while (!stopping) {
      const int free_slots = options.max_sessions - active;
      lock.unlock();
      registration->maintain(free_slots);
      lock.lock();
      cv.wait_for(lock, kHousekeepingPeriod);
    }
  }

  // Returns false when a call did not return within the grace period (see Server::stop).
  bool stop() {
    {
      std::lock_guard lock(mu);
      if (stopping) return !stuck;
      stopping = true;
    }
    cv.notify_all();
    asio::post(io, [this] {
      boost::system::error_code ec;
      acceptor.close(ec);
    });
    if (io_thread.joinable()) io_thread.join();
    if (housekeeping_thread.joinable()) housekeeping_thread.join();
    if (registration_thread.joinable()) registration_thread.join();
    std::list<Running> left;
    {
      std::lock_guard lock(mu);
      left.swap(connections);
    }
    const auto signal_worker = [&](Running& r, int sig) {
      std::lock_guard lock(mu);
      if (r.state->worker) r.state->worker->signal(sig);
      return r.state->worker != nullptr;
    };
    for (auto& r : left) {
      r.state->cancelled = true;
      // A worker is told to end (it ends its call, or is killed at the grace's end); a thread
      // sees its connection close.
      if (!signal_worker(r, SIGTERM)) r.state->conn->shutdown();
    }
    const auto grace_end = std::chrono::steady_clock::now() + seconds_to_ms(options.stop_grace_s);
    for (auto& r : left) {
      while (!r.state->finished && std::chrono::steady_clock::now() < grace_end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!r.state->finished && signal_worker(r, SIGKILL)) {
        while (!r.state->finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (r.state->finished) {
        r.thread.join();
      } else {
        warn(
            fmt::format("session {} with {}: a call did not return within {} s of the stop; "
                        "leaving it running",
                        r.state->id, r.state->conn->peer(), options.stop_grace_s));
        r.thread.detach();
        stuck = true;
      }
    }
    {
      std::lock_guard lock(mu);
      pool_closing = true;
    }
    cv.notify_all();
    // Only now: the pool's thread is the parent thread of the sessions' processes it started.
    if (pool_thread.joinable()) pool_thread.join();
    if (!stuck) registration.reset();
    if (own_work_dir) {
      std::error_code ec;
      fs::remove_all(work_dir, ec);  // created by mkdtemp: ours, and no link
    }
    {
      std::lock_guard lock(mu);
      stopped = true;
    }
    cv.notify_all();
    return !stuck;
  }
};

Server::Server(ServerOptions options, Runtime& runtime)
    : impl_(std::make_unique<Impl>(std::move(options), runtime)) {
  Impl& s = *impl_;
  if (s.options.max_sessions < 1) throw ValueError("max_sessions must be at least 1");
  if (s.options.session_timeout_s < 0) throw ValueError("session_timeout must be >= 0");
  if (s.options.port < 0 || s.options.port > 65535) {
    throw ValueError(fmt::format("port {} is out of range", s.options.port));
  }
  if (s.options.key.find_first_of(" \t\n") != std::string::npos) {
    throw ValueError(fmt::format("key '{}' contains whitespace", s.options.key));
  }
  if (s.options.handshake_timeout_s <= 0) throw ValueError("handshake_timeout must be > 0");
  if (s.options.prestarted_sessions < 0 || s.options.prestarted_sessions > 64) {
    throw ValueError(fmt::format("prestarted_sessions must be in [0, 64], not {}",
                                 s.options.prestarted_sessions));
  }
  if (s.options.token.empty() && !is_loopback_host(s.options.host)) {
    if (!s.options.allow_insecure) {
      throw ValueError(fmt::format(
          "refusing to listen on '{}' without a token: anyone who can reach it could run code "
          "on this machine. Give a token (--token-file or $KILN_RPC_TOKEN), listen on a "
          "loopback address, or pass --allow-insecure on a trusted network",
          s.options.host));
    }
    warn(
        fmt::format("listening on '{}' without a token (--allow-insecure): anyone who can reach "
                    "it can run code on this machine",
                    s.options.host));
  }
  if (!s.options.token.empty()) {
    tls::check_token_strength(s.options.token, "the server's token");
    s.tls = std::make_unique<tls::Context>(tls::Context::Side::kServer, tls::Purpose::kSession,
                                           s.options.token);
  }
  if (s.isolated()) {
    s.worker_path = find_session_worker(s.options.session_worker);
    // Sessions run uploaded code as this user: they must not read this process's memory (the
    // token), environment or descriptors through /proc.
    make_non_dumpable();
  }
  s.port =
      listen_on_first_free_port(s.acceptor, s.options.host, s.options.port, s.options.port_end);
  if (s.options.work_dir.empty()) {
    const fs::path temp = fs::temp_directory_path();
    remove_leftover_work_dirs(temp);
    // mkdtemp: a new directory (0700) that nobody could have planted, not a predictable name.
    // The pid in the name lets a later server tell a crashed server's leftover from a live
    // one's; the random suffix makes the name unpredictable.
    std::string pattern =
        (temp / fmt::format("kiln-rpc-{}-{}-XXXXXX", getuid(), getpid())).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw RuntimeError(fmt::format("cannot create a work directory in {}: {}", temp.string(),
                                     std::strerror(errno)));
    }
    s.work_dir = pattern;
    s.own_work_dir = true;
  } else {
    s.work_dir = s.options.work_dir;
    fs::create_directories(s.work_dir);
  }
  s.work_dir = fs::canonical(s.work_dir);
  if (s.options.tracker) {
    const HostPort tracker = parse_host_port(*s.options.tracker);
    RegistrationOptions r;
    r.tracker_host = tracker.host;
    r.tracker_port = tracker.port;
    r.key = s.options.key;
    r.custom_addr = s.options.custom_addr;
    r.server_port = s.port;
    r.tracker_token = s.options.tracker_token;
    s.registration = std::make_unique<TrackerRegistration>(r);
  }
  s.accept();
  s.io_thread = std::thread([&s] { s.io.run(); });
  s.housekeeping_thread = std::thread([&s] { s.housekeeping(); });
  if (s.registration) s.registration_thread = std::thread([&s] { s.keep_registered(); });
  if (s.isolated() && s.options.prestarted_sessions > 0) {
    s.pool_thread = std::thread([&s] { s.keep_pool(); });
  }
}

Server::~Server() {
  // A call still running holds the state: it stays, leaked, rather than freed under it.
  if (!impl_->stop()) (void)impl_.release();
}

int Server::port() const { return impl_->port; }
const fs::path& Server::work_dir() const { return impl_->work_dir; }

int Server::active_sessions() const {
  std::lock_guard lock(impl_->mu);
  return impl_->active;
}

bool Server::registered() const { return impl_->registration && impl_->registration->connected(); }

bool Server::stop() { return impl_->stop(); }

bool Server::wait(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock lock(impl_->mu);
  const auto done = [&] { return impl_->stopped; };
  if (!timeout) {
    impl_->cv.wait(lock, done);
    return true;
  }
  return impl_->cv.wait_for(lock, *timeout, done);
}

}  // namespace kiln::rpc
