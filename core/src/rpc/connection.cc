#include "rpc/connection.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <unistd.h>
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <cerrno>
#include <cstring>

namespace kiln::rpc {

namespace {
constexpr size_t kBufferBytes = 64 * 1024;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}
}  // namespace

Connection::Connection(boost::asio::ip::tcp::socket socket, std::string peer)
    : peer_(std::move(peer)), buffer_(kBufferBytes) {
  boost::system::error_code ec;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ec);
  socket.non_blocking(false, ec);
  fd_ = socket.release(ec);
  if (ec) fd_ = -1;
}

std::unique_ptr<Connection> Connection::connect(const std::string& host, int port,
                                                std::chrono::milliseconds timeout) {
  namespace asio = boost::asio;
  auto io = std::make_unique<asio::io_context>();
  asio::ip::tcp::resolver resolver(*io);
  asio::ip::tcp::socket socket(*io);
  boost::system::error_code result = asio::error::timed_out;
  bool done = false;
  resolver.async_resolve(
      host, std::to_string(port),
      [&](const boost::system::error_code& ec, asio::ip::tcp::resolver::results_type results) {
        if (ec) {
          result = ec;
          done = true;
          return;
        }
        asio::async_connect(
            socket, results,
            [&](const boost::system::error_code& ec2, const asio::ip::tcp::endpoint&) {
              result = ec2;
              done = true;
            });
      });
  io->run_for(timeout);
  if (!done) {
    throw ConnectionError(
        fmt::format("cannot connect to {}:{}: no answer within {} ms", host, port, timeout.count()),
        ConnectionError::Kind::kTimedOut);
  }
  if (result) {
    throw ConnectionError(fmt::format("cannot connect to {}:{}: {}", host, port, result.message()),
                          result == asio::error::connection_refused
                              ? ConnectionError::Kind::kRefused
                              : ConnectionError::Kind::kFailed);
  }
  return std::make_unique<Connection>(std::move(socket), fmt::format("{}:{}", host, port));
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

void Connection::set_timeouts(std::chrono::milliseconds receive, std::chrono::milliseconds send) {
  const timeval rtv = to_timeval(receive);
  const timeval stv = to_timeval(send);
  ::setsockopt(fd(), SOL_SOCKET, SO_RCVTIMEO, &rtv, sizeof(rtv));
  ::setsockopt(fd(), SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof(stv));
  receive_timeout_ = receive;
  send_timeout_ = send;
}

void Connection::set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) {
  deadline_ = deadline;
  if (!deadline_) set_timeouts(receive_timeout_, send_timeout_);  // the per-call limits again
}

void Connection::apply_deadline(bool sending, const char* what) {
  if (!deadline_) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      *deadline_ - std::chrono::steady_clock::now());
  if (left.count() <= 0) {
    throw ConnectionError(
        fmt::format("{} did not complete the exchange within its deadline ({} {})", peer_,
                    sending ? "sending" : "waiting for", what),
        ConnectionError::Kind::kTimedOut);
  }
  auto bound = left;
  const auto per_call = sending ? send_timeout_ : receive_timeout_;
  if (per_call.count() > 0) bound = std::min(bound, per_call);
  const timeval tv = to_timeval(std::max(bound, std::chrono::milliseconds(1)));
  ::setsockopt(fd(), SOL_SOCKET, sending ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, sizeof(tv));
}

void Connection::fail_io(const char* op, const char* what, int err, bool eof) {
  if (eof || err == ECONNRESET || err == EPIPE) {
    throw ConnectionError(
        fmt::format("{} closed the connection while {} {}", peer_,
                    std::strcmp(op, "send") == 0 ? "sending" : "waiting for", what),
        ConnectionError::Kind::kClosed);
  }
  if ((err == EAGAIN || err == EWOULDBLOCK) && deadline_ &&
      std::chrono::steady_clock::now() >= *deadline_) {
    throw ConnectionError(
        fmt::format("{} did not complete the exchange within its deadline ({} {})", peer_,
                    std::strcmp(op, "send") == 0 ? "sending" : "waiting for", what),
        ConnectionError::Kind::kTimedOut);
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
    apply_deadline(false, what);
    if (n >= buffer_.size() / 2) {
      // Large reads go straight to their destination: no second copy of tensor data.
      const ssize_t got = ::recv(fd(), out, n, 0);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        fail_io("recv", what, got == 0 ? 0 : errno, got == 0);
      }
      out += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    const ssize_t got = ::recv(fd(), buffer_.data(), buffer_.size(), 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      fail_io("recv", what, got == 0 ? 0 : errno, got == 0);
    }
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
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(count, 64));
    apply_deadline(true, "a message");
    const ssize_t sent = ::sendmsg(fd(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      fail_io("send", "a message", errno, false);
    }
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
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char scratch[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    const ssize_t got = ::recv(fd(), scratch, sizeof(scratch), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return;
  }
}

}  // namespace kiln::rpc
