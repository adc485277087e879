// SPDX-License-Identifier: Apache-2.0
// The tracker's clients: TrackerSession (users, `kiln query`) and TrackerRegistration (RPC
// servers). Blocking Connections whose every read and write is bounded, except an unbounded
// REQUEST (TVM's semantics without a wait bound). On a thread with an interrupt poll (a call
// from Python, kiln/detail/cancellation.h) every wait ends on Ctrl-C, the unbounded one too.
// TrackerSession::request() lives with the client sessions (rpc_config.cc).
#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <string_view>

#include "kiln/detail/cancellation.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/rpc/tracker.h"
#include "rpc/connection.h"
#include "rpc/tls_psk.h"
#include "rpc/tracker_wire.h"

namespace kiln::rpc {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using tracker_wire::dumps;
using tracker_wire::Json;

// Replies may be larger than what the tracker accepts (a SUMMARY of a large farm).
constexpr int32_t kMaxReplyBytes = 16 * kMaxTrackerMessageBytes;

// How long the rest of a reply may take once its length arrived, where the request had no
// time limit: a whole reply is at most kMaxReplyBytes (16 MiB), 1 MiB/s plus 60 s.
constexpr std::chrono::seconds kReplyBodyTimeout{76};

milliseconds remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(1));
}

// A server's port as trackers send it: a number, or a string of one (TVM's C++ server).
std::optional<int> port_of(const Json& value) {
  if (value.is_number_integer()) return value.get<int>();
  if (!value.is_string()) return std::nullopt;
  const std::string text = value.get<std::string>();
  int port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return port;
}

// A connection speaking the tracker protocol: the magic, then int32-length-prefixed JSON.
// I/O failures, malformed replies included, are ConnectionErrors: the connection is done.
class TrackerConnection {
 public:
  // Resolves and connects within `timeout`; with `tls` (a tracker token's client context)
  // runs the TLS handshake within it too. ConnectionError when the connection fails;
  // RuntimeError when the tracker does not complete the handshake keyed by the token.
  static std::unique_ptr<TrackerConnection> connect(const std::string& host, int port,
                                                    milliseconds timeout, const tls::Context* tls) {
    const auto deadline = Clock::now() + timeout;
    auto conn = Connection::connect(host, port, timeout);
    if (tls != nullptr) {
      try {
        conn->start_tls(*tls, deadline);
      } catch (const tls::HandshakeError& e) {
        throw RuntimeError(handshake_failure(conn->peer(), e));
      }
    }
    return std::make_unique<TrackerConnection>(std::move(conn), tls != nullptr);
  }
  TrackerConnection(std::unique_ptr<Connection> conn, bool has_token)
      : conn_(std::move(conn)), has_token_(has_token) {}

  const std::string& peer() const { return conn_->peer(); }

  // Sends the magic and checks the answer.
  void handshake(milliseconds timeout) {
    conn_->set_timeouts(timeout, timeout);
    const std::string magic = tracker_wire::encode_int32(kTrackerMagic);
    conn_->write_all(magic.data(), magic.size());
    unsigned char answer[4];
    try {
      conn_->read_exact(answer, 4, "the tracker's magic");
    } catch (const ConnectionError& e) {
      throw RuntimeError(fmt::format("{} is not an RPC tracker: {}", peer(), e.what()));
    }
    if (!has_token_ && std::memcmp(answer, tracker_wire::kTokenRequiredPrefix, 4) == 0) {
      throw RuntimeError(
          fmt::format("the tracker {} requires a tracker token (--tracker-token-file / "
                      "remote.tracker_token_file, or $KILN_TRACKER_TOKEN)",
                      peer()));
    }
    if (tracker_wire::decode_int32(answer) != kTrackerMagic) {
      throw RuntimeError(fmt::format("{} is not an RPC tracker", peer()));
    }
  }

