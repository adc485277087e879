// SPDX-License-Identifier: Apache-2.0
// The tracker (SPEC.md §4.5, docs/tracker.md): one io_context on its own thread serves every
// connection with asynchronous reads; all tracker state lives on that thread. With a tracker
// token every connection is a TLS 1.3 stream keyed by it (rpc/tls_psk.h) before the magic.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/rpc/tracker.h"
#include "rpc/listen.h"
#include "rpc/log_throttle.h"
#include "rpc/tls_psk.h"
#include "rpc/tracker_wire.h"

namespace kiln::rpc {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = asio::ssl::stream<tcp::socket>;
using tracker_wire::dumps;
using tracker_wire::frame;
using tracker_wire::Json;

// Limits that bound what one peer can make the tracker hold (docs/tracker.md).
constexpr size_t kMaxFreeValuesPerConnection = 1024;  // PUT values not yet handed out
constexpr size_t kMaxRequestsPerConnection = 1024;    // REQUESTs waiting
constexpr size_t kMaxInfoBytes = 4 * 1024;            // UPDATE_INFO, merged, as JSON text
// Keys, match keys, users and addresses (TVM's are tens of bytes).
constexpr size_t kMaxNameBytes = 512;
// Held free values and requests of one connection, in bytes (see Value::bytes).
constexpr size_t kMaxHeldBytesPerConnection = 1 << 20;
// What SUMMARY lists (queue keys and server infos), in bytes: its reply must fit one message
// (kMaxTrackerMessageBytes) or every client's SUMMARY fails.
constexpr size_t kMaxSummaryBytes = 768 * 1024;
// The part of it one peer address may take (1/12): room for 256 servers (the default
// per-address connection bound) with infos and keys of ~120 bytes each, while one address
// cannot fill SUMMARY and lock new keys out for everyone.
constexpr size_t kMaxSummaryBytesPerAddress = 64 * 1024;
// One peer address may hold at most 1/8 of the tracker's held bytes and free values (but no
// less than one connection's own bound): a legitimate host runs a handful of servers, and an
// address flooding PUTs or REQUESTs over many connections leaves the rest to everyone else.
constexpr size_t kAddressShareDivisor = 8;
// Bytes one queue adds to SUMMARY besides its key: `"": {"free": n, "pending": m}, `.
constexpr size_t kQueueSummaryOverhead = 64;
// Bookkeeping per value or request besides its strings.
constexpr size_t kEntryOverhead = 128;
constexpr size_t kMaxQueuedReplyBytes = 64 << 20;  // replies the peer has not read yet
constexpr size_t kMaxKeys = 16384;                 // schedulers (empty ones are dropped)
constexpr double kMaxWaitSeconds = 30.0 * 24 * 3600;
constexpr size_t kReadChunkBytes = 64 * 1024;

void debug(const std::string& m) { log(LogLevel::kDebug, "tracker", m); }
void info(const std::string& m) { log(LogLevel::kInfo, "tracker", m); }
void warn(const std::string& m) { log(LogLevel::kWarn, "tracker", m); }

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < bytes; i += 4) {
    out += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  }
  return out.substr(0, 2 * bytes);
}

// A short, printable excerpt of a peer's message for a log line.
std::string excerpt(const std::string& text) {
  std::string out;
  for (const char c : text.substr(0, 200)) {
    out += (c >= 0x20 && c < 0x7F) ? c : '?';
  }
  if (text.size() > 200) out += "...";
  return out;
}

bool is_integral(const Json& v) {
  if (v.is_number_integer()) return true;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15;
  }
  return false;
}

struct Connection;

// One free resource: TVM's (conn, host, port, matchkey).
struct Value {
  std::weak_ptr<Connection> owner;
  std::string owner_ip;  // the address its bytes are charged to (AddressUsage)
  std::string key;       // the key it was PUT under
  Json host;
  Json port;
  std::string matchkey;
  bool dead = false;  // its server connection closed: never hand it out again
  size_t bytes = 0;   // charged to Impl::held_bytes while it is free
  bool held = false;  // whether `bytes` is still charged
};

struct Request {
  uint64_t seq = 0;
  double priority = 0;
  std::string key;
  std::weak_ptr<Connection> conn;
  std::string conn_ip;                        // the address its bytes are charged to (AddressUsage)
  std::unique_ptr<asio::steady_timer> timer;  // the wait bound, when given
  double wait_s = 0;
  bool active = true;
  size_t bytes = 0;  // charged to held_bytes (and its connection) while active
};

// Requests ordered by higher priority first, then arrival.
using RequestOrder = std::pair<double, uint64_t>;  // (-priority, seq)

struct Scheduler {
  std::deque<std::shared_ptr<Value>> values;                  // FIFO
  std::map<RequestOrder, std::shared_ptr<Request>> requests;  // best first
  std::string creator_ip;  // its key's SUMMARY bytes are charged to this address
};

// What one peer address holds, over all its connections (and the free values and queues that
// outlived them): the shares that keep one address from exhausting a bound for everyone.
struct AddressUsage {
  size_t connections = 0;
  size_t summary_bytes = 0;  // infos of its connections and queue keys it created
  size_t held_bytes = 0;     // Value::bytes and Request::bytes charged to it
  size_t free_values = 0;    // its free values in the queues
  bool unused() const {
    return connections == 0 && summary_bytes == 0 && held_bytes == 0 && free_values == 0;
  }
};

struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  // The connection's socket; with a tracker token the TLS stream takes it over (transport()).
  tcp::socket socket;
  std::unique_ptr<TlsStream> tls;
  tcp::socket& transport() { return tls ? tls->next_layer() : socket; }
  uint64_t id = 0;
  std::string peer_ip;
  std::string name;  // "ip:port"
  bool open = true;
  unsigned char header[4] = {0, 0, 0, 0};
  std::string body;      // what has arrived of the current message
  size_t body_size = 0;  // its announced length
  std::deque<std::string> out;
  size_t out_bytes = 0;
  bool writing = false;
  bool stop_after_flush = false;
  Json info = Json::object();
  std::vector<std::shared_ptr<Value>> free_values;        // PUT here, not yet handed out
  std::map<uint64_t, std::shared_ptr<Request>> requests;  // waiting, by seq
  size_t held_bytes = 0;                                  // of its free values and waiting requests
  size_t info_bytes = 0;  // of `info` as JSON text, charged to Impl::summary_bytes
  bool greeted = false;   // it sent the magic and a first complete message
  // Under a tracker token: it completed the TLS handshake (it holds the token). Connections
  // that have not are the first closed to make room (idle_victim).
  bool authenticated = false;
  std::unique_ptr<asio::steady_timer> handshake_timer;
  bool sent_put = false;                         // a server: exempt from the idle deadline
  Clock::time_point last_active;                 // when its last complete message arrived
  std::list<Connection*>::iterator by_activity;  // its place in Impl::by_activity

  bool is_server() const { return info.contains("key"); }
  // Whether its info may keep its place in SUMMARY when room is needed there: it serves (it
  // sent PUT; a server whose values are all handed out is serving sessions and PUTs again) or
  // waits for a server.
  bool entitled_to_summary() const { return sent_put || !requests.empty(); }
  // Whether closing it would take something from a peer that waits on the tracker: free
  // servers it offers, or requests waiting for one.
  bool holds_resources() const { return !free_values.empty() || !requests.empty(); }
};

