// SPDX-License-Identifier: Apache-2.0
#include "rpc/connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kiln/detail/cancellation.h"
#include "rpc/socket_io.h"

namespace kiln::rpc {

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kBufferBytes = 64 * 1024;

timeval to_timeval(milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// Sets SO_SNDTIMEO (`sending`) or SO_RCVTIMEO of `fd`; zero means none.
void set_socket_timeout(int fd, bool sending, milliseconds limit) {
  const timeval tv = to_timeval(limit);
  ::setsockopt(fd, SOL_SOCKET, sending ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, sizeof(tv));
}

// The descriptor of `socket`, in blocking mode, taken from Asio; -1 when that failed.
int release_blocking(boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  socket.non_blocking(false, ec);
  const int fd = socket.release(ec);
  return ec ? -1 : fd;
}
}  // namespace

Connection::Connection(boost::asio::ip::tcp::socket socket, std::string peer)
    : Connection(release_blocking(socket), std::move(peer)) {}

Connection::Connection(int fd, std::string peer)
    : fd_(fd), peer_(std::move(peer)), buffer_(kBufferBytes) {
  if (fd_ < 0) return;
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails on a local socket: fine
}

std::unique_ptr<Connection> Connection::connect(const std::string& host, int port,
                                                milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string peer = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) {
    throw ConnectionError(
        fmt::format("cannot connect to {}: {}", peer,
                    resolved == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(resolved)));
  }
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, ::freeaddrinfo);
  int error = EADDRNOTAVAIL;
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    // A name may resolve to an address this machine cannot reach (::1 without IPv6): the
    // next one is tried, as long as time is left.
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    try {
      error = connect_until_interruptible(fd, a->ai_addr, a->ai_addrlen, deadline);
    } catch (...) {
      ::close(fd);  // interrupted (kiln/detail/cancellation.h)
      throw;
    }
    if (error == 0) return std::unique_ptr<Connection>(new Connection(fd, std::move(peer)));
    ::close(fd);
    if (Clock::now() >= deadline) break;
  }
  if (Clock::now() >= deadline) {
    throw ConnectionError(
        fmt::format("cannot connect to {}: no answer within {} ms", peer, timeout.count()),
        ConnectionError::Kind::kTimedOut);
  }
  throw ConnectionError(
      fmt::format("cannot connect to {}: {}", peer, std::strerror(error)),
      error == ECONNREFUSED ? ConnectionError::Kind::kRefused : ConnectionError::Kind::kFailed);
}

Connection::~Connection() {
  tls_.reset();  // before the descriptor it uses
  if (fd_ >= 0) ::close(fd_);
}

void Connection::set_timeouts(milliseconds receive, milliseconds send) {
  set_socket_timeout(fd(), false, receive);
  set_socket_timeout(fd(), true, send);
  receive_timeout_ = receive;
  send_timeout_ = send;
}

void Connection::set_deadline(std::optional<Clock::time_point> deadline, std::string why) {
  deadline_ = deadline;
  deadline_why_ = std::move(why);
  if (!deadline_) set_timeouts(receive_timeout_, send_timeout_);  // the per-call limits again
  set_nonblocking(tls_ != nullptr && deadline_.has_value());
}

void Connection::set_nonblocking(bool on) {
  if (on == nonblocking_ || fd_ < 0) return;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0) return;  // stays as it was: blocking calls bounded by the socket timeouts
  if (::fcntl(fd_, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)) == 0) {
    nonblocking_ = on;
  }
}

ConnectionError Connection::deadline_error(bool sending, const char* what) const {
  const char* doing = sending ? "sending" : "waiting for";
  if (!deadline_why_.empty()) {
    return ConnectionError(fmt::format("{} {} ({} {})", peer_, deadline_why_, doing, what),
                           ConnectionError::Kind::kTimedOut);
  }
  return ConnectionError(fmt::format("{} did not complete the exchange within its deadline ({} {})",
                                     peer_, doing, what),
                         ConnectionError::Kind::kTimedOut);
}