  // Whether the tracker closed this connection (or sent something unasked) while it sat
  // unused: a tracker closes connections idle past its idle deadline.
  bool closed_while_idle() const {
    if (conn_->buffered() > 0) return true;
    pollfd p{conn_->fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;  // readable (the close), hung up, or failed
  }

  void send_json(const Json& value, milliseconds timeout) {
    const std::string bytes = tracker_wire::frame(dumps(value));
    conn_->set_timeouts(timeout, timeout);
    conn_->write_all(bytes.data(), bytes.size());
  }

  // Reads one message; `timeout` nullopt waits without bound. With a timeout the whole
  // message must arrive within it (the connection's deadline, not a limit per read: a tracker
  // that drips its reply cannot stretch the wait).
  Json recv_json(std::optional<milliseconds> timeout) {
    std::optional<Clock::time_point> deadline;
    if (timeout) deadline = Clock::now() + *timeout;
    const auto bound = [&] { return deadline ? remaining(*deadline) : milliseconds(0); };
    conn_->set_timeouts(bound(), bound());
    struct Deadline {
      Connection& conn;
      ~Deadline() { conn.set_deadline(std::nullopt); }
    } clear{*conn_};
    if (deadline) {
      conn_->set_deadline(
          *deadline, fmt::format("did not send its whole reply within {} ms", timeout->count()));
    }
    unsigned char header[4];
    conn_->read_exact(header, 4, "a tracker reply");
    const int32_t size = tracker_wire::decode_int32(header);
    if (size <= 0 || size > kMaxReplyBytes) {
      throw ConnectionError(fmt::format("{} sent a message of {} bytes (must be in [1, {}])",
                                        peer(), size, kMaxReplyBytes));
    }
    // A reply that has begun ends soon even where its wait had no bound (a REQUEST without a
    // wait bound waits for a server, not for the reply's bytes).
    if (!deadline) {
      conn_->set_deadline(Clock::now() + kReplyBodyTimeout,
                          fmt::format("did not send the rest of its reply within {} s of its start",
                                      kReplyBodyTimeout.count()));
    }
    // Grown with the bytes that arrive, never to the length the peer announced.
    std::string text;
    while (text.size() < static_cast<size_t>(size)) {
      const size_t have = text.size();
      const size_t take =
          std::min<size_t>(kMaxTrackerMessageBytes, static_cast<size_t>(size) - have);
      text.resize(have + take);
      conn_->read_exact(text.data() + have, take, "a tracker reply");
    }
    // A SUMMARY reply wraps stored values (at most kMaxJsonDepth deep) in 4 more levels; a
    // reply nested deeper would overflow the parser's recursion.
    if (tracker_wire::json_depth(text, tracker_wire::kMaxJsonDepth + 8) >
        tracker_wire::kMaxJsonDepth + 8) {
      throw ConnectionError(fmt::format("{} sent JSON nested deeper than {} levels", peer(),
                                        tracker_wire::kMaxJsonDepth + 8));
    }
    Json value = Json::parse(text, nullptr, false);
    if (value.is_discarded()) {
      throw ConnectionError(fmt::format("{} sent malformed JSON: {}", peer(), text.substr(0, 200)));
    }
    return value;
  }

  Json call(const Json& message, milliseconds timeout) {
    send_json(message, timeout);
    return recv_json(timeout);
  }

 private:
  // Why a TLS handshake with the tracker `peer` failed, for the user.
  static std::string handshake_failure(const std::string& peer, const tls::HandshakeError& e) {
    // OpenSSL 3 reports a peer that closed mid-handshake as a protocol error.
    const bool closed = std::string_view(e.what()).find("unexpected eof") != std::string::npos;
    switch (closed ? tls::HandshakeError::Kind::kClosed : e.kind()) {
      case tls::HandshakeError::Kind::kWrongKey:
        return fmt::format(
            "the tracker {} refused the tracker token, or could not prove the channel: the TLS "
            "1.3 handshake keyed by the tracker token failed ({}). Its token differs from this "
            "one (check --tracker-token-file / remote.tracker_token_file), or it is not the "
            "tracker; nothing was sent to it",
            peer, e.what());
      case tls::HandshakeError::Kind::kTimedOut:
        return fmt::format("the tracker {} did not complete the TLS handshake in time ({})", peer,
                           e.what());
      case tls::HandshakeError::Kind::kNotTls:
      case tls::HandshakeError::Kind::kClosed:
        break;
    }
    return fmt::format(
        "the tracker {} did not take up the TLS handshake keyed by the tracker token ({}): it "
        "has no tracker token (start it with --token-file, or give this side none), or it "
        "refused the connection",
        peer, e.what());
  }

  std::unique_ptr<Connection> conn_;
  bool has_token_ = false;
};

}  // namespace