// The stream a connection reads and writes: its TLS stream when the tracker has a token,
// else its socket.
template <typename Buffers, typename Handler>
void read_exactly(Connection& c, const Buffers& buffers, Handler&& handler) {
  if (c.tls) {
    asio::async_read(*c.tls, buffers, std::forward<Handler>(handler));
  } else {
    asio::async_read(c.socket, buffers, std::forward<Handler>(handler));
  }
}
template <typename Buffers, typename Handler>
void read_some(Connection& c, const Buffers& buffers, Handler&& handler) {
  if (c.tls) {
    c.tls->async_read_some(buffers, std::forward<Handler>(handler));
  } else {
    c.socket.async_read_some(buffers, std::forward<Handler>(handler));
  }
}
template <typename Buffers, typename Handler>
void write_all(Connection& c, const Buffers& buffers, Handler&& handler) {
  if (c.tls) {
    asio::async_write(*c.tls, buffers, std::forward<Handler>(handler));
  } else {
    asio::async_write(c.socket, buffers, std::forward<Handler>(handler));
  }
}

}  // namespace

struct Tracker::Impl {
  // Declared first so that it is destroyed last: everything below may hold its objects.
  asio::io_context io;
  // The tracker token's key and the TLS context built on it (null without a token); before
  // the connections, whose TLS streams use them.
  std::unique_ptr<tls::Context> tls_keys;
  std::unique_ptr<asio::ssl::context> tls_context;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  TrackerOptions options;
  std::string stop_key;
  int port = 0;
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;  // guarded by mu

  // State of the io thread only.
  bool stopping = false;
  std::map<uint64_t, std::shared_ptr<Connection>> connections;  // by arrival
  std::list<Connection*> by_activity;  // open connections, least recently active first
  asio::steady_timer idle_sweep{io};
  std::vector<std::string> key_order;  // schedulers, by creation
  std::unordered_map<std::string, std::unique_ptr<Scheduler>> schedulers;
  uint64_t next_connection_id = 0;
  uint64_t next_request_seq = 0;
  size_t total_free_values = 0;
  size_t held_bytes = 0;     // Value::bytes and Request::bytes of everything held
  size_t summary_bytes = 0;  // queue keys and infos: what SUMMARY will list
  std::unordered_map<std::string, AddressUsage> per_address;  // by peer IP
  // Free values whose connection left without sending UPDATE_INFO (they stay, as in TVM),
  // oldest first: the first to go when the tracker is full.
  std::deque<std::weak_ptr<Value>> orphans;
  // Events any peer can provoke at will are logged rate-limited (a flood must not flood the
  // log): refused connections and handshakes, connections closed to make room or for going
  // idle, and peers closed for what they sent.
  LogThrottle refusals{LogLevel::kWarn, "tracker", "refused connections"};
  LogThrottle evictions{LogLevel::kWarn, "tracker", "connections closed to make room"};
  LogThrottle idle_closes{LogLevel::kInfo, "tracker", "idle connections closed"};
  LogThrottle peer_warnings{LogLevel::kWarn, "tracker", "connections closed for what they sent"};
  LogThrottle summary_reclaims{LogLevel::kWarn, "tracker",
                               "connections closed to make room in SUMMARY"};

  void bind();
  void run();
  void do_accept();
  void do_stop();
  // do_stop() once the current handler has returned (it clears what handlers may hold).
  void post_stop() {
    asio::post(io, [this] { do_stop(); });
  }
  void start(tcp::socket socket);
  // With a tracker token: waits for the peer's first byte, then runs the TLS handshake (a
  // peer that does not start one is told that a token is required).
  void await_tls(const std::shared_ptr<Connection>& c);
  void start_tls(const std::shared_ptr<Connection>& c);
  void read_magic(const std::shared_ptr<Connection>& c);
  void read_header(const std::shared_ptr<Connection>& c);
  void read_body(const std::shared_ptr<Connection>& c);
  void handle(const std::shared_ptr<Connection>& c, const std::string& text);
  bool send(const std::shared_ptr<Connection>& c, const std::string& bytes);
  bool reply(const std::shared_ptr<Connection>& c, const Json& value) {
    return send(c, frame(dumps(value)));
  }
  void write_more(const std::shared_ptr<Connection>& c);
  // Closes `c`, logging `why` at `level` (warnings rate-limited: peer_warnings), or through
  // `throttle`.
  void close(const std::shared_ptr<Connection>& c, LogLevel level, const std::string& why);
  void close(const std::shared_ptr<Connection>& c, LogThrottle& throttle, const std::string& why);
  void close_quietly(const std::shared_ptr<Connection>& c);
  // A complete message arrived from `c`: it moves to the back of by_activity.
  void touch(Connection& c);
  // The connection to close for a new one when the table (or the descriptors) ran out: the
  // least recently active one that holds no free servers and no waiting requests; under a
  // tracker token those that have not completed the TLS handshake first, then clients, then
  // servers; null when every connection holds something.
  std::shared_ptr<Connection> idle_victim();
  // Closes connections idle for longer than options.idle_timeout that are neither servers
  // (they sent PUT) nor waiting for a server; then runs again after a while.
  void sweep_idle();
  void schedule_idle_sweep();
  AddressUsage* usage_of(const std::string& ip);
  // Forgets `ip`'s entry once it holds nothing.
  void tidy_usage(const std::string& ip);
  size_t address_held_limit() const {
    return std::max(options.max_held_bytes / kAddressShareDivisor, kMaxHeldBytesPerConnection);
  }
  size_t address_free_values_limit() const {
    return std::max(options.max_free_values / kAddressShareDivisor, kMaxFreeValuesPerConnection);
  }
  // Changes what `c`'s address adds to SUMMARY from `old_bytes` to `new_bytes` for `what`
  // (a queue key of its PUT or REQUEST: 0 to its cost; its info: its old size to its new
  // one). `entitled`: whether `c` serves or waits (a PUT or REQUEST does; for an info,
  // Connection::entitled_to_summary). When SUMMARY is full, closes connections whose info is
  // not entitled to its place (reclaim_summary). BadMessage when the address's share would be
  // passed even after dropping empty queues, or the tracker's bound even after that reclaim.
  void charge_summary(const Connection& c, size_t old_bytes, size_t new_bytes, bool entitled,
                      const std::string& what);
  // Makes `needed` bytes of SUMMARY free for `what` of `c` by closing connections whose info
  // lists no server they serve and no request (Connection::entitled_to_summary), oldest
  // first; when `c` is not `entitled` itself, only connections older than it. Closes nothing
  // and returns false when those cannot free `needed` bytes.
  bool reclaim_summary(const Connection& c, size_t needed, bool entitled, const std::string& what);
  // Drops free values whose server left (from `only_ip` when given), oldest first, until
  // `fits()` holds or none is left.
  template <typename Fits>
  void drop_orphans_until(Fits fits, const std::string* only_ip);
  // The queue of `key`, created for `c` (its address pays for the key in SUMMARY) when new.
  Scheduler& scheduler(const std::string& key, const Connection& c);
  Scheduler* find_scheduler(const std::string& key);
  void schedule(const std::string& key);
  void remove_request(const std::shared_ptr<Request>& r);
  void expire(const std::shared_ptr<Request>& r);
  Json summary() const;
  int64_t servers_with_key(const std::string& key) const;

