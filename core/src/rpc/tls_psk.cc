// SPDX-License-Identifier: Apache-2.0
#include "rpc/tls_psk.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/error.h"
#include "rpc/socket_io.h"

namespace kiln::rpc::tls {

namespace {

// TLS_AES_128_GCM_SHA256: the cipher the PSK session names; its hash is the PSK's.
constexpr unsigned char kPskCipherId[2] = {0x13, 0x01};
constexpr char kCipherSuites[] = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
// scrypt cost: 16 MiB and about 50 ms per derivation on a 2020s core.
constexpr uint64_t kScryptN = 1u << 14;
constexpr uint64_t kScryptR = 8;
constexpr uint64_t kScryptP = 1;
constexpr uint64_t kScryptMaxMem = 64ull << 20;

const char* salt_of(Purpose p) {
  return p == Purpose::kSession ? "kiln-rpc-session-psk-v1" : "kiln-tracker-psk-v1";
}
const char* identity_of(Purpose p) {
  return p == Purpose::kSession ? "kiln-rpc-session" : "kiln-tracker";
}

// OpenSSL's queued errors as one line (and clears the queue).
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

int context_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

}  // namespace

struct Session::Batch {
  std::vector<uint8_t> records;  // ciphertext, whole records, in the order OpenSSL wrote them
  size_t sent = 0;               // bytes of `records` the socket took
  size_t carried = 0;            // plaintext bytes the records carry (write() reports them)
  bool collecting = false;       // a batched write runs: the BIO appends, never sends
  bool unsent() const { return sent < records.size(); }
};

struct Context::Key {
  Context::KeyBytes bytes{};
  std::string identity;
  ~Key() { OPENSSL_cleanse(bytes.data(), bytes.size()); }
};

namespace {

const Context::Key* key_of(SSL* ssl) {
  return static_cast<const Context::Key*>(
      SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), context_index()));
}

// An SSL_SESSION that carries the PSK (TLS 1.3, SHA-256 cipher); nullptr on failure.
SSL_SESSION* psk_session(SSL* ssl, const Context::Key& key) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipherId);
  if (cipher == nullptr) return nullptr;
  SSL_SESSION* session = SSL_SESSION_new();
  if (session == nullptr) return nullptr;
  if (SSL_SESSION_set1_master_key(session, key.bytes.data(), key.bytes.size()) != 1 ||
      SSL_SESSION_set_cipher(session, cipher) != 1 ||
      SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(session);
    return nullptr;
  }
  return session;
}

int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len,
                SSL_SESSION** session) {
  const Context::Key* key = key_of(ssl);
  *session = nullptr;
  if (key == nullptr) return 0;
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipherId);
  // Called again after a HelloRetryRequest with the negotiated hash: offer the PSK only for
  // SHA-256, the hash it is bound to.
  if (md != nullptr && cipher != nullptr && md != SSL_CIPHER_get_handshake_digest(cipher)) {
    return 1;
  }
  *session = psk_session(ssl, *key);
  if (*session == nullptr) return 0;
  *id = reinterpret_cast<const unsigned char*>(key->identity.data());
  *id_len = key->identity.size();
  return 1;
}

int find_session(SSL* ssl, const unsigned char* identity, size_t identity_len,
                 SSL_SESSION** session) {
  const Context::Key* key = key_of(ssl);
  *session = nullptr;
  if (key == nullptr) return 0;
  // An unknown identity: no PSK, and with no certificate the handshake fails.
  if (identity_len != key->identity.size() ||
      std::memcmp(identity, key->identity.data(), identity_len) != 0) {
    return 1;
  }
  *session = psk_session(ssl, *key);
  return *session != nullptr ? 1 : 0;
}

// check_first_flight's mark on the SSL it checks with (its app data): set once the client's
// PSK binder verified.
struct FlightCheck {
  bool verified = false;
};

// The server's SNI callback, which OpenSSL runs for every ClientHello once all its extensions
// were parsed: after the PSK binder verified (a wrong binder fails before it), before any key
// exchange work (the server's ECDHE share, the handshake secrets, the encrypted flight). On a
// check_first_flight copy it stops the handshake there, having marked the check verified;
// elsewhere it leaves the handshake alone (as no callback would).
int stop_once_verified(SSL* ssl, int* /*alert*/, void* /*arg*/) {
  auto* check = static_cast<FlightCheck*>(SSL_get_app_data(ssl));
  if (check == nullptr || SSL_session_reused(ssl) != 1) return SSL_TLSEXT_ERR_NOACK;
  check->verified = true;
  return SSL_TLSEXT_ERR_ALERT_FATAL;  // the alert goes to the copy's memory BIO, never out
}

