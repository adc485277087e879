// The tracker (SPEC.md §4.5, docs/tracker.md): one io_context on its own thread serves every
// connection with asynchronous reads; all tracker state lives on that thread.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cmath>
#include <condition_variable>
#include <deque>
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
#include "rpc/tracker_wire.h"

namespace kiln::rpc {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
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
  std::string key;  // the key it was PUT under
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
};

struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
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
  std::unique_ptr<asio::steady_timer> handshake_timer;

  bool is_server() const { return info.contains("key"); }
};

}  // namespace

struct Tracker::Impl {
  // Declared first so that it is destroyed last: everything below may hold its objects.
  asio::io_context io;
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
  std::vector<std::string> key_order;                           // schedulers, by creation
  std::unordered_map<std::string, std::unique_ptr<Scheduler>> schedulers;
  uint64_t next_connection_id = 0;
  uint64_t next_request_seq = 0;
  size_t total_free_values = 0;
  size_t held_bytes = 0;     // Value::bytes and Request::bytes of everything held
  size_t summary_bytes = 0;  // queue keys and infos: what SUMMARY will list
  std::unordered_map<std::string, size_t> per_address;  // open connections by peer IP
  // Free values whose connection left without sending UPDATE_INFO (they stay, as in TVM),
  // oldest first: the first to go when the tracker is full.
  std::deque<std::weak_ptr<Value>> orphans;

