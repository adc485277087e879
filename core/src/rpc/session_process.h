// SPDX-License-Identifier: Apache-2.0
// Each RPC session in a process of its own (docs/rpc.md, "Sessions are processes").
//
// The server accepts, checks the peer against its limits and keeps the slot; the session itself
// runs in a freshly executed worker (kiln-rpc-session): a new process image that never held the
// server's token, with an environment without it, that cannot read the server's memory or other
// sessions' (every Kiln process involved is non-dumpable and the worker drops its capabilities).
// A crash, a hang or a backdoor in uploaded code ends with the worker. The worker gets the
// client's socket itself. Under a token it also holds the TLS connection (issue 37, item 9): it
// gets the key derived from the token (never the token) when it starts, runs the TLS handshake
// and reads the client's hello on the socket the server hands it, reports how that went, and
// the server decides (its throttle, slots, keys) and answers; the session's bytes never pass
// through the server.
//
// A worker is started before its session is known (the server keeps a few started ahead, so
// that a session does not wait for exec, confinement and the runtime's start): everything that
// does not depend on the session is on its command line; the session's own settings and the
// client's socket come later over the socket pair it was started with (the channel). A worker
// serves at most one session, whenever it was started; a handshake that did not give it a
// session (a wrong token, a client that left, a refusal) leaves it waiting for the next one.
#ifndef KILN_SRC_RPC_SESSION_PROCESS_H_
#define KILN_SRC_RPC_SESSION_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/logging.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {

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
  // Under a token: the key derived from it. Sent over the channel first thing (never on the
  // command line, which /proc shows everyone); the command line only says one comes (--tls).
  std::optional<tls::Context::KeyBytes> session_key;
  bool tls = false;  // parsed: a key comes first on the channel
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
  // The session ran its TLS handshake in the worker (SessionProcess::handshake): the worker
  // sends the accepted server hello with this message first. Empty: the server answered.
  std::string accepted_hello;
};

// `start` as the bytes of the start message (NUL-separated arguments), and back. decode throws
// ValueError naming the bad argument.
std::string encode_session_start(const SessionStart& start);
SessionStart decode_session_start(const std::string& bytes);

// The kinds of message on a worker's channel. Each message is a 4-byte length (host order: both
// ends share a machine), a kind byte and its body; a socket may ride on it (SCM_RIGHTS).
enum class ChannelMessage : char {
  kKey = 'K',        // server -> worker, first, under a token: tls::Context::KeyBytes
  kHandshake = 'H',  // server -> worker, with the client's socket: run the TLS handshake and read
                     // the hello by the deadline (HandshakeRequest)
  kReport = 'R',     // worker -> server: how the handshake went (HandshakeReport)
  kAnswer = 'A',     // server -> worker: refuse the client with this server hello, then wait for
                     // the next client (HelloAnswer)
  kAnswered = 'D',   // worker -> server: the refusal went out (or could not), the client's
                     // connection is closed here: empty
  kStart = 'S',      // server -> worker: serve the session (SessionStart), on the socket that
                     // rides on it or the one of the handshake
};

// What the server asks of a handshake in the worker.
struct HandshakeRequest {
  std::string peer;        // the client's address, for logs
  double time_left_s = 0;  // seconds left of the handshake's one deadline
};
std::string encode_handshake_request(const HandshakeRequest& request);
HandshakeRequest decode_handshake_request(const std::string& bytes);

// How a handshake in the worker went: the TLS outcome (what the server's throttle counts and
// logs) and, once verified, the client's hello.
struct HandshakeReport {
  enum class Outcome {
    kVerified,  // the client proved the token
    kWrongKey,  // it does not hold it (tls::HandshakeError::Kind::kWrongKey)
    kTimedOut,  // the deadline passed first
    kClosed,    // the client closed or reset the connection (or the server shut it down)
    kNotTls,    // it does not speak TLS
  };
  Outcome outcome = Outcome::kClosed;
  std::string detail;  // why the TLS handshake failed, or why the hello could not be read
  bool hello = false;  // verified and the hello was read (the fields below)
  uint16_t version = 0;
  std::string key;
  double session_timeout_s = 0;
};
std::string encode_handshake_report(const HandshakeReport& report);
HandshakeReport decode_handshake_report(const std::string& bytes);

