// kiln::rpc::Server: kiln/rpc/server.h.
#include "kiln/rpc/server.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <condition_variable>
#include <list>
#include <thread>

#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/logging.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/tracker.h"
#include "kiln/runtime.h"
#include "rpc/handshake.h"
#include "rpc/listen.h"
#include "rpc/session_server.h"

namespace kiln::rpc {

namespace fs = std::filesystem;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// At most this many connections may be in their handshake at once; more are closed at once,
// so a flood of idle connections cannot exhaust threads.
constexpr int kMaxHandshakes = 32;
constexpr auto kHousekeepingPeriod = std::chrono::milliseconds(100);

void info(const std::string& message) { log(LogLevel::kInfo, "rpc-server", message); }
void warn(const std::string& message) { log(LogLevel::kWarn, "rpc-server", message); }

// Functions every server offers for diagnostics and tests (SPEC.md §4.8's names).
void register_diagnostic_functions() {
  const auto add = [](const std::string& name, Function f) {
    if (!registry::get(name)) registry::set(name, std::move(f), true);
  };
  add("testing.echo", Function::from_packed("testing.echo", [](const Any* args, int32_t n) {
        return n > 0 ? args[0] : Any();
      }));
  add("rpc.test.addone", Function::from_typed("rpc.test.addone", [](int64_t x) { return x + 1; }));
  add("rpc.test.strcat",
      Function::from_typed("rpc.test.strcat", [](const std::string& s, int64_t x) {
        return s + ":" + std::to_string(x);
      }));
  add("rpc.test.sleep", Function::from_typed("rpc.test.sleep", [](double seconds) {
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      }));
  add("rpc.test.raise", Function::from_typed("rpc.test.raise", [](const std::string& message) {
        throw ValueError(message);
      }));
  add("rpc.test.nop",
      Function::from_packed("rpc.test.nop", [](const Any*, int32_t) { return Any(); }));
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions o, Runtime& r) : options(std::move(o)), runtime(r), acceptor(io) {}

  ServerOptions options;
  Runtime& runtime;
  asio::io_context io;
  tcp::acceptor acceptor;
  int port = 0;
  fs::path work_dir;
  bool own_work_dir = false;
  std::unique_ptr<TrackerRegistration> registration;

  struct Running {
    std::shared_ptr<SessionState> state;
    std::thread thread;
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::list<Running> connections;
  int handshakes = 0;
  int active = 0;
  bool stopping = false;
  bool stopped = false;
  uint64_t next_id = 1;
  std::thread io_thread;
  std::thread housekeeping_thread;
  std::thread registration_thread;

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
    const std::string peer =
        ec ? "unknown peer" : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    std::lock_guard lock(mu);
    if (stopping) return;
    if (handshakes >= kMaxHandshakes) {
      warn(fmt::format("{} handshakes are in progress; closing the connection from {}",
                       kMaxHandshakes, peer));
      return;
    }
    ++handshakes;
    auto state = std::make_shared<SessionState>();
    state->conn = std::make_unique<Connection>(std::move(socket), peer);
    state->id = next_id++;
    state->max_memory_bytes = options.max_session_memory;
    connections.push_back(Running{state, {}});
    connections.back().thread = std::thread([this, state] { run_connection(*state); });
  }

  // Handshake, then the session. Runs on the connection's own thread.
  void run_connection(SessionState& state) {
    bool holds_slot = false;
    try {
      holds_slot = handshake(state);
    } catch (const std::exception& e) {
      warn(fmt::format("handshake with {} failed: {}", state.conn->peer(), e.what()));
    }
    {
      std::lock_guard lock(mu);
      --handshakes;
    }
    if (holds_slot) {
      serve_session(state, work_dir / fmt::format("session-{}", state.id), runtime);
      std::lock_guard lock(mu);
      --active;
    } else {
      state.conn->shutdown();
    }
    state.finished = true;
    cv.notify_all();
  }