void Connection::apply_deadline(bool sending, const char* what) {
  if (!deadline_) return;
  const auto left = std::chrono::duration_cast<milliseconds>(*deadline_ - Clock::now());
  if (left.count() <= 0) throw deadline_error(sending, what);
  // A non-blocking socket's calls never wait: its waits are polls bounded by the deadline
  // (call_interruptibly), and a socket timeout set per call was one system call per TLS
  // record of a transfer for nothing.
  if (nonblocking_) return;
  auto bound = left;
  const auto per_call = sending ? send_timeout_ : receive_timeout_;
  if (per_call.count() > 0) bound = std::min(bound, per_call);
  set_socket_timeout(fd(), sending, std::max(bound, milliseconds(1)));
}

Connection::Message Connection::start_message(bool sending, uint64_t bytes) const {
  Message m;
  m.bytes = bytes;
  m.left = bytes;
  const milliseconds per_call = sending ? send_timeout_ : receive_timeout_;
  if (min_bytes_per_s_ == 0 || per_call.count() <= 0) return m;
  // Clamped to a century: a length from the network must not overflow the clock.
  const double seconds = std::min(
      static_cast<double>(bytes) / static_cast<double>(min_bytes_per_s_), 100.0 * 365 * 24 * 3600);
  m.deadline = Clock::now() + per_call +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return m;
}

void Connection::check_message_deadline(bool sending, const char* what) const {
  const Message& m = sending ? writing_ : reading_;
  if (!m.deadline || Clock::now() < *m.deadline) return;
  throw ConnectionError(
      fmt::format("{} {} too slowly: a message of {} bytes must pass within the {} timeout of "
                  "{} ms plus 1 s per {} bytes ({} {})",
                  peer_, sending ? "took data" : "sent data", m.bytes,
                  sending ? "write" : "receive",
                  (sending ? send_timeout_ : receive_timeout_).count(), min_bytes_per_s_,
                  sending ? "sending" : "waiting for", what),
      ConnectionError::Kind::kTimedOut);
}

template <typename Call>
ssize_t Connection::call_surviving_signals(bool sending, const char* what, Call call) {
  check_message_deadline(sending, what);
  apply_deadline(sending, what);
  // A non-blocking socket (TLS under a deadline) waits in poll, bounded by the deadline.
  if (nonblocking_ || kiln::detail::interrupt_poll_installed())
    return call_interruptibly(sending, call);
  const auto started = Clock::now();
  ssize_t result = call();
  if (result >= 0 || errno != EINTR) return result;
  const auto per_call = sending ? send_timeout_ : receive_timeout_;
  bool shortened = false;  // the socket's limit is no longer the per-call one
  while (result < 0 && errno == EINTR) {
    const auto now = Clock::now();
    auto left = milliseconds::max();
    if (per_call.count() > 0) left = std::chrono::ceil<milliseconds>(per_call - (now - started));
    if (deadline_) left = std::min(left, std::chrono::ceil<milliseconds>(*deadline_ - now));
    if (left.count() <= 0) {
      errno = EAGAIN;  // what the call itself returns once its time limit passes
      result = -1;
      break;
    }
    if (left != milliseconds::max()) {
      set_socket_timeout(fd(), sending, left);
      shortened = true;
    }
    result = call();
  }
  // The next call gets the whole per-call limit again (with a deadline, apply_deadline sets the
  // limit before every call anyway).
  if (shortened && !deadline_) {
    const int err = errno;
    set_socket_timeout(fd(), sending, per_call);
    errno = err;
  }
  return result;
}