  void on_put(const std::shared_ptr<Connection>& c, const Json& msg);
  void on_request(const std::shared_ptr<Connection>& c, const Json& msg);
  // Takes a free value out of its queue for good.
  void drop_free_value(const std::shared_ptr<Value>& v);
  void on_update_info(const std::shared_ptr<Connection>& c, const Json& msg);
  // Stops charging a free value that left the queues.
  void release(const std::shared_ptr<Value>& v);
  // Charges `bytes` for `c`; BadMessage when its own or the tracker's bound is passed.
  void charge(const std::shared_ptr<Connection>& c, size_t bytes, const char* what);
  // Drops empty queues (their keys count against the SUMMARY budget).
  void drop_empty_queues();

  // Runs `f`; an exception closes `c` with a warning instead of leaving the io thread.
  template <typename F>
  void guarded(const std::shared_ptr<Connection>& c, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      close(c, LogLevel::kWarn, fmt::format("error handling {}: {}", c->name, e.what()));
    }
  }
};

namespace {
struct BadMessage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Refuses a key, match key, user or address longer than kMaxNameBytes (a string, or a
// number's text).
void check_name(const Json& value, const char* what) {
  const size_t n =
      value.is_string() ? value.get_ref<const std::string&>().size() : dumps(value).size();
  if (n > kMaxNameBytes) {
    throw BadMessage(
        fmt::format("the {} is {} bytes long; the limit is {}", what, n, kMaxNameBytes));
  }
}
}  // namespace

void Tracker::Impl::bind() {
  if (options.port < 0 || options.port > 65535) {
    throw RuntimeError(fmt::format("tracker: port {} is out of range", options.port));
  }
  port = listen_on_first_free_port(acceptor, options.host, options.port, options.port_end);
}

void Tracker::Impl::run() {
  while (true) {
    try {
      io.run();
      break;
    } catch (const std::exception& e) {
      log(LogLevel::kError, "tracker", fmt::format("unexpected error: {}", e.what()));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stopped = true;
  }
  cv.notify_all();
}

void Tracker::Impl::do_accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec == boost::system::errc::too_many_files_open ||
        ec == boost::system::errc::too_many_files_open_in_system) {
      // Out of descriptors: idle connections must not lock new ones out (they would sit in
      // the backlog), so the longest idle one makes room, as when the table is full.
      if (const auto victim = idle_victim()) {
        close(victim, evictions,
              fmt::format("out of file descriptors ({}): closing {}, idle for {} s, to accept a "
                          "new connection",
                          ec.message(), victim->name,
                          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() -
                                                                           victim->last_active)
                              .count()));
        do_accept();
        return;
      }
    }
    if (ec) {
      // E.g. out of file descriptors: try again shortly instead of spinning.
      refusals.log(fmt::format("accept failed: {}", ec.message()));
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopping) do_accept();
      });
      return;
    }
    try {
      start(std::move(socket));
    } catch (const std::exception& e) {
      warn(fmt::format("dropping a new connection: {}", e.what()));
    }
    do_accept();
  });
}

void Tracker::Impl::start(tcp::socket socket) {
  boost::system::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  asio::ip::address address = peer.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  const std::string ip = address.to_string();
  const std::string name = fmt::format("{}:{}", ip, peer.port());
  // find(), not []: a refused address must not leave an entry behind.
  const AddressUsage* here = usage_of(ip);
  if (here != nullptr && here->connections >= options.max_connections_per_address) {
    refusals.log(fmt::format("refusing {}: {} connections from {} are open (the per-address limit)",
                             name, here->connections, ip));
    socket.close(ec);
    return;
  }
  if (connections.size() >= options.max_connections) {
    // Make room by closing the connection idle the longest that holds nothing others wait
    // for: idle peers, however many addresses they come from, cannot lock out a client.
    const std::shared_ptr<Connection> idle = idle_victim();
    if (!idle) {
      refusals.log(fmt::format(
          "refusing {}: {} connections are open and each holds free servers or waiting requests",
          name, connections.size()));
      socket.close(ec);
      return;
    }
    close(idle, evictions,
          fmt::format(
              "{} connections are open: closing {}, idle for {} s (the longest), to make "
              "room for {}",
              connections.size(), idle->name,
              std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - idle->last_active)
                  .count(),
              name));
  }
  auto c = std::make_shared<Connection>(std::move(socket));
  c->id = next_connection_id++;
  c->peer_ip = ip;
  c->name = name;
  c->socket.non_blocking(true, ec);
  c->socket.set_option(tcp::no_delay(true), ec);
  c->last_active = Clock::now();
  connections[c->id] = c;
  c->by_activity = by_activity.insert(by_activity.end(), c.get());
  ++per_address[ip].connections;
  c->handshake_timer = std::make_unique<asio::steady_timer>(io);
  c->handshake_timer->expires_after(options.handshake_timeout);
  std::weak_ptr<Connection> weak = c;
  c->handshake_timer->async_wait([this, weak](const boost::system::error_code& e) {
    if (e || stopping) return;
    const auto conn = weak.lock();
    if (!conn || !conn->open || conn->greeted) return;
    close(conn, peer_warnings,
          fmt::format("{} sent no {}magic and first message within the handshake deadline of {} "
                      "ms; closing it",
                      conn->name, tls_context ? "TLS handshake, " : "",
                      options.handshake_timeout.count()));
  });
  debug(fmt::format("connection from {}", c->name));
  if (tls_context) {
    await_tls(c);
  } else {
    read_magic(c);
  }
}

