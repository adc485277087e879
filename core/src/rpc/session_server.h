// The server side of one RPC session: the handle table, the work directory sandbox and the
// request dispatch (docs/rpc-protocol.md §4).
#ifndef KILN_SRC_RPC_SESSION_SERVER_H_
#define KILN_SRC_RPC_SESSION_SERVER_H_

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include "kiln/runtime.h"
#include "rpc/connection.h"

namespace kiln::rpc {

// What the server and the session thread share about one session.
struct SessionState {
  std::unique_ptr<Connection> conn;
  std::mutex write_mu;  // held while a whole reply is written
  std::optional<std::chrono::steady_clock::time_point> deadline;
  double timeout_s = 0;
  uint64_t max_memory_bytes = 0;      // live Alloc bytes allowed; 0 = no limit
  std::atomic<bool> finished{false};  // set by the connection's thread as its last step
  std::atomic<bool> timed_out{false};
  uint64_t id = 0;
};

// Serves requests on `state.conn` until Shutdown, a closed connection, a protocol error or
// the session timeout. Never throws; logs why the session ended. Every handle and the work
// directory (created here, removed on return) are released before it returns.
void serve_session(SessionState& state, const std::filesystem::path& work_dir, Runtime& runtime);

// Resolves `relative` inside the existing directory `root`: refuses absolute paths, NUL
// bytes, `..` components and paths that symlinks lead out of `root`. Throws ValueError naming
// the path. "" is `root` itself (canonical).
std::filesystem::path sandboxed_path(const std::filesystem::path& root,
                                     const std::string& relative);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_SESSION_SERVER_H_