// OpenSSL's socket BIO writes with write(2): an alert sent to a peer that reset the connection
// raised SIGPIPE and killed a process that does not ignore it (a client handshaking with a
// tracker or server without a token). The same BIO, sending with MSG_NOSIGNAL.
// A session's BIO carries its Session::Batch (app data): while a batched write collects, or
// while records of one are unsent, what OpenSSL writes (records, an alert, a key update's
// answer) is appended there, so that the records leave in order, in few system calls.
int send_without_sigpipe(BIO* bio, const char* data, int size) {
  if (auto* batch = static_cast<Session::Batch*>(BIO_get_app_data(bio));
      batch != nullptr && (batch->collecting || batch->unsent())) {
    batch->records.insert(batch->records.end(), data, data + size);
    BIO_clear_retry_flags(bio);
    return size;
  }
  const int fd = static_cast<int>(BIO_get_fd(bio, nullptr));
  errno = 0;
  const auto sent = static_cast<int>(::send(fd, data, static_cast<size_t>(size), MSG_NOSIGNAL));
  BIO_clear_retry_flags(bio);
  if (sent <= 0 && BIO_sock_should_retry(sent)) BIO_set_retry_write(bio);
  return sent;
}

// Null when OpenSSL refuses to make it.
BIO_METHOD* socket_without_sigpipe() {
  static BIO_METHOD* const method = [] {
    const BIO_METHOD* socket = BIO_s_socket();
    BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOCKET, "socket without SIGPIPE");
    if (m == nullptr || BIO_meth_set_write(m, send_without_sigpipe) != 1 ||
        BIO_meth_set_read(m, BIO_meth_get_read(socket)) != 1 ||
        BIO_meth_set_puts(m, BIO_meth_get_puts(socket)) != 1 ||
        BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(socket)) != 1 ||
        BIO_meth_set_create(m, BIO_meth_get_create(socket)) != 1 ||
        BIO_meth_set_destroy(m, BIO_meth_get_destroy(socket)) != 1) {
      BIO_meth_free(m);
      return static_cast<BIO_METHOD*>(nullptr);
    }
    return m;
  }();
  return method;
}

// The HandshakeError for a handshake that ended with SSL_get_error `err` (errno `saved_errno`);
// takes OpenSSL's queued errors.
HandshakeError handshake_error(int err, int saved_errno) {
  HandshakeError::Kind kind = HandshakeError::Kind::kWrongKey;
  std::string why;
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    kind = HandshakeError::Kind::kTimedOut;
    why = "no answer in time";
  } else if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN) {
    kind = HandshakeError::Kind::kClosed;
    why = saved_errno != 0 ? std::strerror(saved_errno) : "the peer closed the connection";
  } else {
    why = openssl_errors();
    // OpenSSL 3 reports a peer that closed mid-handshake as an SSL error: it proves nothing
    // about the key.
    if (why.find("unexpected eof") != std::string::npos) {
      kind = HandshakeError::Kind::kClosed;
    } else if (why.find("wrong version number") != std::string::npos ||
               why.find("packet length too long") != std::string::npos ||
               why.find("http request") != std::string::npos) {
      kind = HandshakeError::Kind::kNotTls;
    }
  }
  ERR_clear_error();
  return HandshakeError(kind, why);
}

}  // namespace

void check_token_strength(const std::string& token, const std::string& what) {
  if (token.find('\0') != std::string::npos) {
    throw ValueError(fmt::format("{} holds a NUL byte", what));
  }
  if (token.size() < kMinTokenChars) {
    throw ValueError(fmt::format(
        "{} has {} characters; a token needs at least {} (128 bits or more: anyone who sees one "
        "handshake can test guesses offline). Make one with `kiln rpc-token`",
        what, token.size(), kMinTokenChars));
  }
}