void Tracker::Impl::await_tls(const std::shared_ptr<Connection>& c) {
  c->socket.async_wait(tcp::socket::wait_read, [this, c](const boost::system::error_code& ec) {
    if (!c->open) return;
    if (ec) {
      close(c, LogLevel::kDebug, fmt::format("{} closed before the TLS handshake", c->name));
      return;
    }
    guarded(c, [&] { start_tls(c); });
  });
}

void Tracker::Impl::start_tls(const std::shared_ptr<Connection>& c) {
  unsigned char first = 0;
  boost::system::error_code ec;
  // Peeked, not read: the TLS stream must see it.
  const size_t n = c->socket.receive(asio::buffer(&first, 1), tcp::socket::message_peek, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    await_tls(c);
    return;
  }
  if (ec || n == 0) {
    close(c, LogLevel::kDebug, fmt::format("{} closed before the TLS handshake", c->name));
    return;
  }
  if (!tls::starts_tls(first)) {
    // A peer without the token (TVM's clients and servers, Kiln's without
    // --tracker-token-file) sends the magic: say in plain text why it is refused. Its bytes are
    // read first, so that the close is a FIN after the reply rather than a reset that could
    // discard it.
    char scratch[256];
    (void)c->socket.receive(asio::buffer(scratch), 0, ec);
    const std::string reply = tracker_wire::kTokenRequiredReply;
    (void)c->socket.send(asio::buffer(reply), 0, ec);
    close(c, refusals,
          fmt::format("refused {}: it did not start a TLS handshake, and this tracker requires "
                      "the tracker token (a client or server without --tracker-token-file, or "
                      "TVM's)",
                      c->name));
    return;
  }
  c->tls = std::make_unique<TlsStream>(std::move(c->socket), *tls_context);
  c->tls->async_handshake(asio::ssl::stream_base::server,
                          [this, c](const boost::system::error_code& e) {
                            if (!c->open) return;
                            if (e) {
                              close(c, refusals,
                                    fmt::format("refused {}: the TLS handshake keyed by the "
                                                "tracker token failed ({}): it does not hold the "
                                                "token, or gave up",
                                                c->name, e.message()));
                              return;
                            }
                            c->authenticated = true;
                            read_magic(c);
                          });
}

void Tracker::Impl::read_magic(const std::shared_ptr<Connection>& c) {
  read_exactly(*c, asio::buffer(c->header), [this, c](const boost::system::error_code& ec, size_t) {
    if (!c->open) return;
    if (ec) {
      close(c, LogLevel::kDebug, fmt::format("{} closed before the handshake", c->name));
      return;
    }
    guarded(c, [&] {
      if (tracker_wire::decode_int32(c->header) != kTrackerMagic) {
        close(c, refusals,
              tls::starts_tls(c->header[0]) && !c->tls
                  ? fmt::format("Invalid magic from {}: it starts a TLS handshake (a client "
                                "or server with a tracker token), and this tracker has no "
                                "token (--token-file)",
                                c->name)
                  : fmt::format("Invalid magic from {}", c->name));
        return;
      }
      if (send(c, tracker_wire::encode_int32(kTrackerMagic))) read_header(c);
    });
  });
}

void Tracker::Impl::read_header(const std::shared_ptr<Connection>& c) {
  read_exactly(*c, asio::buffer(c->header), [this, c](const boost::system::error_code& ec, size_t) {
    if (!c->open) return;
    if (ec) {
      close(c, LogLevel::kDebug, fmt::format("{} closed the connection", c->name));
      return;
    }
    const int32_t size = tracker_wire::decode_int32(c->header);
    if (size <= 0 || size > kMaxTrackerMessageBytes) {
      close(c, LogLevel::kWarn,
            fmt::format("Invalid msg_size {} from {} (must be in [1, {}]); closing it", size,
                        c->name, kMaxTrackerMessageBytes));
      return;
    }
    guarded(c, [&] {
      c->body.clear();
      c->body_size = static_cast<size_t>(size);
      read_body(c);
    });
  });
}

void Tracker::Impl::read_body(const std::shared_ptr<Connection>& c) {
  // The body grows with the bytes that arrive, so a peer that announces 1 MiB and sends
  // nothing costs nothing.
  const size_t have = c->body.size();
  const size_t chunk = std::min(c->body_size - have, kReadChunkBytes);
  c->body.resize(have + chunk);
  read_some(*c, asio::buffer(c->body.data() + have, chunk),
            [this, c, have](const boost::system::error_code& ec, size_t n) {
              if (!c->open) return;
              if (ec) {
                close(c, LogLevel::kDebug,
                      fmt::format("{} closed the connection mid-message", c->name));
                return;
              }
              c->body.resize(have + n);
              if (c->body.size() < c->body_size) {
                guarded(c, [&] { read_body(c); });
                return;
              }
              std::string text;
              text.swap(c->body);
              guarded(c, [&] { handle(c, text); });
              if (c->open && !stopping) read_header(c);
            });
}

bool Tracker::Impl::send(const std::shared_ptr<Connection>& c, const std::string& bytes) {
  if (!c->open) return false;
  size_t sent = 0;
  if (!c->writing && !c->tls) {  // TLS records go through the stream

    boost::system::error_code ec;
    sent = c->socket.send(asio::buffer(bytes), 0, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      sent = 0;
    } else if (ec) {
      close(c, LogLevel::kDebug, fmt::format("sending to {} failed: {}", c->name, ec.message()));
      return false;
    }
    if (sent == bytes.size()) return true;
  }
  c->out.push_back(bytes.substr(sent));
  c->out_bytes += bytes.size() - sent;
  if (c->out_bytes > kMaxQueuedReplyBytes) {
    close(c, LogLevel::kWarn,
          fmt::format("{} does not read its replies ({} bytes queued); closing it", c->name,
                      c->out_bytes));
    return false;
  }
  if (!c->writing) write_more(c);
  return true;
}

void Tracker::Impl::write_more(const std::shared_ptr<Connection>& c) {
  c->writing = true;
  write_all(*c, asio::buffer(c->out.front()),
            [this, c](const boost::system::error_code& ec, size_t n) {
              if (!c->open) return;
              if (ec) {
                close(c, LogLevel::kDebug,
                      fmt::format("sending to {} failed: {}", c->name, ec.message()));
                return;
              }
              c->out_bytes -= n;
              c->out.pop_front();
              if (!c->out.empty()) {
                write_more(c);
                return;
              }
              c->writing = false;
              if (c->stop_after_flush) post_stop();
            });
}

void Tracker::Impl::close(const std::shared_ptr<Connection>& c, LogLevel level,
                          const std::string& why) {
  if (!c->open) return;
  if (level == LogLevel::kWarn) {
    peer_warnings.log(why);  // a peer can provoke these at will
  } else {
    log(level, "tracker", why);
  }
  close_quietly(c);
}