  void bind();
  void run();
  void do_accept();
  void do_stop();
  // do_stop() once the current handler has returned (it clears what handlers may hold).
  void post_stop() {
    asio::post(io, [this] { do_stop(); });
  }
  void start(tcp::socket socket);
  void read_magic(const std::shared_ptr<Connection>& c);
  void read_header(const std::shared_ptr<Connection>& c);
  void read_body(const std::shared_ptr<Connection>& c);
  void handle(const std::shared_ptr<Connection>& c, const std::string& text);
  bool send(const std::shared_ptr<Connection>& c, const std::string& bytes);
  bool reply(const std::shared_ptr<Connection>& c, const Json& value) {
    return send(c, frame(dumps(value)));
  }
  void write_more(const std::shared_ptr<Connection>& c);
  void close(const std::shared_ptr<Connection>& c, LogLevel level, const std::string& why);
  Scheduler& scheduler(const std::string& key);
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
    if (ec) {
      // E.g. out of file descriptors: try again shortly instead of spinning.
      warn(fmt::format("accept failed: {}", ec.message()));
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
  const auto open_here = per_address.find(ip);
  if (open_here != per_address.end() && open_here->second >= options.max_connections_per_address) {
    warn(fmt::format("refusing {}: {} connections from {} are open (the per-address limit)", name,
                     open_here->second, ip));
    socket.close(ec);
    return;
  }
  if (connections.size() >= options.max_connections) {
    // Make room by closing the oldest connection that has not said anything yet: a client
    // that talks at once gets in even when idle peers have filled the tracker.
    std::shared_ptr<Connection> idle;
    for (const auto& [id, other] : connections) {
      if (!other->greeted) {
        idle = other;
        break;
      }
    }
    if (!idle) {
      warn(fmt::format("refusing {}: {} connections are open", name, connections.size()));
      socket.close(ec);
      return;
    }
    close(idle, LogLevel::kWarn,
          fmt::format("{} connections are open: closing {}, which has not completed its "
                      "handshake, to make room for {}",
                      connections.size(), idle->name, name));
  }
  auto c = std::make_shared<Connection>(std::move(socket));
  c->id = next_connection_id++;
  c->peer_ip = ip;
  c->name = name;
  c->socket.non_blocking(true, ec);
  c->socket.set_option(tcp::no_delay(true), ec);
  connections[c->id] = c;
  ++per_address[ip];
  c->handshake_timer = std::make_unique<asio::steady_timer>(io);
  c->handshake_timer->expires_after(options.handshake_timeout);
  std::weak_ptr<Connection> weak = c;
  c->handshake_timer->async_wait([this, weak](const boost::system::error_code& e) {
    if (e || stopping) return;
    const auto conn = weak.lock();
    if (!conn || !conn->open || conn->greeted) return;
    close(conn, LogLevel::kWarn,
          fmt::format("{} sent no magic and first message within the handshake deadline of {} "
                      "ms; closing it",
                      conn->name, options.handshake_timeout.count()));
  });
  debug(fmt::format("connection from {}", c->name));
  read_magic(c);
}

void Tracker::Impl::read_magic(const std::shared_ptr<Connection>& c) {
  asio::async_read(
      c->socket, asio::buffer(c->header), [this, c](const boost::system::error_code& ec, size_t) {
        if (!c->open) return;
        if (ec) {
          close(c, LogLevel::kDebug, fmt::format("{} closed before the handshake", c->name));
          return;
        }
        guarded(c, [&] {
          if (tracker_wire::decode_int32(c->header) != kTrackerMagic) {
            close(c, LogLevel::kWarn, fmt::format("Invalid magic from {}", c->name));
            return;
          }
          if (send(c, tracker_wire::encode_int32(kTrackerMagic))) read_header(c);
        });
      });
}

void Tracker::Impl::read_header(const std::shared_ptr<Connection>& c) {
  asio::async_read(
      c->socket, asio::buffer(c->header), [this, c](const boost::system::error_code& ec, size_t) {
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
  c->socket.async_read_some(asio::buffer(c->body.data() + have, chunk),
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
  if (!c->writing) {
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
  asio::async_write(c->socket, asio::buffer(c->out.front()),
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
  c->open = false;
  log(level, "tracker", why);
  boost::system::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
  c->socket.close(ec);
  if (c->handshake_timer) c->handshake_timer->cancel();
  if (connections.erase(c->id) > 0) {
    auto it = per_address.find(c->peer_ip);
    if (it != per_address.end() && --it->second == 0) per_address.erase(it);
  }
  summary_bytes -= c->info_bytes;
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
  if (c->stop_after_flush) post_stop();
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
}

void Tracker::Impl::charge(const std::shared_ptr<Connection>& c, size_t bytes, const char* what) {
  if (c->held_bytes + bytes > kMaxHeldBytesPerConnection) {
    throw BadMessage(fmt::format("this {} would make the connection hold more than {} bytes", what,
                                 kMaxHeldBytesPerConnection));
  }
  while (held_bytes + bytes > options.max_held_bytes && !orphans.empty()) {
    const std::shared_ptr<Value> orphan = orphans.front().lock();
    orphans.pop_front();
    if (orphan && !orphan->dead) {
      debug(fmt::format("the tracker is full: dropping {}, whose server left", orphan->matchkey));
      drop_free_value(orphan);
    }
  }
  if (held_bytes + bytes > options.max_held_bytes) {
    throw BadMessage(
        fmt::format("the tracker already holds {} bytes for its peers (the limit is "
                    "{}); this {} does not fit",
                    held_bytes, options.max_held_bytes, what));
  }
  held_bytes += bytes;
  c->held_bytes += bytes;
}

void Tracker::Impl::drop_empty_queues() {
  std::vector<std::string> kept;
  for (const std::string& k : key_order) {
    const Scheduler& s = *schedulers.at(k);
    if (s.values.empty() && s.requests.empty()) {
      schedulers.erase(k);
      summary_bytes -= k.size() + kQueueSummaryOverhead;
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

Scheduler& Tracker::Impl::scheduler(const std::string& key) {
  if (Scheduler* s = find_scheduler(key)) return *s;
  const size_t cost = key.size() + kQueueSummaryOverhead;
  if (schedulers.size() >= kMaxKeys || summary_bytes + cost > kMaxSummaryBytes) {
    drop_empty_queues();  // before refusing new keys
    if (schedulers.size() >= kMaxKeys) {
      throw BadMessage(fmt::format("the tracker already has {} keys", schedulers.size()));
    }
    if (summary_bytes + cost > kMaxSummaryBytes) {
      throw BadMessage(
          fmt::format("the tracker's queue keys and server infos already take {} bytes of SUMMARY",
                      summary_bytes));
    }
  }
  summary_bytes += cost;
  key_order.push_back(key);
  return *(schedulers[key] = std::make_unique<Scheduler>());
}

void Tracker::Impl::remove_request(const std::shared_ptr<Request>& r) {
  if (!r->active) return;
  r->active = false;
  held_bytes -= r->bytes;
  if (auto owner = r->conn.lock()) owner->held_bytes -= r->bytes;
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
  while (total_free_values >= options.max_free_values && !orphans.empty()) {
    const std::shared_ptr<Value> orphan = orphans.front().lock();
    orphans.pop_front();
    if (orphan && !orphan->dead) {
      debug(fmt::format("the tracker is full: dropping {}, whose server left", orphan->matchkey));
      drop_free_value(orphan);
    }
  }
  if (total_free_values >= options.max_free_values) {
    throw BadMessage(fmt::format("the tracker already holds {} free values", total_free_values));
  }
  auto v = std::make_shared<Value>();
  v->owner = c;
  v->key = msg[1].get<std::string>();
  v->port = msg[2][0];
  v->matchkey = msg[2][1].get<std::string>();
  v->host = (msg.size() >= 4 && !msg[3].is_null()) ? msg[3] : Json(c->peer_ip);
  v->bytes = kEntryOverhead + v->key.size() + v->matchkey.size() + dumps(v->host).size() +
             dumps(v->port).size();
  Scheduler& s = scheduler(v->key);
  charge(c, v->bytes, "PUT");
  v->held = true;
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
  Scheduler& s = scheduler(r->key);
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
  if (summary_bytes - c->info_bytes + info_bytes > kMaxSummaryBytes) {
    drop_empty_queues();
    if (summary_bytes - c->info_bytes + info_bytes > kMaxSummaryBytes) {
      throw BadMessage(
          fmt::format("the tracker's queue keys and server infos already take {} bytes of SUMMARY",
                      summary_bytes));
    }
  }
  summary_bytes = summary_bytes - c->info_bytes + info_bytes;
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
  for (auto& [id, c] : connections) {
    c->open = false;
    if (c->handshake_timer) c->handshake_timer->cancel();
    c->socket.shutdown(tcp::socket::shutdown_both, ec);
    c->socket.close(ec);
    for (auto& [seq, r] : c->requests) {
      if (r->timer) r->timer->cancel();
    }
  }
  connections.clear();
  per_address.clear();
  schedulers.clear();
  key_order.clear();
  io.stop();
}

Tracker::Tracker(TrackerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->stop_key = impl_->options.stop_key.empty() ? random_hex(16) : impl_->options.stop_key;
  impl_->bind();
  impl_->do_accept();
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