std::string generate_token() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    throw RuntimeError(fmt::format("cannot draw random bytes: {}", openssl_errors()));
  }
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : raw) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  OPENSSL_cleanse(raw, sizeof(raw));
  return out;
}

Context::Context(Side side, Purpose purpose, const std::string& token)
    : side_(side), key_(std::make_unique<Key>()) {
  const char* salt = salt_of(purpose);
  if (EVP_PBE_scrypt(token.data(), token.size(), reinterpret_cast<const unsigned char*>(salt),
                     std::strlen(salt), kScryptN, kScryptR, kScryptP, kScryptMaxMem,
                     key_->bytes.data(), key_->bytes.size()) != 1) {
    throw RuntimeError(
        fmt::format("cannot derive the TLS key from the token: {}", openssl_errors()));
  }
  configure(purpose);
}

Context::Context(Side side, Purpose purpose, const KeyBytes& key)
    : side_(side), key_(std::make_unique<Key>()) {
  key_->bytes = key;
  configure(purpose);
}

const Context::KeyBytes& Context::key() const { return key_->bytes; }

void Context::configure(Purpose purpose) {
  const Side side = side_;
  key_->identity = identity_of(purpose);
  ctx_ = SSL_CTX_new(side == Side::kClient ? TLS_client_method() : TLS_server_method());
  if (ctx_ == nullptr) {
    throw RuntimeError(fmt::format("cannot create a TLS context: {}", openssl_errors()));
  }
  const bool ok = SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION) == 1 &&
                  SSL_CTX_set_max_proto_version(ctx_, TLS1_3_VERSION) == 1 &&
                  SSL_CTX_set_ciphersuites(ctx_, kCipherSuites) == 1 &&
                  SSL_CTX_set_num_tickets(ctx_, 0) == 1 &&
                  SSL_CTX_set_ex_data(ctx_, context_index(), key_.get()) == 1;
  if (!ok) {
    const std::string why = openssl_errors();
    SSL_CTX_free(ctx_);
    throw RuntimeError(fmt::format("cannot configure TLS 1.3 with a pre-shared key: {}", why));
  }
  SSL_CTX_set_options(ctx_, SSL_OP_NO_TICKET);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);
  // Both sides of a session read ahead (Connection::start_tls): their read buffers, allocated
  // by the handshake, must be large enough then to take many records per socket read.
  if (purpose == Purpose::kSession) {
    SSL_CTX_set_default_read_buffer_len(ctx_, Session::kReadBufferBytes);
  }
  if (side == Side::kClient) {
    SSL_CTX_set_psk_use_session_callback(ctx_, use_session);
  } else {
    SSL_CTX_set_psk_find_session_callback(ctx_, find_session);
    SSL_CTX_set_tlsext_servername_callback(ctx_, stop_once_verified);
  }
}

Context::~Context() { SSL_CTX_free(ctx_); }