void Tracker::Impl::close(const std::shared_ptr<Connection>& c, LogThrottle& throttle,
                          const std::string& why) {
  if (!c->open) return;
  throttle.log(why);
  close_quietly(c);
}

void Tracker::Impl::close_quietly(const std::shared_ptr<Connection>& c) {
  if (!c->open) return;
  c->open = false;
  boost::system::error_code ec;
  c->transport().shutdown(tcp::socket::shutdown_both, ec);
  c->transport().close(ec);
  if (c->handshake_timer) c->handshake_timer->cancel();
  if (connections.erase(c->id) > 0) {
    by_activity.erase(c->by_activity);
    if (AddressUsage* u = usage_of(c->peer_ip)) --u->connections;
  }
  summary_bytes -= c->info_bytes;
  if (AddressUsage* u = usage_of(c->peer_ip)) u->summary_bytes -= c->info_bytes;
  c->info_bytes = 0;
  // Its waiting requests go at once.
  auto requests = std::move(c->requests);
  c->requests.clear();
  for (auto& [seq, r] : requests) remove_request(r);
  // A server's resources leave with it (TVM: only connections that sent UPDATE_INFO).
  for (const auto& v : c->free_values) {
    if (c->is_server()) {
      drop_free_value(v);
    } else {
      orphans.push_back(v);
    }
  }
  c->free_values.clear();
  if (orphans.size() > options.max_free_values) {
    // Handed out since: at most max_free_values of them are still free.
    std::erase_if(orphans, [](const std::weak_ptr<Value>& w) { return w.expired(); });
  }
  tidy_usage(c->peer_ip);
  if (c->stop_after_flush) post_stop();
}

void Tracker::Impl::touch(Connection& c) {
  c.last_active = Clock::now();
  by_activity.splice(by_activity.end(), by_activity, c.by_activity);
}

std::shared_ptr<Connection> Tracker::Impl::idle_victim() {
  // Under a token, connections that have not proved they hold it (still in the TLS handshake,
  // or never starting one) go before any that did: a churn of new connections, which all
  // start unauthenticated, closes its own kind. Then clients (and peers in their handshake),
  // then servers: a server that sent PUT and holds no free value is serving a session and will
  // PUT again.
  enum Tier { kUnauthenticated, kClients, kServersToo };
  for (const Tier tier : {kUnauthenticated, kClients, kServersToo}) {
    if (tier == kUnauthenticated && !tls_context) continue;
    for (Connection* c : by_activity) {
      if (c->holds_resources()) continue;
      if (tier == kUnauthenticated && c->authenticated) continue;
      if (tier == kClients && c->sent_put) continue;
      return connections.at(c->id);
    }
  }
  return nullptr;
}

void Tracker::Impl::sweep_idle() {
  const auto now = Clock::now();
  std::vector<std::shared_ptr<Connection>> idle;
  for (Connection* c : by_activity) {
    if (now - c->last_active < options.idle_timeout) break;  // the rest are more recent
    if (c->sent_put || !c->requests.empty()) continue;       // servers and waiting clients
    idle.push_back(connections.at(c->id));
  }
  for (const auto& c : idle) {
    close(c, idle_closes,
          fmt::format("{} sent nothing for {} ms and neither serves nor waits (the idle deadline); "
                      "closing it",
                      c->name, options.idle_timeout.count()));
  }
}

void Tracker::Impl::schedule_idle_sweep() {
  if (options.idle_timeout.count() <= 0) return;  // no idle deadline
  // A quarter of the deadline (at most 1 s): an idle connection goes within 1.25 deadlines.
  const auto period = std::clamp<std::chrono::milliseconds>(
      options.idle_timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  idle_sweep.expires_after(period);
  idle_sweep.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping) return;
    try {
      sweep_idle();
    } catch (const std::exception& e) {
      log(LogLevel::kError, "tracker", fmt::format("idle sweep failed: {}", e.what()));
    }
    schedule_idle_sweep();
  });
}

AddressUsage* Tracker::Impl::usage_of(const std::string& ip) {
  const auto it = per_address.find(ip);
  return it == per_address.end() ? nullptr : &it->second;
}

void Tracker::Impl::tidy_usage(const std::string& ip) {
  const auto it = per_address.find(ip);
  if (it != per_address.end() && it->second.unused()) per_address.erase(it);
}

void Tracker::Impl::charge_summary(const Connection& c, size_t old_bytes, size_t new_bytes,
                                   bool entitled, const std::string& what) {
  const std::string& ip = c.peer_ip;
  if (new_bytes <= old_bytes) {
    summary_bytes -= old_bytes - new_bytes;
    per_address[ip].summary_bytes -= old_bytes - new_bytes;
    tidy_usage(ip);
    return;
  }
  const size_t more = new_bytes - old_bytes;
  // Looked up each time: dropping empty queues may forget addresses.
  const auto address_bytes = [&] {
    const AddressUsage* u = usage_of(ip);
    return u != nullptr ? u->summary_bytes : size_t{0};
  };
  if (summary_bytes + more > kMaxSummaryBytes ||
      address_bytes() + more > kMaxSummaryBytesPerAddress) {
    drop_empty_queues();  // before refusing new keys and infos
  }
  if (address_bytes() + more > kMaxSummaryBytesPerAddress) {
    throw BadMessage(
        fmt::format("the queue keys and server infos of {} already take {} bytes of SUMMARY (one "
                    "address may take {})",
                    ip, address_bytes(), kMaxSummaryBytesPerAddress));
  }
  if (summary_bytes + more > kMaxSummaryBytes &&
      !reclaim_summary(c, summary_bytes + more - kMaxSummaryBytes, entitled, what)) {
    throw BadMessage(
        fmt::format("the tracker's queue keys and server infos already take {} bytes of SUMMARY, "
                    "and the infos of connections that neither serve nor wait cannot make room",
                    summary_bytes));
  }
  summary_bytes += more;
  per_address[ip].summary_bytes += more;
}

bool Tracker::Impl::reclaim_summary(const Connection& c, size_t needed, bool entitled,
                                    const std::string& what) {
  // Oldest first (by arrival): an info that has sat in SUMMARY the longest without serving
  // goes first, and a server that just sent UPDATE_INFO (it PUTs next) goes last. A requester
  // that is not entitled itself takes room only from older ones, so infos turn over in order
  // of arrival and a new one cannot push out one that came after it.
  std::vector<std::shared_ptr<Connection>> victims;
  size_t freed = 0;
  for (const auto& [id, other] : connections) {
    if (freed >= needed) break;
    if (!entitled && id >= c.id) break;
    if (id == c.id || other->info_bytes == 0 || other->entitled_to_summary()) continue;
    victims.push_back(other);
    freed += other->info_bytes;
  }
  if (freed < needed) return false;
  for (const auto& v : victims) {
    close(v, summary_reclaims,
          fmt::format("SUMMARY is full ({} of {} bytes): closing {}, whose info ({} bytes) lists "
                      "no server it serves and no request, to make room for {}",
                      summary_bytes, kMaxSummaryBytes, v->name, v->info_bytes, what));
  }
  return true;
}