template <typename Call>
ssize_t Connection::call_interruptibly(bool sending, Call call) {
  // The time limit of one call: what is left of the per-call limit and of the deadline (which
  // apply_deadline also set as the socket's limit for calls that do block).
  const auto per_call = sending ? send_timeout_ : receive_timeout_;
  std::optional<Clock::time_point> end;
  if (per_call.count() > 0) end = Clock::now() + per_call;
  if (deadline_) end = end ? std::min(*end, *deadline_) : *deadline_;
  // Bytes TLS already decrypted are read without waiting; a plain send is tried first (it does
  // not block here, see transport_send) and waited for only when the socket takes nothing; on a
  // non-blocking socket every call is tried first (it cannot block).
  bool ready = nonblocking_ || (tls_ ? !sending && tls_->has_pending() : sending);
  while (true) {
    if (ready) {
      const ssize_t result = call();
      if (result >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        return result;
      }
    }
    kiln::detail::poll_interrupt();
    const auto now = Clock::now();
    if (end && now >= *end) {
      errno = EAGAIN;  // what the call itself returns once its time limit passes
      return -1;
    }
    auto slice_end = now + kiln::detail::kInterruptPollPeriod;
    if (end) slice_end = std::min(slice_end, *end);
    // TLS may have to write while reading (a key update's answer) or read while writing.
    const bool want_out = tls_ && nonblocking_ ? tls_->wants_write() : sending;
    const int revents = poll_until(fd(), want_out ? POLLOUT : POLLIN, slice_end);
    if (revents < 0) return -1;
    ready = revents != 0;
  }
}

ssize_t Connection::transport_recv(void* data, size_t n) {
  if (tls_) return tls_->recv(data, n);
  return ::recv(fd(), data, n, 0);
}