std::shared_ptr<const Context> client_context(Purpose purpose, const std::string& token) {
  // A few entries: a process talks to few token holders; the oldest goes when it is full.
  constexpr size_t kMaxEntries = 8;
  struct Entry {
    Purpose purpose;
    std::array<uint8_t, 32> token_hash;
    std::shared_ptr<const Context> context;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  std::array<uint8_t, 32> hash{};
  unsigned int hash_len = 0;
  if (EVP_Digest(token.data(), token.size(), hash.data(), &hash_len, EVP_sha256(), nullptr) != 1) {
    throw RuntimeError(fmt::format("cannot hash the token: {}", openssl_errors()));
  }
  {
    std::lock_guard lock(mu);
    for (const Entry& e : cache) {
      if (e.purpose == purpose && CRYPTO_memcmp(e.token_hash.data(), hash.data(), 32) == 0) {
        return e.context;
      }
    }
  }
  auto context = std::make_shared<const Context>(Context::Side::kClient, purpose, token);
  std::lock_guard lock(mu);
  if (cache.size() >= kMaxEntries) cache.erase(cache.begin());
  cache.push_back(Entry{purpose, hash, context});
  return context;
}

Session::Session(const Context& context, int fd, std::chrono::steady_clock::time_point deadline) {
  ssl_ = SSL_new(context.native());
  BIO_METHOD* const method = socket_without_sigpipe();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (ssl_ == nullptr || bio == nullptr) {
    const std::string why = openssl_errors();
    BIO_free(bio);
    SSL_free(ssl_);
    throw HandshakeError(HandshakeError::Kind::kClosed, fmt::format("cannot start TLS: {}", why));
  }
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  fd_ = fd;
  batch_ = std::make_unique<Batch>();
  BIO_set_app_data(bio, batch_.get());
  SSL_set_bio(ssl_, bio, bio);  // ssl_ owns it
  // The handshake's records too come many per socket read (a flight is 4 records: 8 reads
  // without read-ahead). Every byte on the socket from here on is TLS.
  SSL_set_read_ahead(ssl_, 1);
  const bool client = context.side() == Context::Side::kClient;
  // The handshake runs on a non-blocking socket and every wait is a poll bounded by the
  // deadline: on a blocking one OpenSSL reads a record one socket read per piece, each with the
  // socket's whole timeout, so a peer dripping a byte now and then held the handshake forever
  // (issue 37, item 4). The socket's mode is restored however the handshake ends.
  const int flags = ::fcntl(fd, F_GETFL);
  const bool made_nonblocking =
      flags >= 0 && (flags & O_NONBLOCK) == 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  const auto restore_mode = [&] {
    if (made_nonblocking) ::fcntl(fd, F_SETFL, flags);
  };
  while (true) {
    ERR_clear_error();
    errno = 0;
    const int r = client ? SSL_connect(ssl_) : SSL_accept(ssl_);
    if (r == 1) {
      restore_mode();
      return;
    }
    int err = SSL_get_error(ssl_, r);
    int saved_errno = errno;
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      int ready = 0;
      try {
        // Ctrl-C in Python ends a client's wait (kiln/detail/cancellation.h).
        ready =
            poll_until_interruptible(fd, err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, deadline);
      } catch (...) {
        restore_mode();
        SSL_free(ssl_);
        ssl_ = nullptr;
        throw;
      }
      if (ready > 0) continue;  // readable, writable, or an error the next call reports
      if (ready < 0) {
        saved_errno = errno;
        err = SSL_ERROR_SYSCALL;
      }
    }
    restore_mode();
    SSL_free(ssl_);
    ssl_ = nullptr;
    throw handshake_error(err, saved_errno);
  }
}

Session::~Session() { SSL_free(ssl_); }

FirstFlight check_first_flight(const Context& context, int fd,
                               std::chrono::steady_clock::time_point deadline) {
  // The largest first flight looked at: far above a real ClientHello (a few hundred bytes),
  // and above what OpenSSL accepts as one, so a larger one fails as it would anyway.
  constexpr size_t kMaxFlightBytes = size_t{256} << 10;
  SSL* ssl = SSL_new(context.native());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl == nullptr || in == nullptr || out == nullptr) {
    const std::string why = openssl_errors();
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl);
    throw HandshakeError(HandshakeError::Kind::kClosed, fmt::format("cannot start TLS: {}", why));
  }
  SSL_set_bio(ssl, in, out);  // ssl owns both
  SSL_set_accept_state(ssl);
  FlightCheck check;
  SSL_set_app_data(ssl, &check);
  struct Cleanup {
    SSL* ssl;
    int fd;
    ~Cleanup() {
      SSL_free(ssl);
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
    }
  } cleanup{ssl, fd};
  std::vector<uint8_t> flight(kMaxFlightBytes);
  size_t fed = 0;  // bytes of the flight given to OpenSSL so far
  while (true) {
    const ssize_t n = ::recv(fd, flight.data(), flight.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
      throw HandshakeError(HandshakeError::Kind::kClosed, "the peer closed the connection");
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      throw HandshakeError(HandshakeError::Kind::kClosed, std::strerror(errno));
    }
    if (n > 0 && static_cast<size_t>(n) > fed) {
      BIO_write(in, flight.data() + fed, static_cast<int>(static_cast<size_t>(n) - fed));
      fed = static_cast<size_t>(n);
      ERR_clear_error();
      errno = 0;
      const int r = SSL_accept(ssl);
      if (check.verified) {
        ERR_clear_error();  // the stop's own alert
        return FirstFlight::kVerified;
      }
      const int err = SSL_get_error(ssl, r);
      // Not stopped (a HelloRetryRequest, an unknown identity): the handshake's own outcome.
      if (r == 1 || (err == SSL_ERROR_WANT_READ && BIO_ctrl_pending(out) > 0)) {
        // It answered the first flight: with the PSK accepted (the binder verified), or with a
        // HelloRetryRequest, which has not looked at the binder yet.
        return SSL_session_reused(ssl) == 1 ? FirstFlight::kVerified : FirstFlight::kUndecided;
      }
      if (err != SSL_ERROR_WANT_READ) throw handshake_error(err, errno);
    } else if (n > 0) {
      // Readable, and nothing new: the peer closed after part of its flight.
      throw HandshakeError(HandshakeError::Kind::kClosed,
                           "the peer closed the connection before its first flight was whole");
    }
    if (fed >= flight.size()) {
      throw HandshakeError(HandshakeError::Kind::kNotTls,
                           fmt::format("a first flight of more than {} bytes", flight.size()));
    }
    // Wait for more than what is there: the socket polls readable only then (or at its end).
    const int more = static_cast<int>(fed + 1);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &more, sizeof(more));
    const int ready = poll_until(fd, POLLIN, deadline);
    if (ready == 0) throw HandshakeError(HandshakeError::Kind::kTimedOut, "no answer in time");
    if (ready < 0) throw HandshakeError(HandshakeError::Kind::kClosed, std::strerror(errno));
  }
}