std::string random_key(const std::string& prefix, const std::set<std::string>& used) {
  // As the reference's str(random.random()): a fraction in [0, 1), shortest round-trip form.
  // One engine behind a lock, not thread_local: libkiln is dlopened (Python) and its
  // 2.5 KiB state would not fit the static TLS block.
  static std::mutex mu;
  static std::mt19937_64 engine{std::random_device{}()};
  std::uniform_real_distribution<double> fraction(0.0, 1.0);
  for (;;) {
    double r = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      r = fraction(engine);
    }
    std::string key = fmt::format("{}:{}", prefix, r);
    if (used.count(key) == 0) return key;
  }
}

std::pair<std::string, std::string> split_random_key(const std::string& matchkey) {
  const size_t colon = matchkey.rfind(':');
  if (colon == std::string::npos) return {matchkey, ""};
  return {matchkey.substr(0, colon), matchkey.substr(colon + 1)};
}

// ---------------------------------------------------------------------------------------------
// TrackerSession

struct TrackerSession::Impl {
  std::string host;
  int port = 0;
  milliseconds connect_timeout{10000};
  std::shared_ptr<const tls::Context> tls;  // the tracker token's, when given
  std::unique_ptr<TrackerConnection> socket;

  milliseconds io_timeout() const { return std::max(connect_timeout, milliseconds(5000)); }

  // Connects unless an open connection is at hand (one the tracker closed as idle is not).
  void ensure_connected() {
    if (socket && socket->closed_while_idle()) socket.reset();
    if (!socket) connect();
  }

  void connect() {
    const auto deadline = Clock::now() + connect_timeout;
    std::string last_error;
    while (true) {
      try {
        auto s = TrackerConnection::connect(host, port, remaining(deadline), tls.get());
        s->handshake(std::max(remaining(deadline), milliseconds(1000)));
        socket = std::move(s);
        return;
      } catch (const ConnectionError& e) {
        last_error = e.what();
        if (!e.refused() || Clock::now() + milliseconds(500) >= deadline) break;
      }
      // Ctrl-C in Python ends the wait between attempts too (kiln/detail/cancellation.h).
      if (!kiln::detail::sleep_unless_cancelled(milliseconds(500))) break;
    }
    // `last_error` names host:port.
    throw RuntimeError(
        fmt::format("no tracker answered within {} ms: {}", connect_timeout.count(), last_error));
  }

  // One exchange; a failure closes the connection (the next call connects again).
  Json call(const Json& message) {
    ensure_connected();
    try {
      return socket->call(message, io_timeout());
    } catch (const ConnectionError& e) {
      socket.reset();
      throw RuntimeError(fmt::format("the tracker connection failed: {}", e.what()));
    } catch (...) {
      socket.reset();  // interrupted mid-exchange: the reply would answer the next call
      throw;
    }
  }

  Json summary_data() {
    const Json reply = call(Json::array({static_cast<int>(TrackerCode::kSummary)}));
    if (!reply.is_array() || reply.size() != 2 || reply[0] != 0 || !reply[1].is_object()) {
      throw RuntimeError("Invalid return value " + dumps(reply));
    }
    return reply[1];
  }
};

TrackerSession::TrackerSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrackerSession::TrackerSession(TrackerSession&&) noexcept = default;
TrackerSession& TrackerSession::operator=(TrackerSession&&) noexcept = default;
TrackerSession::~TrackerSession() = default;

