// SPDX-License-Identifier: Apache-2.0
// The RPC server (what `kiln rpc-server` runs): accepts sessions from Kiln clients, serves
// each on its own thread in its own work directory, ends a session at its timeout, and keeps
// itself registered with a tracker when one is given. See docs/rpc.md.
#ifndef KILN_RPC_SERVER_H_
#define KILN_RPC_SERVER_H_

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {
class Runtime;
}

namespace kiln::rpc {

namespace detail {
// Hooks for Kiln's own tests and local_session(), outside the stable API: they may change or
// go without notice. They add Kiln's own functions to what sessions serve; the functions the
// application registered are served whatever they say, under any name.
struct ServerTestHooks {
  // Offer Kiln's diagnostic functions, testing.echo and rpc.test.* (rpc.test.sleep can hold a
  // session for as long as it is asked to). `kiln rpc-server --enable-test-functions` sets it.
  bool test_functions = false;
  // Offer testing.echo alone (it returns its first argument), as TVM's LocalSession does;
  // local_session() sets it.
  bool echo_function = false;
};
}  // namespace detail

// Where a session runs (docs/rpc.md, "Sessions are processes").
enum class SessionIsolation {
  // Each session in a worker process of its own (kiln-rpc-session): a crash, a hang or a
  // backdoor in uploaded code ends with the session; the session cannot read the server's
  // token, memory or other sessions' files (see docs/rpc.md for exactly what it can reach).
  // Functions registered in the server's process are not seen by sessions.
  kProcess,
  // Each session on a thread of the server's process, sharing it: sessions see functions the
  // application registered, and a crash in one ends the server and every session.
  kThread,
};

struct ServerOptions {
  // Address or name; loopback unless asked otherwise. A non-loopback address needs a token
  // or allow_insecure (whoever can connect without a token can run code on this machine).
  std::string host = "127.0.0.1";
  int port = 9090;                         // 0: an ephemeral port
  int port_end = 9199;                     // binds the first free port in [port, port_end)
  std::string key;                         // the key clients (and the tracker) know this server by
  std::optional<std::string> tracker;      // "host:port": register there
  std::string tracker_token;               // the tracker's token, when it requires one
  std::optional<std::string> custom_addr;  // the address the tracker hands out
  // Where session directories go (one per session: unique, 0700, removed when it ends).
  // Default: a fresh private directory (mkdtemp, 0700) in the system's temporary directory,
  // removed when the server stops; those that crashed servers of the same user left behind
  // are removed at start. A given work_dir itself is never removed.
  std::filesystem::path work_dir;
  // The longest a session may last; 0 = as long as the client asks (its session_timeout,
  // 0 = unlimited). The shorter of the two applies.
  double session_timeout_s = 0;
  int max_sessions = 1;  // sessions served at once; more are refused with "busy"
  // When set (16 characters or more; `kiln rpc-token` makes one), sessions are TLS 1.3 keyed by
  // it: clients and server prove they hold it, and every byte is encrypted and authenticated.
  std::string token;
  // The most memory one session may hold through its handles (bytes), whoever allocated it:
  // Alloc and tensors that functions return, each storage counted once; 0 = no limit beyond
  // the device's own.
  uint64_t max_session_memory = 0;
  // Seconds a client has for the whole handshake (a deadline, not a per-read timeout).
  double handshake_timeout_s = 10;
  // Seconds a session's client may stay silent while the server waits for its next request
  // (or the rest of one); 0 = unlimited.
  double idle_timeout_s = 600;
  // Seconds the server waits for a client to take reply data; 0 = unlimited. A client that
  // never reads cannot hold a slot for longer.
  double write_timeout_s = 60;
  // Handles one session may hold at once; 0 = unlimited.
  uint64_t max_handles = 65536;
  // Bytes one session may upload over its life; 0 = unlimited.
  uint64_t max_upload_bytes = 4ull << 30;
  // Test hooks: not a stable API (see detail::ServerTestHooks).
  detail::ServerTestHooks test_hooks;
  // Listen on a non-loopback address without a token (logged as a warning).
  bool allow_insecure = false;
  // Seconds stop() waits for running calls to return after telling them to end (a session
  // worker still running then is killed).
  double stop_grace_s = 5;
  SessionIsolation isolation = SessionIsolation::kProcess;
  // The kiln-rpc-session executable; empty: $KILN_RPC_SESSION_WORKER, else the one installed
  // beside libkiln.
  std::filesystem::path session_worker;
  // Session processes kept started ahead (process isolation): each has confined itself and
  // started its runtime before a client comes, serves exactly one session, and is replaced as
  // soon as it is taken (or when it died while waiting). 0: each is started when its session
  // begins (~10 ms more per session start), the default for now: the pool's processes are
  // children of the server and their directories lie in work_dir from the start. At most 64.
  int prestarted_sessions = 0;
  // Files a session must not read (the token files): hidden from session workers wherever they
  // can make a mount namespace of their own.
  std::vector<std::filesystem::path> secret_files;
};

class Server {
 public:
  // Binds and starts serving on background threads. Throws ValueError for bad options and
  // RuntimeError("cannot resolve host '<host>': ..." or "cannot bind to any port in [p, e)
  // on <host>: ..."). Sessions load modules and allocate through `runtime`, which must
  // outlive the server.
  Server(ServerOptions options, Runtime& runtime);
  // API-edge default: Server(options, Runtime::global()).
  explicit Server(ServerOptions options);
  // Stops: closes the listener, ends every session and removes its files.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  const std::filesystem::path& work_dir() const;
  // Sessions running now.
  int active_sessions() const;
  // Whether the tracker registration is up (false without a tracker).
  bool registered() const;
  // Stops serving (idempotent): closes every connection, tells running calls to end
  // (call_cancelled()), waits up to stop_grace_s for them and removes the work directory.
  // Returns false when a call did not return in time: its thread is left running detached
  // (and the server's state is then kept alive for it, leaked, by the destructor), so the
  // caller should end the process soon.
  bool stop();
  // Blocks until stop() or `timeout`; returns whether stopped.
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::rpc

#endif  // KILN_RPC_SERVER_H_