// A refusal the worker sends as the server hello (wire::HelloStatus and its message).
struct HelloAnswer {
  int status = 0;
  std::string message;
};
std::string encode_hello_answer(const HelloAnswer& answer);
HelloAnswer decode_hello_answer(const std::string& bytes);

// Sends one channel message on `fd` (blocking; `passed_fd` rides on it unless -1). Throws
// RuntimeError when the other end is gone.
void send_channel_message(int fd, ChannelMessage kind, const std::string& body, int passed_fd);
// Reads one channel message from the blocking `fd`: its kind and body, and the socket that rode
// on it in *passed_fd (-1 if none; close-on-exec). nullopt when the other end closed first.
// Throws ValueError for a message over 64 KiB.
std::optional<std::pair<ChannelMessage, std::string>> read_channel_message(int fd, int* passed_fd);

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
  // with SCM_RIGHTS; the caller keeps its own copy) or -1, when the worker holds it from
  // handshake() (then `start.accepted_hello` is its server hello). Throws RuntimeError when the
  // worker cannot take it (it exited).
  void begin(const SessionStart& start, int session_fd);
  // Under a token: hands the worker the client's socket `client_fd` (the caller keeps its copy)
  // to run the TLS handshake and read the hello on, by `request`'s deadline. Its outcome comes
  // from report(). Throws RuntimeError when the worker cannot take it.
  void handshake(int client_fd, const HandshakeRequest& request);
  // Waits until `until` for the worker's report of the handshake; nullopt when none came by
  // then. Throws RuntimeError when the worker closed its channel or exited first, or sent
  // something else.
  std::optional<HandshakeReport> report(std::chrono::steady_clock::time_point until);
  // After a report: the worker sends the client `answer` as the server's hello, closes its
  // socket and waits for the next client; returns once it says it did, or false when it did not
  // by `until`. Throws RuntimeError when the worker is gone.
  bool answer(const HelloAnswer& answer, std::chrono::steady_clock::time_point until);
  // The server's end of the socket pair (-1 once closed).
  int channel() const { return channel_; }
  // Closes the server's end of the channel (a worker still waiting for begin() then exits).
  void close_channel() noexcept;

  pid_t pid() const { return pid_; }
  // A descriptor that polls readable once the worker exited (-1 where pidfds are missing).
  int exit_fd() const { return pidfd_; }
  // Whether the worker exited, as its pidfd says (without one: false until wait() saw it);
  // it may be a zombie still, for wait() to reap.
  bool exited() const;
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
  // The worker's next message on the channel, waiting until `until`: its kind and body, or
  // nullopt when none came by then. Throws RuntimeError when the channel closed or failed.
  std::optional<std::pair<ChannelMessage, std::string>> receive(
      std::chrono::steady_clock::time_point until);
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int channel_ = -1;
  std::optional<int> status_;
  std::string inbox_;             // bytes of the worker's report read so far (report())
  std::filesystem::path cgroup_;  // set once, in the constructor
  std::atomic<bool> cgroup_ended_{false};
};

// Whether the status says the worker crashed (a signal other than the server's own SIGTERM /
// SIGKILL).
bool crashed(int status);

// Kills every descendant of this process and reaps them (this process must be a child
// subreaper, so that orphaned ones became its children), for up to `limit`. Returns how many it
// reaped. The session worker runs it as it ends.
int end_descendants(std::chrono::milliseconds limit) noexcept;

// Makes this process non-dumpable: its /proc files (memory, environment, descriptors) are
// then closed to every process without CAP_SYS_PTRACE, same user or not. The server does it
// before its first session worker starts; workers do it first thing.
void make_non_dumpable() noexcept;

// The worker's main (kiln-rpc-session): waits on its channel (descriptor 3) for its session,
// serves it and returns its exit code.
int session_worker_main(int argc, char** argv);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_SESSION_PROCESS_H_