ssize_t Connection::transport_send(const iovec* iov, int count) {
  // With an interrupt poll (kiln/detail/cancellation.h), a send takes what the socket takes now
  // and the rest waits in call_interruptibly's slices: a blocking send of a large payload to a
  // slow peer would not return for as long as it takes.
  const bool interruptible = kiln::detail::interrupt_poll_installed();
  if (!tls_) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(count);
    return ::sendmsg(fd(), &msg, MSG_NOSIGNAL | (interruptible ? MSG_DONTWAIT : 0));
  }
  // TLS writes whole records on the blocking socket: pieces of kInterruptibleTlsBytes keep
  // each one short.
  constexpr size_t kInterruptibleTlsBytes = 256 * 1024;
  // Small pieces (a frame header and its body) go out as one TLS record: one system call and
  // 22 bytes of record overhead instead of one per piece.
  constexpr size_t kCoalesceBytes = 16 * 1024;
  size_t total = 0;
  int small = 0;
  while (small < count && total + iov[small].iov_len <= kCoalesceBytes) {
    total += iov[small].iov_len;
    ++small;
  }
  if (small <= 1) {
    return tls_->send(iov[0].iov_base, interruptible
                                           ? std::min(iov[0].iov_len, kInterruptibleTlsBytes)
                                           : iov[0].iov_len);
  }
  uint8_t joined[kCoalesceBytes];
  size_t at = 0;
  for (int i = 0; i < small; ++i) {
    if (iov[i].iov_len == 0) continue;  // an empty body or payload may have no buffer at all
    std::memcpy(joined + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  return tls_->send(joined, at);
}

void Connection::start_tls(const tls::Context& context, Clock::time_point deadline) {
  if (end_ != begin_) {
    throw ConnectionError(fmt::format("{} sent data before the TLS handshake", peer_));
  }
  auto limit = std::chrono::ceil<milliseconds>(deadline - Clock::now());
  limit = std::max(limit, milliseconds(1));
  // Each wait of the handshake is bounded by what is left of the deadline.
  set_socket_timeout(fd(), false, limit);
  set_socket_timeout(fd(), true, limit);
  tls_ = std::make_unique<tls::Session>(context, fd(), deadline);
  // Many records per socket read (uploads and downloads come in 16 KiB records): every read
  // here is a blocking one or tried before any poll, and a poll waits only when nothing waits
  // inside TLS (call_interruptibly: has_pending()).
  tls_->read_ahead();
  set_socket_timeout(fd(), false, receive_timeout_);
  set_socket_timeout(fd(), true, send_timeout_);
  set_nonblocking(deadline_.has_value());  // the rest of a deadline's exchange (set_deadline)
}

void Connection::fail_io(const char* op, const char* what, int err, bool eof) {
  if (err == EPROTO && tls_) {
    throw ConnectionError(fmt::format(
        "the encrypted channel with {} failed its integrity check while {} {} ({}): "
        "bytes were altered on the way (a relay or a faulty network); the session "
        "cannot go on",
        peer_, std::strcmp(op, "send") == 0 ? "sending" : "waiting for", what, tls_->error()));
  }
  if (eof || err == ECONNRESET || err == EPIPE) {
    throw ConnectionError(
        fmt::format("{} closed the connection while {} {}", peer_,
                    std::strcmp(op, "send") == 0 ? "sending" : "waiting for", what),
        ConnectionError::Kind::kClosed);
  }
  if ((err == EAGAIN || err == EWOULDBLOCK) && deadline_ && Clock::now() >= *deadline_) {
    throw deadline_error(std::strcmp(op, "send") == 0, what);
  }
  if (err == EAGAIN || err == EWOULDBLOCK) {
    const bool sending = std::strcmp(op, "send") == 0;
    throw ConnectionError(sending
                              ? fmt::format("{} took no data for {} ms while we were sending {}",
                                            peer_, send_timeout_.count(), what)
                              : fmt::format("{} sent nothing for {} ms while we waited for {}",
                                            peer_, receive_timeout_.count(), what),
                          ConnectionError::Kind::kTimedOut);
  }
  throw ConnectionError(
      fmt::format("{} to {} failed while {}: {}", op, peer_, what, std::strerror(err)));
}

void Connection::read_exact(void* dst, size_t n, const char* what) {
  auto* out = static_cast<uint8_t*>(dst);
  const size_t have = std::min(n, end_ - begin_);
  std::memcpy(out, buffer_.data() + begin_, have);
  begin_ += have;
  out += have;
  n -= have;
  while (n > 0) {
    if (n >= buffer_.size() / 2) {
      // Large reads go straight to their destination: no second copy of tensor data.
      const ssize_t got =
          call_surviving_signals(false, what, [&] { return transport_recv(out, n); });
      if (got <= 0) fail_io("recv", what, got == 0 ? 0 : errno, got == 0);
      out += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    const ssize_t got = call_surviving_signals(
        false, what, [&] { return transport_recv(buffer_.data(), buffer_.size()); });
    if (got <= 0) fail_io("recv", what, got == 0 ? 0 : errno, got == 0);
    begin_ = 0;
    end_ = static_cast<size_t>(got);
    const size_t take = std::min(n, end_);
    std::memcpy(out, buffer_.data(), take);
    begin_ = take;
    out += take;
    n -= take;
  }
}

void Connection::skip(uint64_t n, const char* what) {
  uint8_t scratch[4096];
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, sizeof(scratch)));
    read_exact(scratch, take, what);
    n -= take;
  }
}

