// SPDX-License-Identifier: Apache-2.0
// TLS 1.3 with an external pre-shared key derived from a token: the authenticated, encrypted
// channel of RPC sessions and of the tracker when a token is set (docs/rpc.md, "Tokens").
//
// OpenSSL does the protocol; this file only chooses its parameters:
// - TLS 1.3 only, no certificates, key exchange psk_dhe_ke (the PSK authenticates, a fresh
//   ECDHE share gives forward secrecy), no session tickets, no early data;
// - cipher suites whose hash is SHA-256 (the PSK is bound to it);
// - the PSK is scrypt(token) with a per-purpose salt, so the session token and the tracker
//   token never share a key, and an offline guess at a weak token costs an scrypt evaluation.
// A peer without the key cannot complete the handshake; a relay can only forward ciphertext,
// and any byte it alters fails the record's integrity check.
#ifndef KILN_SRC_RPC_TLS_PSK_H_
#define KILN_SRC_RPC_TLS_PSK_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace kiln::rpc::tls {

// What a key is for; each has its own salt and PSK identity.
enum class Purpose {
  kSession,  // client <-> rpc-server (ServerOptions::token, ConnectOptions::token)
  kTracker,  // anyone <-> tracker (the tracker token)
};

// The shortest token accepted, in characters: shorter ones are guessable (docs/rpc.md says a
// token must carry at least 128 bits; `kiln rpc-token` makes 256).
inline constexpr size_t kMinTokenChars = 16;

// Throws ValueError naming `what` ("--token", "remote.token_file", ...) when `token` is
// shorter than kMinTokenChars or holds a NUL byte.
void check_token_strength(const std::string& token, const std::string& what);

// A fresh random token of 256 bits, URL-safe base64 without padding (43 characters).
std::string generate_token();

// An SSL_CTX for one side of one purpose, keyed by `token`. Owns the context and the key.
// Thread-safe to share between connections. Deriving the key costs one scrypt (~50 ms, 16 MiB):
// make one per process side and token, not one per connection.
class Context {
 public:
  enum class Side { kClient, kServer };
  // The key derived from a token: what a Context made from it again needs, no scrypt.
  using KeyBytes = std::array<unsigned char, 32>;
  // Throws RuntimeError when OpenSSL refuses the parameters (it says why).
  Context(Side side, Purpose purpose, const std::string& token);
  // The same from a key another Context derived (key()): a session process gets its server's
  // key this way, never the token, and pays no derivation. Throws as the other does.
  Context(Side side, Purpose purpose, const KeyBytes& key);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  SSL_CTX* native() const { return ctx_; }
  Side side() const { return side_; }
  // The derived key (secret: it opens this purpose's channels as the token does).
  const KeyBytes& key() const;

  struct Key;  // the derived key and identity (tls_psk.cc)

 private:
  // Makes the SSL_CTX once key_ holds the key.
  void configure(Purpose purpose);
  Side side_;
  SSL_CTX* ctx_ = nullptr;
  std::unique_ptr<Key> key_;
};

// A client Context for `token`, shared by every connection of this process with that purpose
// and token (the derivation runs once). Throws as Context does.
std::shared_ptr<const Context> client_context(Purpose purpose, const std::string& token);