  // Returns whether the client got a session slot.
  bool handshake(SessionState& state) {
    Connection& conn = *state.conn;
    const auto limit =
        std::chrono::milliseconds(static_cast<int64_t>(options.handshake_timeout_s * 1000));
    conn.set_timeouts(limit, limit);
    const handshake::ClientHello hello = handshake::read_client_hello(conn);
    const handshake::Nonce nonce = handshake::random_nonce();
    const auto refuse = [&](wire::HelloStatus status, const std::string& message) {
      info(fmt::format("refused {}: {}", conn.peer(), message));
      handshake::send_server_hello(conn, status, message, nonce);
      return false;
    };
    if (hello.version != wire::kProtocolVersion) {
      return refuse(wire::HelloStatus::kVersionMismatch,
                    fmt::format("this server speaks Kiln RPC protocol version {}, the client {}",
                                wire::kProtocolVersion, hello.version));
    }
    const std::string prefix = "client:";
    const bool from_client = hello.key.rfind(prefix, 0) == 0;
    const std::string key = from_client ? hello.key.substr(prefix.size()) : std::string();
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
    {
      std::lock_guard lock(mu);
      if (active >= options.max_sessions) {
        return refuse(wire::HelloStatus::kBusy,
                      fmt::format("the server is busy: {} of {} sessions are running", active,
                                  options.max_sessions));
      }
    }
    const std::string server_key = "server:" + options.key;
    // With a token the final answer is the authentication result; without, the hello.
    const auto answer = [&](wire::HelloStatus status, const std::string& message) {
      if (options.token.empty()) {
        handshake::send_server_hello(conn, status, message, nonce);
      } else {
        handshake::send_auth_result(conn, status, message);
      }
    };
    if (!options.token.empty()) {
      handshake::send_server_hello(conn, wire::HelloStatus::kAuthRequired, server_key, nonce);
      const handshake::Mac got = handshake::read_proof(conn);
      if (!handshake::equal(got, handshake::proof(options.token, nonce, hello.key))) {
        handshake::send_auth_result(conn, wire::HelloStatus::kAuthFailed,
                                    "wrong token: the client does not hold the server's token");
        warn(fmt::format("refused {}: wrong token", conn.peer()));
        // The tracker handed this key out and will not again: retire it so that the next
        // maintain() registers a fresh one at once instead of after the unmatch timeout.
        if (registration) registration->claim(key);
        return false;
      }
    }
    {
      std::lock_guard lock(mu);
      if (active >= options.max_sessions || (registration && !registration->claim(key))) {
        answer(wire::HelloStatus::kBusy, "the server is busy");
        return false;
      }
      ++active;
    }
    try {
      answer(wire::HelloStatus::kAccepted, server_key);
    } catch (...) {
      std::lock_guard lock(mu);
      --active;  // the client left before its session started: the slot is free again
      throw;
    }
    double timeout = hello.session_timeout_s;
    if (options.session_timeout_s > 0 && (timeout <= 0 || options.session_timeout_s < timeout)) {
      timeout = options.session_timeout_s;
    }
    conn.set_timeouts(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
    {
      std::lock_guard lock(mu);
      state.timeout_s = timeout;
      if (timeout > 0) {
        state.deadline = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(timeout));
      }
    }
    info(fmt::format("session {} with {} started (timeout {})", state.id, conn.peer(),
                     timeout > 0 ? fmt::format("{} s", timeout) : "none"));
    return true;
  }

  // Ends `state` at its deadline: tells the client why, then closes the connection.
  static void expire(SessionState& state) {
    state.timed_out = true;
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.i32(kErrorCodeRpcSessionTimeout);
    w.str(
        fmt::format("RPCSessionTimeoutError: Your {}s session has expired, try to increase the "
                    "\"session_timeout\" value.",
                    state.timeout_s));
    // A reply being written finishes first; one stuck for a second is cut off.
    for (int i = 0; i < 100; ++i) {
      if (state.write_mu.try_lock()) {
        try {
          state.conn->write_frame(wire::Code::kException, body);
        } catch (const std::exception&) {
        }
        state.write_mu.unlock();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    state.conn->shutdown();
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
        if (it->state->deadline && now >= *it->state->deadline && !it->state->timed_out) {
          expired.push_back(it->state);
        }
        ++it;
      }
      lock.unlock();
      for (auto& r : done) r.thread.join();
      for (auto& s : expired) {
        info(fmt::format("session {} with {} reached its timeout of {} s", s->id, s->conn->peer(),
                         s->timeout_s));
        expire(*s);
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

  void stop() {
    {
      std::lock_guard lock(mu);
      if (stopping) return;
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
    for (auto& r : left) r.state->conn->shutdown();
    for (auto& r : left) r.thread.join();
    registration.reset();
    if (own_work_dir) {
      std::error_code ec;
      fs::remove_all(work_dir, ec);
    }
    {
      std::lock_guard lock(mu);
      stopped = true;
    }
    cv.notify_all();
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
  register_diagnostic_functions();
  s.port =
      listen_on_first_free_port(s.acceptor, s.options.host, s.options.port, s.options.port_end);
  if (s.options.work_dir.empty()) {
    s.work_dir = fs::temp_directory_path() / fmt::format("kiln-rpc-{}-{}", getpid(), s.port);
    s.own_work_dir = true;
  } else {
    s.work_dir = s.options.work_dir;
  }
  fs::create_directories(s.work_dir);
  s.work_dir = fs::canonical(s.work_dir);
  if (s.options.tracker) {
    const HostPort tracker = parse_host_port(*s.options.tracker);
    RegistrationOptions r;
    r.tracker_host = tracker.host;
    r.tracker_port = tracker.port;
    r.key = s.options.key;
    r.custom_addr = s.options.custom_addr;
    r.server_port = s.port;
    s.registration = std::make_unique<TrackerRegistration>(r);
  }
  s.accept();
  s.io_thread = std::thread([&s] { s.io.run(); });
  s.housekeeping_thread = std::thread([&s] { s.housekeeping(); });
  if (s.registration) s.registration_thread = std::thread([&s] { s.keep_registered(); });
}

Server::~Server() { impl_->stop(); }

int Server::port() const { return impl_->port; }
const fs::path& Server::work_dir() const { return impl_->work_dir; }

int Server::active_sessions() const {
  std::lock_guard lock(impl_->mu);
  return impl_->active;
}

bool Server::registered() const { return impl_->registration && impl_->registration->connected(); }

void Server::stop() { impl_->stop(); }

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
