// SPDX-License-Identifier: Apache-2.0
// The RPC tracker (SPEC.md §4.5): a registry of RPC servers per key with per-key priority
// queues, wire-compatible with TVM's tracker, plus its two clients: TrackerSession (what a
// user or `kiln query` holds) and TrackerRegistration (what an RPC server holds).
// See docs/tracker.md.
#ifndef KILN_RPC_TRACKER_H_
#define KILN_RPC_TRACKER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln {
class Runtime;
}  // namespace kiln

namespace kiln::rpc {

class RPCSession;

// Tracker protocol constants (little-endian int32 on the wire).
inline constexpr int32_t kTrackerMagic = 0x2F271;
// The largest JSON message either side accepts (TVM's MAX_TRACKER_MSG_BYTES).
inline constexpr int32_t kMaxTrackerMessageBytes = 1 << 20;

// Match keys (SPEC §4.5): a server offers itself to the tracker as "<key>:<random>" and a
// client granted it connects with "client:<that>"; the key is the text before the last ':',
// so keys that contain ':' ("127.0.0.1:5555") work.
//
// random_key: "<prefix>:<random>" that is none of `used` (TVM's random_key(prefix, cmap)).
std::string random_key(const std::string& prefix, const std::set<std::string>& used = {});
// split_random_key: {key, random}, split at the last ':'; {key, ""} when there is none.
std::pair<std::string, std::string> split_random_key(const std::string& matchkey);

// The command codes of the tracker protocol.
enum class TrackerCode : int32_t {
  kFail = -1,
  kSuccess = 0,
  kPing = 1,
  kStop = 2,
  kPut = 3,
  kRequest = 4,
  kUpdateInfo = 5,
  kSummary = 6,
  kGetPendingMatchkeys = 7,
};

// Where a tracker listens.
struct TrackerOptions {
  std::string host = "127.0.0.1";
  int port = 9190;
  int port_end =
      9199;  // binds the first free port in [port, port_end); port_end <= port: only port
  // The key that STOP must carry; empty: a random one (see Tracker::stop_key()).
  std::string stop_key;
  // Free servers held in all. At the bound, free servers that outlived their connection (PUT
  // without UPDATE_INFO) are dropped oldest first; a PUT that still finds no room closes its
  // connection.
  size_t max_free_values = 65536;
  // Connections open at once. When full (or out of file descriptors), the connection idle the
  // longest is closed to make room: under a token first one that has not completed TLS, then
  // one that is neither a server (sent PUT) nor waiting for one, then a server that holds no
  // free value; never one that holds free values or waiting requests. When every connection
  // holds some, the new connection is refused.
  size_t max_connections = 4096;
  // Connections open at once from one peer address (`kiln tracker --max-connections-per-
  // address`); more are refused, so one host cannot take every slot.
  size_t max_connections_per_address = 256;
  // How long a connection has to send the magic and its first complete message, the TLS
  // handshake included under a token (--handshake-timeout); it is closed when the deadline
  // passes.
  std::chrono::milliseconds handshake_timeout{10000};
  // A connection that sends no complete message for this long is closed, unless it is a
  // server (it sent PUT) or has a request waiting (--idle-timeout); 0: no idle deadline.
  // Clients that keep a connection open between uses (TrackerSession) connect again.
  std::chrono::milliseconds idle_timeout{30000};
  // Bytes of free values and waiting requests held for all peers (--max-held-bytes); a PUT or
  // REQUEST beyond it drops free values whose server left, then closes its connection.
  // One connection may hold at most 1 MiB of them, one peer address an eighth of them (and
  // of max_free_values), but never less than one connection may.
  size_t max_held_bytes = 64u << 20;
  // The tracker token (16 characters or more; `kiln rpc-token` makes one); empty: none, and
  // the tracker speaks TVM's protocol in the clear. When set, a connection must complete a
  // TLS 1.3 handshake keyed by it (each side proves it holds the token) before the magic,
  // and everything after is encrypted; others are refused before they can send a message.
  // TVM's clients and servers cannot connect then. Throws ValueError when it is too short.
  std::string token;
};

// A tracker serving on its own thread. Thread-safe.
class Tracker {
 public:
  // Binds and starts serving. Throws RuntimeError("cannot bind to any port in [p, e)") when no
  // port is free, naming the host.
  explicit Tracker(TrackerOptions options = {});
  // Stops serving and closes every connection.
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  int port() const;
  const std::string& host() const;
  const std::string& stop_key() const;
  // Stops serving (idempotent). Also happens on a STOP command carrying stop_key().
  void stop();
  // Blocks until the tracker has stopped (stop() or STOP), or until `timeout` passes; returns
  // whether it stopped.
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One queue of SUMMARY's queue_info.
struct TrackerQueue {
  std::string key;
  int64_t free = 0;
  int64_t pending = 0;
};

// One entry of SUMMARY's server_info.
struct TrackerServerInfo {
  std::string key;   // "server:<rpc key>"
  std::string host;  // from "addr"[0]
  int port = 0;      // from "addr"[1] (an int, or TVM's C++ server's string)
  std::string json;  // the whole info object, as the tracker sent it
};

// What SUMMARY answers.
struct TrackerSummary {
  std::vector<TrackerQueue> queues;        // sorted by key
  std::vector<TrackerServerInfo> servers;  // in the tracker's order
  std::string json;                        // the reply's second element, verbatim
};

// What a granted REQUEST names: where to connect and with which match key.
struct ServerAddress {
  std::string host;
  int port = 0;
  std::string matchkey;
};

// A client connection to a tracker (TVM's TrackerSession). Not thread-safe.
class TrackerSession {
 public:
  // Connects and exchanges the magic. Retries a refused connection every 0.5 s until
  // `connect_timeout` has passed, then throws RuntimeError naming host:port and the last
  // error; a peer that answers another magic: RuntimeError("<host>:<port> is not an RPC
  // tracker"). With `tracker_token` the connection is TLS keyed by it (TrackerOptions::token);
  // a tracker that requires a token when none is given, or that refuses this one, is a
  // RuntimeError saying so. A connection the tracker closed while it sat idle is opened
  // again by the next call.
  static TrackerSession connect(
      const std::string& host, int port,
      std::chrono::milliseconds connect_timeout = std::chrono::seconds(10),
      const std::string& tracker_token = "");
  TrackerSession(TrackerSession&&) noexcept;
  TrackerSession& operator=(TrackerSession&&) noexcept;
  ~TrackerSession();