template <typename Fits>
void Tracker::Impl::drop_orphans_until(Fits fits, const std::string* only_ip) {
  if (only_ip == nullptr) {
    while (!fits() && !orphans.empty()) {
      const std::shared_ptr<Value> orphan = orphans.front().lock();
      orphans.pop_front();
      if (orphan && !orphan->dead) {
        debug(fmt::format("the tracker is full: dropping {}, whose server left", orphan->matchkey));
        drop_free_value(orphan);
      }
    }
    return;
  }
  // Those of one address: left in the deque, dead (they expire and are pruned with the rest).
  for (const auto& weak : orphans) {
    if (fits()) return;
    const std::shared_ptr<Value> orphan = weak.lock();
    if (orphan && !orphan->dead && orphan->owner_ip == *only_ip) {
      debug(fmt::format("{} holds its share: dropping {}, whose server left", *only_ip,
                        orphan->matchkey));
      drop_free_value(orphan);
    }
  }
}

void Tracker::Impl::drop_free_value(const std::shared_ptr<Value>& v) {
  v->dead = true;
  if (Scheduler* s = find_scheduler(v->key)) {  // the queue it was PUT in
    auto it = std::find(s->values.begin(), s->values.end(), v);
    if (it != s->values.end()) {
      s->values.erase(it);
      --total_free_values;
      release(v);
    }
  }
}

void Tracker::Impl::release(const std::shared_ptr<Value>& v) {
  if (!v->held) return;
  v->held = false;
  held_bytes -= v->bytes;
  if (auto owner = v->owner.lock()) owner->held_bytes -= v->bytes;
  if (AddressUsage* u = usage_of(v->owner_ip)) {
    u->held_bytes -= v->bytes;
    --u->free_values;
  }
  tidy_usage(v->owner_ip);
}

void Tracker::Impl::charge(const std::shared_ptr<Connection>& c, size_t bytes, const char* what) {
  if (c->held_bytes + bytes > kMaxHeldBytesPerConnection) {
    throw BadMessage(fmt::format("this {} would make the connection hold more than {} bytes", what,
                                 kMaxHeldBytesPerConnection));
  }
  const auto address_bytes = [&] {
    const AddressUsage* u = usage_of(c->peer_ip);
    return u != nullptr ? u->held_bytes : size_t{0};
  };
  drop_orphans_until([&] { return address_bytes() + bytes <= address_held_limit(); }, &c->peer_ip);
  if (address_bytes() + bytes > address_held_limit()) {
    throw BadMessage(
        fmt::format("{} already holds {} bytes in the tracker (one address may hold {}); this {} "
                    "does not fit",
                    c->peer_ip, address_bytes(), address_held_limit(), what));
  }
  drop_orphans_until([&] { return held_bytes + bytes <= options.max_held_bytes; }, nullptr);
  if (held_bytes + bytes > options.max_held_bytes) {
    throw BadMessage(
        fmt::format("the tracker already holds {} bytes for its peers (the limit is "
                    "{}); this {} does not fit",
                    held_bytes, options.max_held_bytes, what));
  }
  held_bytes += bytes;
  c->held_bytes += bytes;
  per_address[c->peer_ip].held_bytes += bytes;
}

void Tracker::Impl::drop_empty_queues() {
  std::vector<std::string> kept;
  for (const std::string& k : key_order) {
    const auto it = schedulers.find(k);
    const Scheduler& s = *it->second;
    if (s.values.empty() && s.requests.empty()) {
      const size_t cost = k.size() + kQueueSummaryOverhead;
      summary_bytes -= cost;
      const std::string creator = s.creator_ip;
      if (AddressUsage* u = usage_of(creator)) u->summary_bytes -= cost;
      schedulers.erase(it);
      tidy_usage(creator);
    } else {
      kept.push_back(k);
    }
  }
  key_order = std::move(kept);
}

Scheduler* Tracker::Impl::find_scheduler(const std::string& key) {
  auto it = schedulers.find(key);
  return it == schedulers.end() ? nullptr : it->second.get();
}

Scheduler& Tracker::Impl::scheduler(const std::string& key, const Connection& c) {
  if (Scheduler* s = find_scheduler(key)) return *s;
  if (schedulers.size() >= kMaxKeys) {
    drop_empty_queues();  // before refusing new keys
    if (schedulers.size() >= kMaxKeys) {
      throw BadMessage(fmt::format("the tracker already has {} keys", schedulers.size()));
    }
  }
  charge_summary(c, 0, key.size() + kQueueSummaryOverhead, true,
                 fmt::format("the queue key '{}' of {}", excerpt(key), c.name));
  key_order.push_back(key);
  auto& s = schedulers[key] = std::make_unique<Scheduler>();
  s->creator_ip = c.peer_ip;
  return *s;
}

void Tracker::Impl::remove_request(const std::shared_ptr<Request>& r) {
  if (!r->active) return;
  r->active = false;
  held_bytes -= r->bytes;
  if (auto owner = r->conn.lock()) owner->held_bytes -= r->bytes;
  if (AddressUsage* u = usage_of(r->conn_ip)) u->held_bytes -= r->bytes;
  tidy_usage(r->conn_ip);
  if (r->timer) r->timer->cancel();
  if (Scheduler* s = find_scheduler(r->key)) s->requests.erase({-r->priority, r->seq});
  if (auto c = r->conn.lock()) c->requests.erase(r->seq);
}

void Tracker::Impl::schedule(const std::string& key) {
  Scheduler* s = find_scheduler(key);
  if (s == nullptr) return;
  while (!s->values.empty() && !s->requests.empty()) {
    std::shared_ptr<Value> v = s->values.front();
    s->values.pop_front();
    std::shared_ptr<Request> r = s->requests.begin()->second;
    remove_request(r);
    std::shared_ptr<Connection> c = r->conn.lock();
    const bool granted =
        c && c->open && reply(c, Json::array({0, Json::array({v->host, v->port, v->matchkey})}));
    if (granted) {
      --total_free_values;
      release(v);
      if (auto owner = v->owner.lock()) {
        auto& fv = owner->free_values;
        auto it = std::find(fv.begin(), fv.end(), v);
        if (it != fv.end()) fv.erase(it);
      }
      debug(fmt::format("granted {} ({}:{}) to {}", v->matchkey, tracker_wire::python_str(v->host),
                        tracker_wire::python_str(v->port), c->name));
    } else if (!v->dead) {
      s->values.push_back(v);  // the requester is gone: the value stays free
    } else {
      --total_free_values;
      release(v);
    }
  }
}

