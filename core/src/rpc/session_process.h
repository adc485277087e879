// SPDX-License-Identifier: Apache-2.0
// Each RPC session in a process of its own (docs/rpc.md, "Sessions are processes").
//
// The server accepts, runs the handshake and keeps the slot; the session itself runs in a
// freshly executed worker (kiln-rpc-session): a new process image that never held the
// server's token, with an environment without it, that cannot read the server's memory or
// other sessions' (every Kiln process involved is non-dumpable and the worker drops its
// capabilities). A crash, a hang or a backdoor in uploaded code ends with the worker.
// Without a token the worker gets the client's socket itself; with one the server keeps the
// TLS channel and relays plaintext to the worker over a socket pair (relay()), so no key
// material ever enters the worker.
//
// A worker is started before its session is known (the server keeps a few started ahead, so
// that a session does not wait for exec, confinement and the runtime's start): everything that
// does not depend on the session is on its command line; the session's own settings and the
// client's socket come later, once, over the socket pair it was started with (begin()). A
// worker serves exactly one session, whenever it was started.
#ifndef KILN_SRC_RPC_SESSION_PROCESS_H_
#define KILN_SRC_RPC_SESSION_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/logging.h"

namespace kiln::rpc {

class Connection;

// What a session worker needs before its session is known; it travels on the worker's command
// line.
struct WorkerConfig {
  std::filesystem::path sessions_root;  // where the server makes session directories
  std::filesystem::path work_dir;       // this worker's (inside sessions_root, made by the server)
  // The session's own settings, for the constructor that hands the session over at once (not on
  // the command line: begin() sends them); see SessionStart.
  uint64_t id = 0;
  std::string peer;
  double timeout_s = 0;
  double time_left_s = 0;
  uint64_t max_memory_bytes = 0;
  uint64_t max_handles = 0;
  uint64_t max_upload_bytes = 0;
  int64_t idle_timeout_ms = 0;
  int64_t write_timeout_ms = 0;
  // Kiln's own functions the session offers beside the application's (rpc/diagnostic_functions.h):
  bool test_functions = false;  // the diagnostic functions (ServerTestHooks::test_functions)
  bool echo_function = false;   // testing.echo alone (ServerTestHooks::echo_function)
  // The parent's plugin discovery, so that the worker loads the same plugins.
  std::optional<std::filesystem::path> plugin_set;
  std::vector<std::filesystem::path> search_paths;
  LogLevel log_level = LogLevel::kWarn;
  // Files the session must not read (the server's token files): hidden where the worker can
  // make a mount namespace of its own.
  std::vector<std::filesystem::path> hidden_files;
  pid_t server_pid = 0;  // the worker ends when this process does
  // A cgroup v2 directory made for this session (SessionProcess does), which the worker joins
  // first thing; empty: none (the worker's subreaper role alone keeps its descendants).
  std::filesystem::path cgroup;
};

// `config` as command-line arguments (after the program name), and back. parse throws
// ValueError naming the bad argument.
std::vector<std::string> worker_arguments(const WorkerConfig& config);
WorkerConfig parse_worker_arguments(const std::vector<std::string>& args);

// What is known only once a client has its session: sent to a started worker by
// SessionProcess::begin().
struct SessionStart {
  uint64_t id = 0;         // the server's session number, for logs
  std::string peer;        // the client's address, for logs
  double timeout_s = 0;    // the session's timeout as agreed; 0: none
  double time_left_s = 0;  // seconds left of it when the session is handed over
};

// `start` as the bytes of the start message (NUL-separated arguments), and back. decode throws
// ValueError naming the bad argument.
std::string encode_session_start(const SessionStart& start);
SessionStart decode_session_start(const std::string& bytes);

// The session worker executable: `configured` when not empty, else $KILN_RPC_SESSION_WORKER,
// else kiln-rpc-session beside libkiln's install (<prefix>/libexec/kiln/) or build tree
// (<build>/bin/). Throws RuntimeError listing where it looked.
std::filesystem::path find_session_worker(const std::filesystem::path& configured);

// A running session worker and everything it starts (its process tree).
//
// The tree ends with the session (issue 37, item 3): the worker makes its descriptor 3
// close-on-exec (nothing it starts holds the session's socket) and is a child subreaper that
// kills and reaps every descendant before it exits, setsid() or not. Where the machine offers a
// writable cgroup v2 subtree (the server's own cgroup), each session also gets a cgroup of its
// own, which is killed whole once the worker was reaped: that also catches descendants of a
// worker that crashed or was killed. $KILN_RPC_SESSION_CGROUP=off turns the cgroup off.
class SessionProcess {
 public:
  // Starts `worker` with one end of a new socket pair (the channel) as its descriptor 3, stdin
  // /dev/null, stdout and stderr the server's, in a process group of its own (and a cgroup of
  // its own where it can make one), every other descriptor closed, signals at their defaults,
  // and the environment without KILN_RPC_TOKEN and KILN_TRACKER_TOKEN. It confines itself and
  // starts its runtime, then waits for begin(); closing the channel before that ends it.
  // Throws RuntimeError when it cannot start. The worker gets SIGKILL when the thread that
  // constructs this ends (PR_SET_PDEATHSIG): construct it on a thread that outlives the session.
  SessionProcess(const std::filesystem::path& worker, const WorkerConfig& config);
  // The same, then begin() at once with `config`'s id, peer, timeout_s and time_left_s and
  // `session_fd` (the caller keeps its copy), and the channel closed.
  SessionProcess(const std::filesystem::path& worker, const WorkerConfig& config, int session_fd);
  // Kills (SIGKILL, the whole group and cgroup) and reaps a worker still running.
  ~SessionProcess();
  SessionProcess(const SessionProcess&) = delete;
  SessionProcess& operator=(const SessionProcess&) = delete;