Session::Io Session::finish_io(int result) {
  const int saved_errno = errno;
  const int err = SSL_get_error(ssl_, result);
  Io io;
  switch (err) {
    case SSL_ERROR_ZERO_RETURN:
      // close_notify received; for a write, also a socket error after it (OpenSSL reports
      // that as ZERO_RETURN too): either way the peer is done.
      io.outcome = Io::Outcome::kPeerClosed;
      return io;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      io.outcome = Io::Outcome::kWouldBlock;
      io.wants_write = err == SSL_ERROR_WANT_WRITE;
      io.error = saved_errno == EINTR ? EINTR : EAGAIN;
      return io;
    case SSL_ERROR_SYSCALL:
      ERR_clear_error();
      if (saved_errno == 0 || saved_errno == EPIPE || saved_errno == ECONNRESET) {
        io.outcome = Io::Outcome::kPeerClosed;  // closed without close_notify, or reset
        return io;
      }
      io.outcome = Io::Outcome::kFailed;
      io.error = saved_errno;
      return io;
    default:
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
      // OpenSSL 3 reports a TCP close without close_notify as an error: it is a close, not
      // an altered record.
      if (const unsigned long e = ERR_peek_error();
          ERR_GET_LIB(e) == ERR_LIB_SSL &&
          ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ERR_clear_error();
        io.outcome = Io::Outcome::kPeerClosed;
        return io;
      }
#endif
      error_ = openssl_errors();
      io.outcome = Io::Outcome::kFailed;
      io.error = EPROTO;
      return io;
  }
}

Session::Io Session::read(void* data, size_t n) {
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  if (SSL_read_ex(ssl_, data, n, &got) == 1) return Io{Io::Outcome::kData, got, false, 0};
  return finish_io(0);
}

Session::Io Session::write(const void* data, size_t n) {
  Batch& batch = *batch_;
  if (batch.unsent()) {
    // The rest of the last batch (the caller's retry), or records OpenSSL wrote after it.
    const Io io = flush_batch();
    if (io.outcome != Io::Outcome::kData || io.bytes > 0) return io;
  }
  if (n <= kRecordBytes) {
    // One record: OpenSSL sends it itself (a call's request or reply: no copy, one send).
    ERR_clear_error();
    errno = 0;
    size_t sent = 0;
    if (SSL_write_ex(ssl_, data, n, &sent) == 1) return Io{Io::Outcome::kData, sent, false, 0};
    return finish_io(0);
  }
  // Many records: encrypted into the batch (OpenSSL writes one record per call: partial-write
  // mode), then sent together. OpenSSL encrypts each record in its own buffer, so collecting
  // costs a copy of the ciphertext; a send per 16 KiB record cost more (issue 37, item 9).
  constexpr size_t kRecordOverhead = 256;  // header, tag, content type: 22 bytes in TLS 1.3
  if (batch.records.capacity() < kWriteBatchBytes + kRecordOverhead) {
    batch.records.reserve(kWriteBatchBytes + kRecordOverhead);
  }
  batch.records.clear();
  batch.sent = 0;
  batch.collecting = true;
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t taken = 0;
  std::optional<Io> failed;
  while (taken < n && batch.records.size() + kRecordBytes + kRecordOverhead <= kWriteBatchBytes) {
    ERR_clear_error();
    errno = 0;
    size_t took = 0;
    if (SSL_write_ex(ssl_, bytes + taken, n - taken, &took) != 1) {
      failed = finish_io(0);
      break;
    }
    taken += took;
  }
  batch.collecting = false;
  batch.carried = taken;
  if (taken == 0 && failed) {
    if (batch.unsent()) (void)flush_batch();  // an alert OpenSSL wrote on the way out
    batch.records.clear();
    batch.sent = 0;
    return *failed;
  }
  // A failure after some records: those go; the next write meets it again.
  return flush_batch();
}

