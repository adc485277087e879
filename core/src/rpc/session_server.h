// SPDX-License-Identifier: Apache-2.0
// The server side of one RPC session: the handle table, the work directory sandbox and the
// request dispatch (docs/rpc-protocol.md §4).
#ifndef KILN_SRC_RPC_SESSION_SERVER_H_
#define KILN_SRC_RPC_SESSION_SERVER_H_

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kiln/runtime.h"
#include "rpc/connection.h"

namespace kiln::rpc {

class SessionProcess;

// What the server and the session thread share about one session.
struct SessionState {
  std::unique_ptr<Connection> conn;
  std::mutex write_mu;  // held while a whole reply is written
  std::optional<std::chrono::steady_clock::time_point> deadline;
  double timeout_s = 0;
  // Bytes of memory the session may hold through its handles, whoever allocated them
  // (Alloc, or a function that returned a tensor): each storage counted once; 0 = no limit.
  uint64_t max_memory_bytes = 0;
  uint64_t max_handles = 0;       // handles held at once; 0 = no limit
  uint64_t max_upload_bytes = 0;  // bytes uploaded over the session's life; 0 = no limit
  // Per-call limits once the session runs: a client silent this long between (or inside)
  // requests, or one that takes no reply data this long, ends the session. Zero: none.
  std::chrono::milliseconds idle_timeout{0};
  std::chrono::milliseconds write_timeout{0};
  // Kiln's own functions offered beside the application's (rpc/diagnostic_functions.h). The
  // application's, in the global registry, are served under any name whatever these say.
  bool enable_test_functions = false;  // the diagnostic functions (ServerTestHooks)
  bool enable_echo = false;            // testing.echo alone (a local session, as TVM's)
  std::atomic<bool> finished{false};   // set by the connection's thread as its last step
  std::atomic<bool> timed_out{false};
  // Set when the session must end (timeout, server stop, the client hung up): functions
  // that cooperate (rpc::call_cancelled(), the time evaluator) return early.
  std::atomic<bool> cancelled{false};
  std::atomic<bool> slot_released{false};  // the server no longer counts it as active
  uint64_t id = 0;
  // The handshake, while it runs (Server bookkeeping, under its mutex).
  std::string peer_ip;
  bool in_handshake = false;
  // Its first flight proved the token (PSK binder): it is not ended to make room for others.
  bool first_flight_verified = false;
  std::chrono::steady_clock::time_point handshake_started{};
  // Process isolation: the session's worker while it runs (server side, under its mutex).
  std::shared_ptr<SessionProcess> worker;
};

// Serves requests on `state.conn` until Shutdown, a closed connection, a protocol error or
// the session timeout. Never throws; logs why the session ended. The session's work
// directory is created here, unique (make_session_directory), and removed with every handle
// before it returns. Does not close the connection: the caller frees the session's slot
// first, then closes it (a client's close() waits for that).
void serve_session(SessionState& state, const std::filesystem::path& parent, Runtime& runtime);
// The same in the existing directory `work_dir` (canonical), which stays (a session worker:
// its server removes the directory once the worker is gone, crashed or not).
void serve_session_in(SessionState& state, const std::filesystem::path& work_dir, Runtime& runtime);

// A new session directory in `parent`, "session-<n>-XXXXXX": unique (mkdtemp, never an
// existing one) and never a name this process made before (<n> counts the process's session
// directories), mode 0700, canonical. Throws RuntimeError naming `parent`.
std::filesystem::path make_session_directory(const std::filesystem::path& parent);
// Removes it with everything inside (never following links); logs a failure.
void remove_session_directory(const std::filesystem::path& work_dir) noexcept;

// Ends `state` at its deadline: marks it timed out and cancelled, tells the client why (TVM's
// RPCSessionTimeoutError text; a reply being written finishes first, one stuck for a second is
// cut off), then shuts the connection down.
void expire_session(SessionState& state);

// Whether the session whose call runs on this thread must end (its timeout passed or the
// server is stopping). Long-running functions registered for sessions poll it. False outside
// a session.
bool call_cancelled();

// Resolves `relative` inside the existing directory `root`: refuses absolute paths, NUL
// bytes, `..` components and paths that symlinks lead out of `root`. Throws ValueError naming
// the path. "" is `root` itself (canonical).
std::filesystem::path sandboxed_path(const std::filesystem::path& root,
                                     const std::string& relative);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_SESSION_SERVER_H_