// One TLS connection over a connected, blocking socket it does not own.
class Session {
 public:
  // Runs the handshake on `fd`, non-blocking for its duration (its mode is restored on every
  // way out): each wait is a poll that ends at `deadline`, so a peer dripping bytes cannot
  // stretch it. Throws HandshakeError when the peer does not hold the key, closed the
  // connection, or the deadline passed.
  Session(const Context& context, int fd, std::chrono::steady_clock::time_point deadline);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // What one read or write came to: every return of OpenSSL is one of these outcomes, so a
  // caller cannot mistake a peer that closed for "try again" (issue 37, item 1).
  struct Io {
    enum class Outcome {
      kData,        // `bytes` (> 0) were read or taken
      kWouldBlock,  // nothing now: wait for the socket (POLLOUT if wants_write, else POLLIN)
      kPeerClosed,  // the peer sent close_notify, or closed the connection without one; for a
                    // write: the peer can no longer receive
      kFailed,      // the connection failed: `error` is the errno (EPROTO: a record failed its
                    // integrity check or the protocol broke, error() says how)
    };
    Outcome outcome = Outcome::kFailed;
    size_t bytes = 0;
    bool wants_write = false;  // kWouldBlock: TLS waits for the socket to take data
    int error = 0;  // kWouldBlock: EAGAIN (time limit or non-blocking) or EINTR; kFailed: errno
  };
  // One read into `data` (up to `n` bytes) / one write of up to `n` bytes of `data`.
  // A write of more than one record's worth (kRecordBytes) encrypts up to kWriteBatchBytes of
  // it into a buffer and sends the records with one system call, not one per 16 KiB record
  // (issue 37, item 9). Its kData comes once the socket took all of them: a kWouldBlock
  // (wants_write) may come after OpenSSL took the bytes, and the caller calls write() again,
  // as OpenSSL's own retries require, with the same bytes; that call sends the rest of the
  // records and reports the bytes they carry.
  Io read(void* data, size_t n);
  Io write(const void* data, size_t n);
  // The most plaintext one TLS record carries.
  static constexpr size_t kRecordBytes = size_t{16} << 10;
  // The ciphertext one batched write collects before it sends (write()).
  static constexpr size_t kWriteBatchBytes = size_t{512} << 10;
  // read/write shaped like recv/send on a blocking socket (Connection uses them): the byte
  // count; recv returns 0 once the peer closed; otherwise -1 with errno EAGAIN (time limit),
  // EINTR (a signal: call again), EPIPE (send: the peer closed), or EPROTO (error() says how).
  // send never returns 0.
  ssize_t recv(void* data, size_t n);
  ssize_t send(const void* data, size_t n);
  // Bytes decrypted and waiting to be read.
  size_t pending() const;
  // Whether any bytes wait inside TLS: decrypted ones, or records read ahead from the socket
  // and not decrypted yet (read_ahead()). A reader must not wait in poll() while they do.
  bool has_pending() const;
  // One socket read takes as many records as the read buffer holds (both sides of a session
  // have kReadBufferBytes), not one record in two reads: a reader must read until kWouldBlock
  // before it polls, or ask has_pending() (records read ahead are not in pending()); Connection
  // reads so. On from the handshake (the constructor turns it on); this says so again.
  void read_ahead();
  // The read buffer of both sides of a session (Purpose::kSession).
  static constexpr size_t kReadBufferBytes = size_t{256} << 10;
  // Whether the last recv/send that returned EAGAIN waits for the socket to take data (on a
  // non-blocking socket: poll for POLLOUT, not POLLIN): records of a batched write not sent
  // yet count.
  bool wants_write() const;
  // What went wrong on the last EPROTO, in OpenSSL's words.
  const std::string& error() const { return error_; }
  // Sends close_notify (best effort, never blocks for long), after the records of a batched
  // write that are still unsent.
  void close_notify() noexcept;

  struct Batch;  // the records of a batched write (tls_psk.cc)

 private:
  // The outcome of an SSL_read_ex / SSL_write_ex that returned `result` (not 1).
  Io finish_io(int result);
  // Sends what is left of the batch: kData (bytes: the plaintext they carry) once all went,
  // else kWouldBlock / kPeerClosed / kFailed as write() says.
  Io flush_batch();
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  std::unique_ptr<Batch> batch_;
  std::string error_;
};

// The handshake failed. kWrongKey: the peer does not hold the key (a wrong token, a peer
// without one, an impostor, bytes altered on the way); kTimedOut / kClosed prove nothing
// either way; kNotTls: the peer does not speak TLS at all.
class HandshakeError : public std::exception {
 public:
  enum class Kind { kWrongKey, kTimedOut, kClosed, kNotTls };
  HandshakeError(Kind kind, std::string message) : kind_(kind), message_(std::move(message)) {}
  Kind kind() const { return kind_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  Kind kind_;
  std::string message_;
};

// What the server side's check of a client's first flight came to (check_first_flight).
enum class FirstFlight {
  kVerified,   // its PSK binder verified: the client holds the key (or replays a flight of one)
  kUndecided,  // the handshake goes on without telling (a HelloRetryRequest): the full
               // handshake decides
};

// Server side, before the real handshake runs elsewhere (a session process): reads the client's
// first flight on the connected socket `fd` without consuming it (MSG_PEEK, so the real
// handshake reads it again), waiting for the rest of it until `deadline`, and runs the server's
// side of the handshake on a copy, so that a client without the key is told apart without
// handing its connection to anyone. The copy stops once the binder verified, before any key
// exchange work (~25 us against ~135 us for the whole first flight). The socket's bytes and mode
// are left as they were. Throws HandshakeError as Session does (kWrongKey: the binder did not
// verify).
FirstFlight check_first_flight(const Context& context, int fd,
                               std::chrono::steady_clock::time_point deadline);

// Whether `first_byte`, the first byte a client sent, starts a TLS handshake record.
inline bool starts_tls(uint8_t first_byte) { return first_byte == 0x16; }

}  // namespace kiln::rpc::tls

#endif  // KILN_SRC_RPC_TLS_PSK_H_