TrackerSession TrackerSession::connect(const std::string& host, int port,
                                       std::chrono::milliseconds connect_timeout,
                                       const std::string& tracker_token) {
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  impl->port = port;
  impl->connect_timeout = std::max(connect_timeout, milliseconds(1));
  if (!tracker_token.empty()) {
    tls::check_token_strength(tracker_token, "the tracker token");
    // Shared by this process's connections with this token: the derivation runs once.
    impl->tls = tls::client_context(tls::Purpose::kTracker, tracker_token);
  }
  impl->connect();
  return TrackerSession(std::move(impl));
}

TrackerSummary TrackerSession::summary() {
  const Json data = impl_->summary_data();
  TrackerSummary out;
  out.json = dumps(data);
  auto number = [](const Json& v) -> int64_t {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number()) return static_cast<int64_t>(v.get<double>());
    return 0;
  };
  if (data.contains("queue_info") && data["queue_info"].is_object()) {
    for (const auto& [k, v] : data["queue_info"].items()) {
      TrackerQueue q;
      q.key = k;
      if (v.is_object()) {
        if (v.contains("free")) q.free = number(v["free"]);
        if (v.contains("pending")) q.pending = number(v["pending"]);
      }
      out.queues.push_back(std::move(q));
    }
  }
  std::sort(out.queues.begin(), out.queues.end(),
            [](const TrackerQueue& a, const TrackerQueue& b) { return a.key < b.key; });
  if (data.contains("server_info") && data["server_info"].is_array()) {
    for (const auto& item : data["server_info"]) {
      TrackerServerInfo s;
      s.json = dumps(item);
      if (item.is_object()) {
        if (item.contains("key") && item["key"].is_string()) s.key = item["key"];
        if (item.contains("addr") && item["addr"].is_array()) {
          const Json& addr = item["addr"];
          if (!addr.empty()) s.host = tracker_wire::python_str(addr[0]);
          if (addr.size() > 1) s.port = port_of(addr[1]).value_or(0);
        }
      }
      out.servers.push_back(std::move(s));
    }
  }
  return out;
}

std::string TrackerSession::text_summary() {
  return tracker_wire::text_summary(impl_->summary_data());
}

ServerAddress TrackerSession::request_server(const std::string& key, int priority,
                                             std::optional<std::chrono::milliseconds> wait) {
  Json message = Json::array({static_cast<int>(TrackerCode::kRequest), key, "", priority});
  const double wait_s = wait ? std::max<double>(0, wait->count()) / 1000.0 : 0;
  if (wait) message.push_back(wait_s);
  impl_->ensure_connected();
  Json reply;
  try {
    impl_->socket->send_json(message, impl_->io_timeout());
    std::optional<milliseconds> bound;
    if (wait) bound = std::max(*wait, milliseconds(0)) + milliseconds(5000);
    reply = impl_->socket->recv_json(bound);
  } catch (const kiln::detail::InterruptedError&) {
    // Ctrl-C while waiting (kiln/detail/cancellation.h): the request leaves the tracker's queue
    // with the connection.
    impl_->socket.reset();
    throw;
  } catch (const ConnectionError& e) {
    impl_->socket.reset();  // the request may still be queued: drop it with the connection
    if (e.timed_out() && wait) {
      throw NotFoundError(fmt::format(
          "no free server with key '{}' within {:g} s (the tracker at {}:{} did not answer; a "
          "tracker without Kiln's wait bound, such as TVM's, keeps requests waiting)",
          key, wait_s, impl_->host, impl_->port));
    }
    throw RuntimeError(fmt::format("the tracker connection failed: {}", e.what()));
  }
  if (reply.is_array() && reply.size() == 2 && reply[0] == static_cast<int>(TrackerCode::kFail) &&
      reply[1].is_string()) {
    throw NotFoundError(reply[1].get<std::string>());
  }
  if (!reply.is_array() || reply.size() != 2 || reply[0] != 0 || !reply[1].is_array() ||
      reply[1].size() != 3 || !reply[1][2].is_string()) {
    throw RuntimeError("Invalid return value " + dumps(reply));
  }
  ServerAddress out;
  const Json& v = reply[1];
  out.host = tracker_wire::python_str(v[0]);
  const std::optional<int> port = port_of(v[1]);
  if (!port) throw RuntimeError("Invalid return value " + dumps(reply));
  out.port = *port;
  out.matchkey = v[2].get<std::string>();
  return out;
}