int64_t Tracker::Impl::servers_with_key(const std::string& key) const {
  int64_t n = 0;
  for (const auto& [id, c] : connections) {
    const auto it = c->info.find("key");
    if (it != c->info.end() && it->is_string() && it->get<std::string>() == "server:" + key) ++n;
  }
  return n;
}

void Tracker::Impl::expire(const std::shared_ptr<Request>& r) {
  if (!r->active) return;
  remove_request(r);
  std::shared_ptr<Connection> c = r->conn.lock();
  if (!c || !c->open) return;
  const int64_t servers = servers_with_key(r->key);
  const Scheduler* s = find_scheduler(r->key);
  const size_t free = s ? s->values.size() : 0;
  std::string message;
  if (servers == 0 && free == 0) {
    message = fmt::format(
        "no free server with key '{}' within {:g} s: no server is registered with this key "
        "(check the key; `kiln query` lists the tracker's servers and queues)",
        r->key, r->wait_s);
  } else {
    message = fmt::format(
        "no free server with key '{}' within {:g} s: {} server{} registered with this key, "
        "{} free, {} other request{} waiting",
        r->key, r->wait_s, servers, servers == 1 ? "" : "s", free, s ? s->requests.size() : 0,
        s && s->requests.size() == 1 ? "" : "s");
  }
  debug(fmt::format("request of {} for '{}' expired", c->name, r->key));
  reply(c, Json::array({-1, message}));
}

Json Tracker::Impl::summary() const {
  Json queue_info = Json::object();
  for (const std::string& k : key_order) {
    const Scheduler& s = *schedulers.at(k);
    queue_info[k] = Json{{"free", s.values.size()}, {"pending", s.requests.size()}};
  }
  Json server_info = Json::array();
  for (const auto& [id, c] : connections) {
    const auto it = c->info.find("key");
    if (it != c->info.end() && it->is_string() && it->get<std::string>().rfind("server", 0) == 0) {
      server_info.push_back(c->info);
    }
  }
  return Json{{"queue_info", std::move(queue_info)}, {"server_info", std::move(server_info)}};
}

void Tracker::Impl::on_put(const std::shared_ptr<Connection>& c, const Json& msg) {
  // [3, key, [port, matchkey], custom_addr_or_null]
  if (msg.size() < 3 || !msg[1].is_string() || !msg[2].is_array() || msg[2].size() != 2 ||
      !msg[2][1].is_string() || !(msg[2][0].is_number() || msg[2][0].is_string())) {
    throw BadMessage("PUT must be [3, key, [port, matchkey], custom_addr or null]");
  }
  if (msg.size() >= 4 && !msg[3].is_null() && !msg[3].is_string()) {
    throw BadMessage("PUT's custom_addr must be a string or null");
  }
  if (c->free_values.size() >= kMaxFreeValuesPerConnection) {
    throw BadMessage(
        fmt::format("more than {} free values from one connection", kMaxFreeValuesPerConnection));
  }
  check_name(msg[1], "key");
  check_name(msg[2][0], "port");
  check_name(msg[2][1], "match key");
  if (msg.size() >= 4) check_name(msg[3], "custom address");
  const auto address_free_values = [&] {
    const AddressUsage* u = usage_of(c->peer_ip);
    return u != nullptr ? u->free_values : size_t{0};
  };
  drop_orphans_until([&] { return address_free_values() < address_free_values_limit(); },
                     &c->peer_ip);
  if (address_free_values() >= address_free_values_limit()) {
    throw BadMessage(
        fmt::format("{} already has {} free values in the tracker (one address may "
                    "have {})",
                    c->peer_ip, address_free_values(), address_free_values_limit()));
  }
  drop_orphans_until([&] { return total_free_values < options.max_free_values; }, nullptr);
  if (total_free_values >= options.max_free_values) {
    throw BadMessage(fmt::format("the tracker already holds {} free values", total_free_values));
  }
  auto v = std::make_shared<Value>();
  v->owner = c;
  v->owner_ip = c->peer_ip;
  v->key = msg[1].get<std::string>();
  v->port = msg[2][0];
  v->matchkey = msg[2][1].get<std::string>();
  v->host = (msg.size() >= 4 && !msg[3].is_null()) ? msg[3] : Json(c->peer_ip);
  v->bytes = kEntryOverhead + v->key.size() + v->matchkey.size() + dumps(v->host).size() +
             dumps(v->port).size();
  Scheduler& s = scheduler(v->key, *c);
  charge(c, v->bytes, "PUT");
  v->held = true;
  ++per_address[c->peer_ip].free_values;
  c->sent_put = true;
  c->free_values.push_back(v);
  s.values.push_back(v);
  ++total_free_values;
  reply(c, 0);
  schedule(v->key);
}

void Tracker::Impl::on_request(const std::shared_ptr<Connection>& c, const Json& msg) {
  // [4, key, user, priority] and Kiln's optional fifth element: a wait bound in seconds.
  if (msg.size() < 4 || !msg[1].is_string() || !msg[3].is_number()) {
    throw BadMessage("REQUEST must be [4, key, user, priority]");
  }
  std::optional<double> wait;
  if (msg.size() >= 5 && !msg[4].is_null()) {
    if (!msg[4].is_number() || !(msg[4].get<double>() >= 0)) {
      throw BadMessage("REQUEST's wait bound must be a number of seconds >= 0");
    }
    wait = std::min(msg[4].get<double>(), kMaxWaitSeconds);
  }
  if (c->requests.size() >= kMaxRequestsPerConnection) {
    throw BadMessage(fmt::format("more than {} waiting requests from one connection",
                                 kMaxRequestsPerConnection));
  }
  check_name(msg[1], "key");
  check_name(msg[2], "user");
  auto r = std::make_shared<Request>();
  r->seq = next_request_seq++;
  r->priority = msg[3].get<double>();
  r->key = msg[1].get<std::string>();
  r->conn = c;
  r->conn_ip = c->peer_ip;
  Scheduler& s = scheduler(r->key, *c);
  r->bytes = kEntryOverhead + r->key.size();
  charge(c, r->bytes, "REQUEST");
  s.requests.emplace(RequestOrder{-r->priority, r->seq}, r);
  c->requests.emplace(r->seq, r);
  if (wait) {
    r->wait_s = *wait;
    r->timer = std::make_unique<asio::steady_timer>(io);
    r->timer->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(*wait)));
    std::weak_ptr<Request> weak = r;
    r->timer->async_wait([this, weak](const boost::system::error_code& ec) {
      if (ec) return;
      if (auto req = weak.lock()) {
        std::shared_ptr<Connection> owner = req->conn.lock();
        if (!owner) return;
        guarded(owner, [&] { expire(req); });
      }
    });
  }
  schedule(r->key);
}