void Connection::write_all(iovec* iov, int count) {
  if (writing_.left == 0) {
    // Not part of a frame being written: a message of its own.
    uint64_t total = 0;
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    writing_ = start_message(true, total);
  }
  while (count > 0) {
    ssize_t sent = -1;
    try {
      sent = call_surviving_signals(true, "a message",
                                    [&] { return transport_send(iov, std::min(count, 64)); });
    } catch (...) {
      writing_ = {};
      throw;
    }
    if (sent < 0) {
      writing_ = {};
      fail_io("send", "a message", errno, false);
    }
    if (sent == 0 && std::any_of(iov, iov + count, [](const iovec& v) { return v.iov_len > 0; })) {
      // TLS after the peer's close_notify: nothing more will be taken (retrying would spin).
      writing_ = {};
      fail_io("send", "a message", EPIPE, false);
    }
    writing_.left -= std::min<uint64_t>(writing_.left, static_cast<uint64_t>(sent));
    if (writing_.left == 0) writing_.deadline.reset();
    size_t left = static_cast<size_t>(sent);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
}

void Connection::write_all(const void* data, size_t n) {
  iovec iov{const_cast<void*>(data), n};
  write_all(&iov, 1);
}

Connection::FrameHeader Connection::read_frame_header(uint64_t max_length) {
  reading_ = {};  // between frames: the receive timeout alone
  uint8_t raw[wire::kFrameHeaderBytes];
  read_exact(raw, sizeof(raw), "a message header");
  FrameHeader h;
  std::memcpy(&h.length, raw, 8);
  std::memcpy(&h.code, raw + 8, 4);
  if (h.length < 4 || h.length > max_length) {
    throw wire::ProtocolError(
        fmt::format("{} sent a frame of {} bytes (code {}); frames are 4 to {} bytes", peer_,
                    h.length, h.code, max_length));
  }
  reading_ = start_message(false, h.body_length());
  return h;
}

void Connection::read_body(uint64_t n, std::vector<uint8_t>& body, const char* what) {
  if (n > wire::kMaxMessageBytes) {
    throw wire::ProtocolError(fmt::format("{}: a {} message of {} bytes exceeds the limit of {}",
                                          peer_, what, n, wire::kMaxMessageBytes));
  }
  // The body grows with the bytes that arrive: a 12-byte header announcing 64 MiB costs
  // nothing until the peer actually sends them.
  constexpr size_t kStep = 1 << 20;
  body.clear();
  while (body.size() < n) {
    const size_t have = body.size();
    const size_t take = static_cast<size_t>(std::min<uint64_t>(kStep, n - have));
    body.resize(have + take);
    read_exact(body.data() + have, take, what);
  }
}

void Connection::write_frame_start(wire::Code code, const std::vector<uint8_t>& body,
                                   uint64_t payload_bytes) {
  write_frame_parts(code, body, nullptr, 0, payload_bytes);
}

void Connection::write_frame(wire::Code code, const std::vector<uint8_t>& body, const void* payload,
                             uint64_t payload_bytes) {
  write_frame_parts(code, body, payload, payload_bytes, payload_bytes);
}

void Connection::write_frame_parts(wire::Code code, const std::vector<uint8_t>& body,
                                   const void* payload, uint64_t payload_sent,
                                   uint64_t payload_bytes) {
  uint8_t header[wire::kFrameHeaderBytes];
  const uint64_t length = 4 + body.size() + payload_bytes;
  writing_ = start_message(true, sizeof(header) + body.size() + payload_bytes);
  const auto code_value = static_cast<uint32_t>(code);
  std::memcpy(header, &length, 8);
  std::memcpy(header + 8, &code_value, 4);
  iovec iov[3] = {{header, sizeof(header)},
                  {const_cast<uint8_t*>(body.data()), body.size()},
                  {const_cast<void*>(payload), static_cast<size_t>(payload_sent)}};
  write_all(iov, 3);
}

void Connection::shutdown() noexcept { ::shutdown(fd(), SHUT_RDWR); }

void Connection::wait_for_close(std::chrono::milliseconds limit) noexcept {
  ::shutdown(fd(), SHUT_WR);
  const auto deadline = Clock::now() + limit;
  char scratch[4096];
  while (true) {
    try {
      if (poll_until_interruptible(fd(), POLLIN, deadline) <= 0) return;
    } catch (...) {
      return;  // Ctrl-C: stop waiting; the interrupt stays with its scope (cancellation.h)
    }
    const ssize_t got = ::recv(fd(), scratch, sizeof(scratch), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return;
  }
}

}  // namespace kiln::rpc