bool TrackerSession::ping() {
  try {
    return impl_->call(Json::array({static_cast<int>(TrackerCode::kPing)})) == 0;
  } catch (const std::exception&) {
    return false;
  }
}

bool TrackerSession::stop(const std::string& stop_key) {
  const Json reply = impl_->call(Json::array({static_cast<int>(TrackerCode::kStop), stop_key}));
  if (reply == 0) {
    impl_->socket.reset();  // the tracker is going away
    return true;
  }
  return false;
}

const std::string& TrackerSession::host() const { return impl_->host; }
int TrackerSession::port() const { return impl_->port; }

// ---------------------------------------------------------------------------------------------
// TrackerRegistration

struct TrackerRegistration::Impl {
  RegistrationOptions o;

  struct Key {
    std::string matchkey;
    Clock::time_point last_seen_pending;  // PUT time, then the last check that listed it
  };
  mutable std::mutex mu;  // guards keys and connected
  std::vector<Key> keys;
  bool connected = false;

  std::mutex io_mu;  // one maintain() at a time; guards everything below
  std::unique_ptr<TrackerConnection> socket;
  std::optional<Clock::time_point> last_attempt;
  Clock::time_point last_ping;
  bool reported_unreachable = false;
  std::shared_ptr<const tls::Context> tls;  // the tracker token's, when given

  // Match keys never to offer again: the outstanding ones and the latest retired ones
  // (random_key's 53 random bits make a repeat unlikely anyway; remembering every key ever
  // offered grew a long-running server by ~110 bytes per session). Guarded by mu.
  std::set<std::string> used_keys;
  std::deque<std::string> retired;  // oldest first; each is also in used_keys

  std::string tracker() const { return fmt::format("{}:{}", o.tracker_host, o.tracker_port); }
  Json custom_addr() const { return o.custom_addr ? Json(*o.custom_addr) : Json(nullptr); }

  // Under mu.
  std::string new_matchkey() {
    std::string key = random_key(o.key, used_keys);
    used_keys.insert(key);
    return key;
  }
  // `matchkey` is no longer outstanding (claimed, replaced, or lost with the connection):
  // remembered among the recent ones, the oldest of which is forgotten. Under mu.
  void retire(const std::string& matchkey) {
    retired.push_back(matchkey);
    while (retired.size() > TrackerRegistration::kRememberedRetiredKeys) {
      used_keys.erase(retired.front());
      retired.pop_front();
    }
  }

  void expect_success(const Json& reply, const char* what) {
    if (reply != 0) {
      throw RuntimeError(
          fmt::format("the tracker {} answered {} with {}", tracker(), what, dumps(reply)));
    }
  }