void Tracker::Impl::on_update_info(const std::shared_ptr<Connection>& c, const Json& msg) {
  // [5, {"key": "server:<k>", "addr": [host_or_null, port]}]
  if (msg.size() < 2 || !msg[1].is_object() || !msg[1].contains("addr") ||
      !msg[1]["addr"].is_array() || msg[1]["addr"].empty()) {
    throw BadMessage("UPDATE_INFO must be [5, {\"key\": ..., \"addr\": [host or null, port]}]");
  }
  if (msg[1].contains("key") && !msg[1]["key"].is_string()) {
    throw BadMessage("UPDATE_INFO's key must be a string");
  }
  if (msg[1].contains("key")) check_name(msg[1]["key"], "info key");
  for (const auto& part : msg[1]["addr"]) check_name(part, "address");
  Json update = msg[1];
  if (update["addr"][0].is_null()) update["addr"][0] = c->peer_ip;
  Json merged = c->info;
  for (const auto& [k, v] : update.items()) merged[k] = v;
  const size_t info_bytes = dumps(merged).size();
  if (info_bytes > kMaxInfoBytes) {
    throw BadMessage(fmt::format("the info of one connection exceeds {} bytes", kMaxInfoBytes));
  }
  charge_summary(*c, c->info_bytes, info_bytes, c->entitled_to_summary(),
                 fmt::format("the info of {}", c->name));
  c->info_bytes = info_bytes;
  c->info = std::move(merged);
  reply(c, 0);
}

void Tracker::Impl::handle(const std::shared_ptr<Connection>& c, const std::string& text) {
  // The parser recurses per level: text nested deeper than the bound never reaches it (and
  // nothing nested deeper is stored, so replays of stored values stay shallow too).
  if (tracker_wire::json_depth(text, tracker_wire::kMaxJsonDepth) > tracker_wire::kMaxJsonDepth) {
    close(c, LogLevel::kWarn,
          fmt::format("a message from {} is nested deeper than {} levels: '{}'; closing it",
                      c->name, tracker_wire::kMaxJsonDepth, excerpt(text)));
    return;
  }
  if (!c->greeted) {
    c->greeted = true;
    c->handshake_timer->cancel();
  }
  touch(*c);
  Json msg = Json::parse(text, nullptr, false);
  if (msg.is_discarded()) {
    close(c, LogLevel::kWarn,
          fmt::format("malformed JSON from {}: '{}'; closing it", c->name, excerpt(text)));
    return;
  }
  if (!msg.is_array() || msg.empty() || !is_integral(msg[0])) {
    close(c, LogLevel::kWarn,
          fmt::format("a message from {} is not [code, ...]: '{}'; closing it", c->name,
                      excerpt(text)));
    return;
  }
  const int64_t code = msg[0].is_number_integer() ? msg[0].get<int64_t>()
                                                  : static_cast<int64_t>(msg[0].get<double>());
  try {
    switch (code) {
      case static_cast<int64_t>(TrackerCode::kPing):
        reply(c, 0);
        return;
      case static_cast<int64_t>(TrackerCode::kStop): {
        if (msg.size() < 2) throw BadMessage("STOP must be [2, stop_key]");
        if (!(msg[1].is_string() && msg[1].get<std::string>() == stop_key)) {
          warn(fmt::format("STOP with a wrong key from {}", c->name));
          reply(c, static_cast<int>(TrackerCode::kFail));
          return;
        }
        info(fmt::format("STOP from {}", c->name));
        reply(c, 0);
        if (c->open && c->writing) {
          c->stop_after_flush = true;
        } else {
          post_stop();
        }
        return;
      }
      case static_cast<int64_t>(TrackerCode::kPut):
        on_put(c, msg);
        return;
      case static_cast<int64_t>(TrackerCode::kRequest):
        on_request(c, msg);
        return;
      case static_cast<int64_t>(TrackerCode::kUpdateInfo):
        on_update_info(c, msg);
        return;
      case static_cast<int64_t>(TrackerCode::kSummary):
        reply(c, Json::array({0, summary()}));
        return;
      case static_cast<int64_t>(TrackerCode::kGetPendingMatchkeys): {
        Json keys = Json::array();
        std::set<std::string> seen;
        for (const auto& v : c->free_values) {
          if (seen.insert(v->matchkey).second) keys.push_back(v->matchkey);
        }
        reply(c, keys);
        return;
      }
      default:
        close(c, LogLevel::kWarn,
              fmt::format("Unknown tracker code {} from {}; closing it", code, c->name));
        return;
    }
  } catch (const BadMessage& e) {
    close(c, LogLevel::kWarn,
          fmt::format("bad message from {}: {} (got '{}'); closing it", c->name, e.what(),
                      excerpt(text)));
  }
}

void Tracker::Impl::do_stop() {
  if (stopping) return;
  stopping = true;
  info(fmt::format("tracker on {}:{} stopping", options.host, port));
  boost::system::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  idle_sweep.cancel();
  for (auto& [id, c] : connections) {
    c->open = false;
    if (c->handshake_timer) c->handshake_timer->cancel();
    c->transport().shutdown(tcp::socket::shutdown_both, ec);
    c->transport().close(ec);
    for (auto& [seq, r] : c->requests) {
      if (r->timer) r->timer->cancel();
    }
  }
  connections.clear();
  by_activity.clear();
  per_address.clear();
  schedulers.clear();
  key_order.clear();
  io.stop();
}

Tracker::Tracker(TrackerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->stop_key = impl_->options.stop_key.empty() ? random_hex(16) : impl_->options.stop_key;
  if (!impl_->options.token.empty()) {
    tls::check_token_strength(impl_->options.token, "the tracker token");
    impl_->tls_keys = std::make_unique<tls::Context>(tls::Context::Side::kServer,
                                                     tls::Purpose::kTracker, impl_->options.token);
    // Asio's context takes ownership of the SSL_CTX it wraps: it gets a reference of its own.
    SSL_CTX_up_ref(impl_->tls_keys->native());
    impl_->tls_context = std::make_unique<asio::ssl::context>(impl_->tls_keys->native());
  }
  impl_->bind();
  impl_->do_accept();
  impl_->schedule_idle_sweep();
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

Tracker::~Tracker() {
  stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int Tracker::port() const { return impl_->port; }
const std::string& Tracker::host() const { return impl_->options.host; }
const std::string& Tracker::stop_key() const { return impl_->stop_key; }

void Tracker::stop() { impl_->post_stop(); }

bool Tracker::wait(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!timeout) {
    impl_->cv.wait(lock, [&] { return impl_->stopped; });
    return true;
  }
  return impl_->cv.wait_for(lock, *timeout, [&] { return impl_->stopped; });
}

}  // namespace kiln::rpc
