// SPDX-License-Identifier: Apache-2.0
// A blocking, buffered TCP connection for the RPC session protocol. Built on a Boost.Asio
// socket; reads and writes go straight to the socket's descriptor so that SO_RCVTIMEO /
// SO_SNDTIMEO bound them (Asio's synchronous reads would poll past a receive timeout) and a
// small request costs exactly one send and one receive system call. On a thread with an
// interrupt poll (kiln/detail/cancellation.h: a call from Python) every wait, connect() included,
// runs the poll every kInterruptPollPeriod, so Ctrl-C ends it (InterruptedError).
#ifndef KILN_SRC_RPC_CONNECTION_H_
#define KILN_SRC_RPC_CONNECTION_H_

#include <sys/uio.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "rpc/protocol.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {

// The connection failed, closed or timed out; the session cannot continue.
class ConnectionError : public RuntimeError {
 public:
  enum class Kind {
    kFailed,    // any other failure
    kTimedOut,  // no answer within the time limit
    kClosed,    // orderly close or reset by the peer
    kRefused,   // nothing listens at the address (connect)
  };
  explicit ConnectionError(const std::string& message, Kind kind = Kind::kFailed)
      : RuntimeError(message), kind_(kind) {}
  bool timed_out() const { return kind_ == Kind::kTimedOut; }
  bool closed() const { return kind_ == Kind::kClosed; }
  bool refused() const { return kind_ == Kind::kRefused; }

 private:
  Kind kind_;
};