  bool try_connect(Clock::time_point now) {
    if (last_attempt && now - *last_attempt < o.reconnect_period) return false;
    last_attempt = now;
    try {
      auto s = TrackerConnection::connect(o.tracker_host, o.tracker_port, o.io_timeout, tls.get());
      s->handshake(o.io_timeout);
      Json info = Json::object();
      info["key"] = "server:" + o.key;
      info["addr"] = Json::array({custom_addr(), o.server_port});
      expect_success(
          s->call(Json::array({static_cast<int>(TrackerCode::kUpdateInfo), info}), o.io_timeout),
          "UPDATE_INFO");
      socket = std::move(s);
    } catch (const std::exception& e) {
      const std::string m =
          fmt::format("cannot register key '{}' with the tracker {}: {} (retrying every {} ms)",
                      o.key, tracker(), e.what(), o.reconnect_period.count());
      log(reported_unreachable ? LogLevel::kDebug : LogLevel::kWarn, "tracker", m);
      reported_unreachable = true;
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const Key& k : keys) retire(k.matchkey);
      keys.clear();  // a new connection: the tracker knows none of the old keys
      connected = true;
    }
    reported_unreachable = false;
    last_ping = now;
    log(LogLevel::kInfo, "tracker",
        fmt::format("registered key '{}' (port {}) with the tracker {}", o.key, o.server_port,
                    tracker()));
    return true;
  }

  void drop_connection(const std::string& why) {
    socket.reset();
    {
      std::lock_guard<std::mutex> lock(mu);
      connected = false;
    }
    last_attempt = Clock::now();
    log(LogLevel::kWarn, "tracker",
        fmt::format("lost the tracker {}: {}; registering again in {} ms", tracker(), why,
                    o.reconnect_period.count()));
  }

  void put_missing(int free_slots) {
    while (true) {
      std::string matchkey;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (static_cast<int>(keys.size()) >= free_slots) return;
        matchkey = new_matchkey();
        // Outstanding before the tracker hears of it: a client may use it at once.
        keys.push_back(Key{matchkey, Clock::now()});
      }
      expect_success(
          socket->call(Json::array({static_cast<int>(TrackerCode::kPut), o.key,
                                    Json::array({o.server_port, matchkey}), custom_addr()}),
                       o.io_timeout),
          "PUT");
    }
  }

  void check_pending(Clock::time_point now) {
    const Json reply = socket->call(
        Json::array({static_cast<int>(TrackerCode::kGetPendingMatchkeys)}), o.io_timeout);
    if (!reply.is_array()) {
      throw RuntimeError(fmt::format("the tracker {} answered GET_PENDING_MATCHKEYS with {}",
                                     tracker(), dumps(reply)));
    }
    std::set<std::string> pending;
    for (const auto& k : reply) {
      if (k.is_string()) pending.insert(k.get<std::string>());
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = keys.begin(); it != keys.end();) {
      if (pending.count(it->matchkey) != 0) {
        it->last_seen_pending = now;
      } else if (now - it->last_seen_pending > o.unmatch_timeout + o.ping_period) {
        // A client took it but never came: replace it with a fresh one.
        log(LogLevel::kInfo, "tracker",
            fmt::format("match key {} was handed out but not used; registering a new one",
                        it->matchkey));
        retire(it->matchkey);
        it = keys.erase(it);
        continue;
      }
      ++it;
    }
  }
};

TrackerRegistration::TrackerRegistration(RegistrationOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  if (!impl_->o.tracker_token.empty()) {
    tls::check_token_strength(impl_->o.tracker_token, "the tracker token");
    impl_->tls = tls::client_context(tls::Purpose::kTracker, impl_->o.tracker_token);
  }
}

TrackerRegistration::~TrackerRegistration() = default;

void TrackerRegistration::maintain(int free_slots) {
  std::unique_lock<std::mutex> io(impl_->io_mu, std::try_to_lock);
  if (!io.owns_lock()) return;  // another thread is at it
  try {
    const auto now = Clock::now();
    if (!impl_->socket && !impl_->try_connect(now)) return;
    if (now - impl_->last_ping >= impl_->o.ping_period) {
      impl_->last_ping = now;
      impl_->check_pending(now);
    }
    impl_->put_missing(free_slots);
  } catch (const std::exception& e) {
    impl_->drop_connection(e.what());
  }
}

bool TrackerRegistration::claim(const std::string& matchkey) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& keys = impl_->keys;
  auto it = std::find_if(keys.begin(), keys.end(),
                         [&](const Impl::Key& k) { return k.matchkey == matchkey; });
  if (it == keys.end()) return false;
  impl_->retire(it->matchkey);
  keys.erase(it);
  return true;
}

bool TrackerRegistration::connected() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->connected;
}

size_t TrackerRegistration::remembered_keys() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->used_keys.size();
}

std::vector<std::string> TrackerRegistration::outstanding() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& k : impl_->keys) out.push_back(k.matchkey);
  return out;
}

}  // namespace kiln::rpc
