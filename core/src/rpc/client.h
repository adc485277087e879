// SPDX-License-Identifier: Apache-2.0
// The client side of an RPC session (kiln/rpc/session.h): the connection, the request
// exchange and the encoding of arguments and results.
#ifndef KILN_SRC_RPC_CLIENT_H_
#define KILN_SRC_RPC_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/any.h"
#include "kiln/device_backend.h"
#include "kiln/rpc/session.h"
#include "kiln/runtime.h"
#include "rpc/connection.h"
#include "rpc/protocol.h"

namespace kiln::rpc {

struct RPCSession::Impl : std::enable_shared_from_this<RPCSession::Impl> {
  // What the session needs kept until it is closed: the in-process server of local_session().
  // First, so that it goes last, after the connection has closed.
  std::shared_ptr<void> keep_alive;
  std::unique_ptr<Connection> conn;
  std::string peer;
  std::string server_key;
  int32_t index = -1;
  double session_timeout_s = 0;
  // How long a reply may take to start, from its request sent: the session timeout plus 5 s
  // grace (the server ends the session at its timeout and says so); zero: no bound (a
  // session without a timeout, whose call may run as long as it likes).
  std::chrono::milliseconds reply_limit{0};

  std::mutex mu;  // one request in flight
  // The thread holding `mu` for a request. A remote object dropped on that thread (a reply
  // that failed to decode) cannot send its FreeHandle then: it waits in `pending_frees`
  // and goes out before the next request.
  std::atomic<std::thread::id> owner{};
  std::mutex pending_mu;
  std::vector<uint64_t> pending_frees;
  bool closed = false;
  std::string closed_reason;
  // The runtime the session's remote devices are served through (kept alive by the session),
  // and the backends it made for them, by server device type (under backends_mu: they are
  // looked up while a request holds `mu`).
  std::optional<Runtime> runtime;
  std::mutex backends_mu;
  std::map<int32_t, Ref<DeviceBackend>> backends;
  std::vector<uint8_t> reply;  // reused for every reply (under mu)
  // Requests sent that may leave work running on a server device
  // (wire::may_leave_device_work): a remote device synchronized since the last one skips the
  // Synchronize round trip that Tensor::copy_to / copy_from end with.
  std::atomic<uint64_t> device_work{0};

  ~Impl();

  // Holds `mu` for one exchange; sends the pending FreeHandles first.
  class Exclusive {
   public:
    explicit Exclusive(Impl& impl);
    ~Exclusive();
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    Impl& impl_;
    std::unique_lock<std::mutex> lock_;
  };

  // Sends a request and returns the values of its Return reply. Throws RPCError (remote
  // error or lost connection) or RPCSessionTimeoutError.
  std::vector<Any> request(wire::Code code, const std::vector<uint8_t>& body,
                           const void* payload = nullptr, uint64_t payload_bytes = 0);
  // The single function a GetGlobalFunc / ModuleGetFunction / TimeEvaluator request returns.
  Function function_reply(wire::Code code, const std::vector<uint8_t>& body);
  // CopyFromRemote: the reply's payload of `expected_bytes` is received straight into `dst`.
  void request_data(wire::Code code, const std::vector<uint8_t>& body, void* dst,
                    uint64_t expected_bytes);
  // Download: the whole file at `remote_path`.
  std::string request_file(const std::string& remote_path);
  // FreeHandle; never throws (a closed session has nothing left to free).
  void free_handle(uint64_t handle) noexcept;
  // The error for a reply to `what` that does not have the shape of its request's reply.
  RPCError malformed_reply(const char* what) const;
  void close() noexcept;

  // Argument and result encoding.
  void encode(wire::Writer& w, const Any& value);
  Any decode(wire::Reader& r);
  Ref<DeviceBackend> backend_for(int32_t server_type);
  Device to_remote(Device server_device) const {
    return {server_device.type + (index + 1) * kRemoteDeviceMask, server_device.id};
  }

 private:
  void check_open_locked() const;
  // Writes a FreeHandle frame (`mu` held). Throws ConnectionError.
  void send_free_handle(uint64_t handle);
  // Runs `body` holding the session for request `code`; a lost connection or a protocol
  // violation closes the session and becomes an RPCError (RPCSessionTimeoutError on silence).
  template <typename Body>
  auto exchange(wire::Code code, Body&& body);
  // Reads a reply header, turning Exception frames into thrown errors. The reply is bounded
  // as a whole (the connection's deadline, never per read): its header within reply_limit of
  // now, its body by then plus its size at kMinTransferBytesPerSecond (without a reply_limit:
  // kTransferTimeout from its header plus the same), so a server that drips its reply cannot
  // stretch the wait. The bound stays until the exchange ends.
  Connection::FrameHeader read_reply(const char* what);
  // Bounds the request of `bytes` about to be written (frame included): the session's reply
  // limit (kTransferTimeout without one) plus its size at kMinTransferBytesPerSecond.
  void bound_request(uint64_t bytes);
  // Where an exchange is (for what a timeout means: lost()).
  enum class Phase { kIdle, kRequest, kReplyHeader, kReplyBody };
  Phase phase = Phase::kIdle;
  [[noreturn]] void lost(const ConnectionError& e, const char* what);
};

// Makes `impl` (its peer, server key and timeout set) a session over `conn`, a connection
// past the handshake, whose remote devices are served through `runtime`. connect() ends with
// it; a measurement worker's socket pair has no handshake to run.
RPCSession attach_session(std::shared_ptr<RPCSession::Impl> impl, std::unique_ptr<Connection> conn,
                          Runtime& runtime);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_CLIENT_H_