  // SUMMARY. A reply other than [0, {...}]: RuntimeError("Invalid return value ...").
  TrackerSummary summary();
  // The reference's text_summary() layout exactly (SPEC.md §4.5).
  std::string text_summary();
  // REQUEST: waits until the tracker grants a server for `key`. With `wait` set, the request
  // carries it as a bound (Kiln's extension, ignored by TVM's tracker) and the call throws
  // NotFoundError("no free server with key '<key>' within <t> s ...") when it passes; the
  // socket also times out at wait + 5 s. Without it the wait is unbounded, as in TVM.
  ServerAddress request_server(const std::string& key, int priority = 1,
                               std::optional<std::chrono::milliseconds> wait = std::nullopt);
  // request_server + rpc::connect with the granted match key, up to `max_retry` attempts
  // (RuntimeError("Cannot request <key> after <n> retry, last_error:<e>")); the session's
  // remote devices are served through `runtime`. `session_timeout_s` 0 means unlimited.
  // Implemented beside RPCConfig (rpc_config.cc).
  RPCSession request(Runtime& runtime, const std::string& key, int priority = 1,
                     double session_timeout_s = 0, int max_retry = 5,
                     std::optional<std::chrono::milliseconds> wait = std::nullopt,
                     const std::string& token = "");
  // API-edge default: the same with Runtime::global().
  RPCSession request(const std::string& key, int priority = 1, double session_timeout_s = 0,
                     int max_retry = 5,
                     std::optional<std::chrono::milliseconds> wait = std::nullopt,
                     const std::string& token = "");
  // PING; true when the tracker answered 0.
  bool ping();
  // STOP with `stop_key`; true when the tracker accepted it.
  bool stop(const std::string& stop_key);

  const std::string& host() const;
  int port() const;

  struct Impl;

 private:
  explicit TrackerSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Shorthand for TrackerSession::connect.
inline TrackerSession connect_tracker(
    const std::string& host, int port,
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(10),
    const std::string& tracker_token = "") {
  return TrackerSession::connect(host, port, connect_timeout, tracker_token);
}

// What an RPC server registers with a tracker.
struct RegistrationOptions {
  std::string tracker_host;
  int tracker_port = 9190;
  std::string key;                                  // the server's rpc key
  std::optional<std::string> custom_addr;           // host the tracker hands out (default: peer IP)
  int server_port = 0;                              // the port the server listens on
  std::chrono::milliseconds ping_period{2000};      // idle GET_PENDING_MATCHKEYS period
  std::chrono::milliseconds unmatch_timeout{4000};  // + ping_period: a taken key is stale
  std::chrono::milliseconds reconnect_period{1000};  // after losing the tracker
  std::chrono::milliseconds io_timeout{5000};        // per exchange with the tracker
  // The tracker token, when the tracker requires one (TrackerOptions::token); empty: none.
  std::string tracker_token;
};

// An RPC server's registration with a tracker: keeps one free resource (one match key
// "<key>:<random>") registered per free session slot, notices keys that a client took but
// never used, and registers again after the tracker restarts. Thread-safe; never throws from
// maintain() (tracker trouble is logged and retried).
class TrackerRegistration {
 public:
  // Derives the tracker token's TLS key once, when there is one (ValueError when it is too
  // short); connects later, in maintain().
  explicit TrackerRegistration(RegistrationOptions options);
  ~TrackerRegistration();
  TrackerRegistration(const TrackerRegistration&) = delete;
  TrackerRegistration& operator=(const TrackerRegistration&) = delete;

  // Brings the tracker's view in line with `free_slots`: connects (magic, UPDATE_INFO) when
  // not connected and the reconnect period has passed, PUTs fresh match keys until this
  // server has `free_slots` outstanding, and every ping period asks GET_PENDING_MATCHKEYS,
  // replacing keys absent for longer than unmatch_timeout + ping_period. Call it often (the
  // server calls it every 100 ms and whenever a session starts or ends); it only talks to
  // the tracker when something is due.
  void maintain(int free_slots);
  // True when `matchkey` is an outstanding key of this server; it is then consumed (the
  // session that presents it takes the slot).
  bool claim(const std::string& matchkey);
  // Whether the tracker connection is up.
  bool connected() const;
  // The match keys registered and not yet claimed.
  std::vector<std::string> outstanding() const;
  // How many match keys it remembers so as never to offer one twice: the outstanding ones and
  // the most recently retired (kRememberedRetiredKeys), so that a long-running server's
  // memory stays flat.
  size_t remembered_keys() const;
  static constexpr size_t kRememberedRetiredKeys = 1024;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::rpc

#endif  // KILN_RPC_TRACKER_H_