class Connection {
 public:
  // Takes a connected socket; `peer` names it in errors ("127.0.0.1:9090"). The descriptor
  // leaves Asio's reactor: an io_context thread would otherwise wake on every packet.
  Connection(boost::asio::ip::tcp::socket socket, std::string peer);
  // Resolves and connects within `timeout` (each address of `host` in turn), signals or not
  // (connect_until, rpc/socket_io.h). Throws ConnectionError naming host:port.
  static std::unique_ptr<Connection> connect(const std::string& host, int port,
                                             std::chrono::milliseconds timeout);
  // Takes the connected socket `fd` (a session worker's descriptor 3).
  static std::unique_ptr<Connection> adopt(int fd, std::string peer) {
    return std::unique_ptr<Connection>(new Connection(fd, std::move(peer)));
  }
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Receive and send time limits; zero means none.
  void set_timeouts(std::chrono::milliseconds receive, std::chrono::milliseconds send);
  // A deadline for every read and write until it is cleared (nullopt): each system call is
  // bounded by what is left of it, so a peer that sends a byte now and then cannot stretch
  // a handshake or a reply (the per-call timeouts alone restart with every byte). Passing it
  // throws ConnectionError (timed out) naming `what`; `why`, when given, says what the
  // deadline was for in that error ("did not answer within ..."), after the peer's name.
  // Under TLS the socket is non-blocking while a deadline is set and every wait is a poll
  // bounded by it: one blocking SSL_read would read a whole record, one socket read per
  // piece, each with the whole per-call timeout, so a record dripped a byte at a time would
  // outlast any deadline.
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline,
                    std::string why = {});
  // The slowest rate, in bytes per second, at which a whole message may pass; 0 (the default):
  // no such bound. With it, a frame written (write_frame, or write_frame_start and the payload
  // written after it; a lone write_all counts as one message) must be taken by the peer within
  // the send timeout plus its size at this rate, and a frame read must have arrived within the
  // receive timeout plus its size at this rate, counted from its header; past that the next
  // read or write throws ConnectionError (timed out). The per-call timeouts alone restart with
  // every byte: a peer that takes or sends a little now and then would hold the connection as
  // long as it likes. Checked before each system call, each still bounded by its per-call
  // timeout, so a message may overrun its deadline by one per-call timeout at most. No bound in
  // a direction whose per-call timeout is zero. Between frames (waiting for a header) only the
  // receive timeout applies: an idle peer is the idle timeout's business.
  void set_min_throughput(uint64_t bytes_per_s) { min_bytes_per_s_ = bytes_per_s; }

  // Reads exactly `n` bytes (`what` names them in errors).
  void read_exact(void* dst, size_t n, const char* what);
  // Discards `n` bytes.
  void skip(uint64_t n, const char* what);
  // Writes every byte of the buffers.
  void write_all(iovec* iov, int count);
  void write_all(const void* data, size_t n);

  // Reads a frame header; `max_length` bounds its length field. ProtocolError on a length
  // below 4 or above the bound; ConnectionError when the peer closed or failed.
  struct FrameHeader {
    uint64_t length = 0;  // bytes after the length field, code included
    uint32_t code = 0;
    uint64_t body_length() const { return length - 4; }
  };
  FrameHeader read_frame_header(uint64_t max_length);
  // Reads a whole body of `n` bytes (n <= kMaxMessageBytes) into `body`.
  void read_body(uint64_t n, std::vector<uint8_t>& body, const char* what);
  // Writes one frame: header, `body`, then `payload_bytes` of payload at `payload`.
  void write_frame(wire::Code code, const std::vector<uint8_t>& body, const void* payload = nullptr,
                   uint64_t payload_bytes = 0);
  // Writes the header and body of a frame whose payload the caller then writes itself.
  void write_frame_start(wire::Code code, const std::vector<uint8_t>& body, uint64_t payload_bytes);

  // Runs a TLS handshake (tls_psk.h) on the connection and sends every later byte through
  // it. Call it before anything was read or written. Throws tls::HandshakeError when the peer
  // does not hold the key or the handshake does not finish by `deadline`.
  void start_tls(const tls::Context& context, std::chrono::steady_clock::time_point deadline);
  bool encrypted() const { return tls_ != nullptr; }
  // The TLS session once start_tls() ran (nullptr before), for callers that read and write it
  // directly (tests: close_notify, raw reads).
  tls::Session* tls_session() { return tls_.get(); }
  // Stops reads and writes in both directions (wakes a thread blocked in a read).
  void shutdown() noexcept;
  // Stops writing, then reads and discards until the peer closes or `limit` passes: after a
  // Shutdown request this returns once the server has ended the session (and freed its slot).
  // An interrupt (kiln/detail/cancellation.h) ends the wait early; the scope keeps it.
  void wait_for_close(std::chrono::milliseconds limit) noexcept;
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  // Bytes already received but not yet consumed (decrypted ones included).
  size_t buffered() const { return end_ - begin_ + (tls_ ? tls_->pending() : 0); }

 private:
  // Header (length counting `payload_bytes`), body, then `payload_sent` bytes of `payload`.
  void write_frame_parts(wire::Code code, const std::vector<uint8_t>& body, const void* payload,
                         uint64_t payload_sent, uint64_t payload_bytes);
  // Takes the connected socket `fd` (blocking; -1 for none).
  Connection(int fd, std::string peer);
  [[noreturn]] void fail_io(const char* op, const char* what, int err, bool eof);
  // One recv or one gathered send, through TLS once start_tls() ran (errno as recv/sendmsg;
  // EPROTO when a TLS record failed its integrity check).
  ssize_t transport_recv(void* data, size_t n);
  ssize_t transport_send(const iovec* iov, int count);
  // Bounds the next system call by the deadline (SO_RCVTIMEO / SO_SNDTIMEO); throws when it
  // has passed.
  void apply_deadline(bool sending, const char* what);
  // Runs one recv or sendmsg (`call`), bounded by the deadline, again while a signal
  // interrupts it. The retry gets what is left of the per-call limit and the deadline, not the
  // whole limit again (a steady stream of signals would otherwise renew it forever); once
  // nothing is left it returns -1 with errno EAGAIN, the timeout's own error.
  template <typename Call>
  ssize_t call_surviving_signals(bool sending, const char* what, Call call);
  // call_surviving_signals for a thread with an interrupt poll (kiln/detail/cancellation.h:
  // Ctrl-C in Python): waits for the socket in slices of kInterruptPollPeriod, running the poll
  // between them (it throws InterruptedError to end the wait), then calls `call`. The time
  // limits are the same; once they pass it returns -1 with errno EAGAIN.
  template <typename Call>
  ssize_t call_interruptibly(bool sending, Call call);
  // A message in one direction and its deadline (set_min_throughput).
  struct Message {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    uint64_t bytes = 0;  // its size, for errors
    uint64_t left = 0;   // writing: bytes not sent yet (0: no message is being written)
  };
  // A message of `bytes` starting now in the direction `sending`: its deadline, or none.
  Message start_message(bool sending, uint64_t bytes) const;
  // Throws ConnectionError (timed out) when the message in the direction `sending` is past
  // its deadline.
  void check_message_deadline(bool sending, const char* what) const;
  // The error for a deadline (set_deadline) that passed while `sending` / waiting for `what`.
  ConnectionError deadline_error(bool sending, const char* what) const;
  // Switches the socket between blocking and non-blocking (set_deadline under TLS).
  void set_nonblocking(bool on);
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::string deadline_why_;  // set_deadline's `why`
  bool nonblocking_ = false;  // the socket is non-blocking: a TLS connection under a deadline
  uint64_t min_bytes_per_s_ = 0;
  Message reading_;  // the frame being read, from its header on
  Message writing_;  // the frame (or lone write_all) being written
  int fd_ = -1;      // owned
  std::unique_ptr<tls::Session> tls_;
  std::string peer_;
  std::vector<uint8_t> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
  std::chrono::milliseconds receive_timeout_{0};
  std::chrono::milliseconds send_timeout_{0};
};

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_CONNECTION_H_
