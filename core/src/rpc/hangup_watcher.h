// SPDX-License-Identifier: Apache-2.0
// Notices that a session's client hung up while the session is busy with a call (issue 27,
// item 4): the session's thread reads nothing while a call runs, so without a watcher a client
// that disconnects during a long evaluation would leave it running to its end.
#ifndef KILN_SRC_RPC_HANGUP_WATCHER_H_
#define KILN_SRC_RPC_HANGUP_WATCHER_H_

#include <atomic>
#include <thread>

namespace kiln::rpc {

// Watches a connected socket on a thread of its own, blocked in poll() (no periodic wake-up):
// when the peer hangs up (POLLRDHUP: it closed or shut down its sending side; POLLHUP,
// POLLERR: reset) it sets `cancelled`, which calls that cooperate (kiln/detail/cancellation.h)
// poll. Data that arrives is not looked at: only a hang-up cancels. The protocol is request /
// reply and a client sends nothing while it waits for a reply, so a peer that half-closes its
// side after a request counts as gone.
class HangupWatcher {
 public:
  // Starts watching `fd` (not owned: it must stay open until the watcher is destroyed).
  // `cancelled` must outlive the watcher. Throws RuntimeError when it cannot start.
  HangupWatcher(int fd, std::atomic<bool>& cancelled);
  // Stops watching and joins the thread.
  ~HangupWatcher();
  HangupWatcher(const HangupWatcher&) = delete;
  HangupWatcher& operator=(const HangupWatcher&) = delete;

  // Whether a hang-up was seen.
  bool hung_up() const { return hung_up_.load(); }

 private:
  void watch();

  int fd_;
  int stop_fd_ = -1;  // an eventfd: written to stop the thread
  std::atomic<bool>& cancelled_;
  std::atomic<bool> hung_up_{false};
  std::thread thread_;
};

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_HANGUP_WATCHER_H_
