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

namespace kiln {
class Runtime;
}

namespace kiln::rpc {

struct ServerOptions {
  std::string host = "127.0.0.1";          // address or name; loopback unless asked otherwise
  int port = 9090;                         // 0: an ephemeral port
  int port_end = 9199;                     // binds the first free port in [port, port_end)
  std::string key;                         // the key clients (and the tracker) know this server by
  std::optional<std::string> tracker;      // "host:port": register there
  std::optional<std::string> custom_addr;  // the address the tracker hands out
  // Where session directories go (one per session, removed when it ends). Default: a fresh
  // directory in the system's temporary directory, removed when the server stops.
  std::filesystem::path work_dir;
  // The longest a session may last; 0 = as long as the client asks (its session_timeout,
  // 0 = unlimited). The shorter of the two applies.
  double session_timeout_s = 0;
  int max_sessions = 1;  // sessions served at once; more are refused with "busy"
  std::string token;     // when set, clients must prove they hold it
  // The most device memory one session may hold through allocations (bytes); 0 = no limit
  // beyond the device's own.
  uint64_t max_session_memory = 0;
  // Seconds a client has to complete the handshake.
  double handshake_timeout_s = 10;
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
  // Stops serving (idempotent).
  void stop();
  // Blocks until stop() or `timeout`; returns whether stopped.
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::rpc

#endif  // KILN_RPC_SERVER_H_