Session::Io Session::flush_batch() {
  Batch& batch = *batch_;
  while (batch.unsent()) {
    const ssize_t sent = ::send(fd_, batch.records.data() + batch.sent,
                                batch.records.size() - batch.sent, MSG_NOSIGNAL);
    Io io;
    if (sent > 0) {
      batch.sent += static_cast<size_t>(sent);
      if (!batch.unsent()) break;
      // The socket took part of the records: its time limit passed after some went, a signal
      // came, or (non-blocking) it is full. The caller calls again, as after a signal: within
      // what is left of its per-call limit, after a poll if it polls. So the whole batch must
      // pass within one per-call limit, and a reader that takes a byte now and then cannot hold
      // a write past the checks of its message's deadline between calls.
      io.outcome = Io::Outcome::kWouldBlock;
      io.wants_write = true;
      io.error = EINTR;
      return io;
    }
    const int err = sent == 0 ? EPIPE : errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
      // A time limit, a non-blocking socket or a signal: the caller waits and writes again.
      io.outcome = Io::Outcome::kWouldBlock;
      io.wants_write = true;
      io.error = err == EINTR ? EINTR : EAGAIN;
    } else if (err == EPIPE || err == ECONNRESET) {
      io.outcome = Io::Outcome::kPeerClosed;
    } else {
      io.outcome = Io::Outcome::kFailed;
      io.error = err;
    }
    return io;
  }
  const size_t carried = batch.carried;
  batch.records.clear();
  batch.sent = 0;
  batch.carried = 0;
  return Io{Io::Outcome::kData, carried, false, 0};
}

ssize_t Session::recv(void* data, size_t n) {
  const Io io = read(data, n);
  switch (io.outcome) {
    case Io::Outcome::kData:
      return static_cast<ssize_t>(io.bytes);
    case Io::Outcome::kPeerClosed:
      return 0;
    default:
      errno = io.error;
      return -1;
  }
}

ssize_t Session::send(const void* data, size_t n) {
  const Io io = write(data, n);
  switch (io.outcome) {
    case Io::Outcome::kData:
      return static_cast<ssize_t>(io.bytes);
    case Io::Outcome::kPeerClosed:
      errno = EPIPE;  // a send to a blocking socket never returns 0: callers would spin on it
      return -1;
    default:
      errno = io.error;
      return -1;
  }
}

size_t Session::pending() const { return static_cast<size_t>(SSL_pending(ssl_)); }

bool Session::has_pending() const { return SSL_has_pending(ssl_) == 1; }

void Session::read_ahead() { SSL_set_read_ahead(ssl_, 1); }

bool Session::wants_write() const { return batch_->unsent() || SSL_want_write(ssl_) != 0; }

void Session::close_notify() noexcept {
  if (ssl_ == nullptr) return;
  // Records of a batched write first, then the alert (appended to them if they did not all
  // go): whatever the socket takes now, without waiting.
  const auto send_unsent = [this] {
    Batch& batch = *batch_;
    while (batch.unsent()) {
      const ssize_t sent = ::send(fd_, batch.records.data() + batch.sent,
                                  batch.records.size() - batch.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent <= 0) return;
      batch.sent += static_cast<size_t>(sent);
    }
    batch.records.clear();
    batch.sent = 0;
  };
  send_unsent();
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
  send_unsent();
}

}  // namespace kiln::rpc::tls