  // Hands the worker its session, once: `start`, and `session_fd` (the client's socket, passed
  // with SCM_RIGHTS; the caller keeps its own copy) or -1, when the channel itself carries the
  // session (the relay's end). Throws RuntimeError when the worker cannot take it (it exited).
  void begin(const SessionStart& start, int session_fd);
  // The server's end of the socket pair (-1 once closed): after begin(start, -1), the session's
  // plaintext goes through it.
  int channel() const { return channel_; }
  // Closes the server's end of the channel (a worker still waiting for begin() then exits).
  void close_channel() noexcept;

  pid_t pid() const { return pid_; }
  // A descriptor that polls readable once the worker exited (-1 where pidfds are missing).
  int exit_fd() const { return pidfd_; }
  // Whether the worker exited, as its pidfd says (without one: false until wait() saw it);
  // it may be a zombie still, for wait() to reap.
  bool exited() const;
  // The server's write timeout (0: none): relay() gives the client that long, plus 1 s per
  // MiB, to take reply data, as a session without a token does.
  std::chrono::milliseconds write_timeout() const { return write_timeout_; }
  // The session's cgroup (removed once the worker was reaped), or empty when it has none.
  const std::filesystem::path& cgroup() const { return cgroup_; }
  // Sends `sig` to the worker's process group (what it spawned too; SIGKILL: its cgroup as
  // well). No-op once reaped.
  void signal(int sig) noexcept;
  // Waits up to `timeout` (nullopt: forever) for the worker to exit; its wait status, or
  // nullopt while it runs. Once it exited, what is left of its group and cgroup is killed and
  // the cgroup removed.
  std::optional<int> wait(std::optional<std::chrono::milliseconds> timeout);

 private:
  // Kills every process left in the cgroup and removes it (bounded: a second at most).
  void end_cgroup() noexcept;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int channel_ = -1;
  std::optional<int> status_;
  std::chrono::milliseconds write_timeout_{0};
  std::filesystem::path cgroup_;  // set once, in the constructor
  std::atomic<bool> cgroup_ended_{false};
};

// Whether the status says the worker crashed (a signal other than the server's own SIGTERM /
// SIGKILL).
bool crashed(int status);

// Relays bytes between `client` (the encrypted side) and the worker's end of a socket pair,
// `worker_fd`, until the session is over: the worker exited (after what it wrote was
// forwarded) or closed its end, the client hung up, reset, or can take no more data, the
// client did not take reply data within the worker's write_timeout() plus 1 s per MiB (the
// same rule as without a token), `stop` was set, or the channel failed its integrity check.
// After the client's close_notify (or a half-close) replies still go out until the worker ends.
// Never spins: every state it can be in waits in poll(). Returns why it ended; the caller
// closes `worker_fd` and reaps the worker.
std::string relay(Connection& client, int worker_fd, const SessionProcess& worker,
                  const std::atomic<bool>& stop);

// Kills every descendant of this process and reaps them (this process must be a child
// subreaper, so that orphaned ones became its children), for up to `limit`. Returns how many it
// reaped. The session worker runs it as it ends.
int end_descendants(std::chrono::milliseconds limit) noexcept;

// Makes this process non-dumpable: its /proc files (memory, environment, descriptors) are
// then closed to every process without CAP_SYS_PTRACE, same user or not. The server does it
// before its first session worker starts; workers do it first thing.
void make_non_dumpable() noexcept;

// The worker's main (kiln-rpc-session): serves one session on descriptor 3 and returns its
// exit code.
int session_worker_main(int argc, char** argv);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_SESSION_PROCESS_H_
