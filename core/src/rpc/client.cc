// SPDX-License-Identifier: Apache-2.0
// RPC client sessions: kiln/rpc/session.h.
#include "rpc/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "ffi/error_object.h"
#include "kiln/detail/cancellation.h"
#include "kiln/logging.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
#include "rpc/handshake.h"
#include "rpc/remote_objects.h"

namespace kiln::rpc {

using wire::Code;
using wire::Tag;

namespace {
using Clock = std::chrono::steady_clock;

// The slowest rate at which the data of a message (a reply's body, a request's payload) may
// pass: the server's own bound on its clients (docs/rpc.md, Limits).
constexpr uint64_t kMinTransferBytesPerSecond = 1ull << 20;
// How long data may take beyond that rate where no session timeout bounds it: the server's
// default --write-timeout, the time it gives a client that does not read its reply.
constexpr std::chrono::seconds kTransferTimeout{60};
// Bytes a Download reply's buffer grows by at most at a time: it grows with the data that
// arrives, never to a length the server announced.
constexpr size_t kDownloadStepBytes = 1 << 20;

// `bytes` at kMinTransferBytesPerSecond, clamped to a century: a length from the network must
// not overflow the clock.
Clock::duration transfer_time(uint64_t bytes) {
  const double seconds =
      std::min(static_cast<double>(bytes) / static_cast<double>(kMinTransferBytesPerSecond),
               100.0 * 365 * 24 * 3600);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
}  // namespace

// ---- Impl ---------------------------------------------------------------------------------

RPCSession::Impl::~Impl() {
  close();
  if (runtime && index >= 0) runtime->detach_remote_session(index);
}

RPCSession::Impl::Exclusive::Exclusive(Impl& impl) : impl_(impl), lock_(impl.mu) {
  impl_.owner = std::this_thread::get_id();
  std::vector<uint64_t> frees;
  {
    std::lock_guard pending(impl_.pending_mu);
    frees.swap(impl_.pending_frees);
  }
  if (impl_.closed) return;
  for (uint64_t handle : frees) {
    try {
      impl_.send_free_handle(handle);
    } catch (const std::exception&) {
      return;  // the request that follows reports the broken connection
    }
  }
}

RPCSession::Impl::Exclusive::~Exclusive() { impl_.owner = std::thread::id(); }

void RPCSession::Impl::check_open_locked() const {
  if (closed) {
    throw RuntimeError(fmt::format("the RPC session with {} is closed{}", peer,
                                   closed_reason.empty() ? "" : ": " + closed_reason));
  }
}

void RPCSession::Impl::lost(const ConnectionError& e, const char* what) {
  closed = true;
  closed_reason = e.what();
  conn->shutdown();
  // Past the session timeout the server has ended the session; a reply that started but
  // trickles (or a timeout without a session timeout) is a faulty server: lost, not timed out.
  if (e.timed_out() && session_timeout_s > 0 && phase != Phase::kReplyBody) {
    throw RPCSessionTimeoutError(fmt::format(
        "the server {} did not answer {} within the session timeout of {} s (plus 5 s grace): {}",
        peer, what, session_timeout_s, e.what()));
  }
  throw ServerLostError(
      fmt::format("lost the connection to the RPC server {} during {}: {}", peer, what, e.what()));
}

void RPCSession::Impl::bound_request(uint64_t bytes) {
  phase = Phase::kRequest;
  const auto base =
      reply_limit.count() > 0 ? Clock::duration(reply_limit) : Clock::duration(kTransferTimeout);
  conn->set_deadline(
      Clock::now() + base + transfer_time(bytes),
      fmt::format("took a request of {} bytes too slowly (it must pass within {} "
                  "ms plus 1 s per MiB)",
                  bytes, std::chrono::ceil<std::chrono::milliseconds>(base).count()));
}

Connection::FrameHeader RPCSession::Impl::read_reply(const char* what) {
  const auto sent = Clock::now();
  phase = Phase::kReplyHeader;
  if (reply_limit.count() > 0) {
    conn->set_deadline(sent + reply_limit,
                       fmt::format("did not answer within {} ms (the session timeout plus 5 s "
                                   "grace), counted from the request",
                                   reply_limit.count()));
  } else {
    conn->set_deadline(std::nullopt);  // the call may run as long as it likes
  }
  const auto h = conn->read_frame_header(UINT64_MAX >> 1);
  // The whole reply by then: its header's time (or kTransferTimeout from the header) plus its
  // size at the minimum rate.
  phase = Phase::kReplyBody;
  const auto base = reply_limit.count() > 0 ? sent + reply_limit : Clock::now() + kTransferTimeout;
  conn->set_deadline(
      base + transfer_time(h.body_length()),
      fmt::format("sent its reply too slowly (a reply of {} bytes must arrive within {} plus 1 s "
                  "per MiB)",
                  h.body_length(),
                  reply_limit.count() > 0
                      ? fmt::format("{} ms of its request", reply_limit.count())
                      : fmt::format("{} s of its header", kTransferTimeout.count())));
  if (h.code == static_cast<uint32_t>(Code::kException)) {
    std::vector<uint8_t> body;
    conn->read_body(h.body_length(), body, "Exception");
    wire::Reader r(body.data(), body.size(), "Exception");
    const int32_t code = r.i32("code");
    std::string message = r.str("message");
    if (message.rfind(kTimeoutPrefix, 0) == 0) {
      closed = true;
      closed_reason = message;
      throw RPCSessionTimeoutError(message);
    }
    throw RPCError(message, code);
  }
  if (h.code != static_cast<uint32_t>(Code::kReturn) &&
      h.code != static_cast<uint32_t>(Code::kData)) {
    closed = true;
    closed_reason = fmt::format("unexpected reply code {} to {}", h.code, what);
    throw RPCError(fmt::format("{} answered {} with unknown reply code {}", peer, what, h.code), 0);
  }
  return h;
}

template <typename Body>
auto RPCSession::Impl::exchange(Code code, Body&& body) {
  Exclusive exclusive(*this);
  check_open_locked();
  if (wire::may_leave_device_work(code)) device_work.fetch_add(1);
  const char* what = wire::code_name(code);
  // Whatever bound the exchange set is gone once it ends (a FreeHandle or the Shutdown that
  // follows is not part of it).
  struct Unbound {
    Impl& impl;
    ~Unbound() {
      impl.phase = Phase::kIdle;
      if (!impl.closed) impl.conn->set_deadline(std::nullopt);
    }
  } unbound{*this};
  try {
    return body(what);
  } catch (const ConnectionError& e) {
    lost(e, what);
  } catch (const wire::ProtocolError& e) {
    closed = true;
    closed_reason = e.what();
    conn->shutdown();
    throw RPCError(e.what(), 0);
  } catch (const kiln::detail::InterruptedError& e) {
    // Ctrl-C in Python (kiln/detail/cancellation.h) between a request and its reply: the
    // connection is out of step, so the session ends (the server cancels what it was doing
    // once it sees the connection go).
    closed = true;
    closed_reason = fmt::format("{} was interrupted: {}", what, e.what());
    conn->shutdown();
    throw;
  }
}

std::vector<Any> RPCSession::Impl::request(Code code, const std::vector<uint8_t>& body,
                                           const void* payload, uint64_t payload_bytes) {
  return exchange(code, [&](const char* what) {
    bound_request(wire::kFrameHeaderBytes + body.size() + payload_bytes);
    try {
      conn->write_frame(code, body, payload, payload_bytes);
    } catch (const ConnectionError&) {
      // The server may have ended the session (timeout) and said why before closing: read it.
      read_reply(what);
      throw;
    }
    const auto h = read_reply(what);
    if (h.code != static_cast<uint32_t>(Code::kReturn)) {
      throw wire::ProtocolError(fmt::format("{} answered {} with a Data frame", peer, what));
    }
    conn->read_body(h.body_length(), reply, "Return");
    wire::Reader r(reply.data(), reply.size(), "Return");
    const uint32_t n = r.u32("count");
    if (n > wire::kMaxValues) r.fail("count", "too many values");
    std::vector<Any> values;
    values.reserve(n);
    for (uint32_t i = 0; i < n; ++i) values.push_back(decode(r));
    r.finish();
    return values;
  });
}

void RPCSession::Impl::request_data(Code code, const std::vector<uint8_t>& body, void* dst,
                                    uint64_t expected_bytes) {
  exchange(code, [&](const char* what) {
    bound_request(wire::kFrameHeaderBytes + body.size());
    conn->write_frame(code, body);
    const auto h = read_reply(what);
    if (h.code != static_cast<uint32_t>(Code::kData) || h.body_length() != expected_bytes) {
      throw wire::ProtocolError(fmt::format("{} answered {} with {} bytes; expected {}", peer, what,
                                            h.body_length(), expected_bytes));
    }
    conn->read_exact(dst, static_cast<size_t>(expected_bytes), "tensor data");
  });
}

std::string RPCSession::Impl::request_file(const std::string& remote_path) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str(remote_path);
  return exchange(Code::kDownload, [&](const char* what) {
    bound_request(wire::kFrameHeaderBytes + body.size());
    conn->write_frame(Code::kDownload, body);
    const auto h = read_reply(what);
    if (h.code != static_cast<uint32_t>(Code::kData)) {
      throw wire::ProtocolError(fmt::format("{} answered Download without data", peer));
    }
    // Grown with the bytes that arrive: a header announcing 4 GiB costs nothing until the
    // server sends them (a peer's length is a claim, not a size to allocate).
    const uint64_t total = h.body_length();
    std::string data;
    if (total > data.max_size()) {
      throw wire::ProtocolError(fmt::format(
          "{} announced a Download of {} bytes, more than a string holds", peer, total));
    }
    while (data.size() < total) {
      const size_t have = data.size();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(kDownloadStepBytes, total - have));
      data.resize(have + take);
      conn->read_exact(data.data() + have, take, "file data");
    }
    return data;
  });
}

void RPCSession::Impl::free_handle(uint64_t handle) noexcept {
  if (owner.load() == std::this_thread::get_id()) {
    std::lock_guard pending(pending_mu);
    pending_frees.push_back(handle);
    return;
  }
  // A request in flight on another thread holds `mu` for as long as the server takes: the
  // handle goes out before the next request instead of blocking this thread (maybe one that
  // holds Python's GIL, which the waiting thread needs to see Ctrl-C).
  std::unique_lock lock(mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    std::lock_guard pending(pending_mu);
    pending_frees.push_back(handle);
    return;
  }
  if (closed) return;
  try {
    send_free_handle(handle);
  } catch (const std::exception& e) {
    closed = true;
    closed_reason = e.what();
  }
}

void RPCSession::Impl::send_free_handle(uint64_t handle) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.u64(handle);
  conn->write_frame(Code::kFreeHandle, body);
}

RPCError RPCSession::Impl::malformed_reply(const char* what) const {
  return RPCError(fmt::format("{} sent a malformed reply to {}", peer, what), 0);
}

Function RPCSession::Impl::function_reply(Code code, const std::vector<uint8_t>& body) {
  auto values = request(code, body);
  if (values.size() != 1 || values[0].type_code() != KILN_TYPE_FUNCTION) {
    throw malformed_reply(wire::code_name(code));
  }
  return values[0].cast<Function>();
}

void RPCSession::Impl::close() noexcept {
  std::lock_guard lock(mu);
  if (closed || !conn) return;
  closed = true;
  closed_reason = "closed by the client";
  try {
    conn->write_frame(Code::kShutdown, {});
    // Returns once the server has ended the session: it frees the slot before it closes the
    // connection, so an immediate reconnect is not told "busy". Bounded for a server that
    // never answers.
    conn->wait_for_close(std::chrono::seconds(5));
  } catch (const std::exception&) {
  }
  conn->shutdown();
}

void RPCSession::Impl::encode(wire::Writer& w, const Any& v) {
  if (wire::encode_plain_value(w, v)) return;
  switch (v.type_code()) {
    case KILN_TYPE_DEVICE: {
      const Device d = v.cast<Device>();
      if (!d.is_remote()) {
        throw ValueError(
            fmt::format("cannot pass the local device {} to a remote function: use the session's "
                        "device(...)",
                        d.str()));
      }
      if (d.session_index() != index) {
        throw ValueError(fmt::format("cannot pass device {} of another RPC session", d.str()));
      }
      w.u8(static_cast<uint8_t>(Tag::kDevice));
      w.device(d.server_device());
      return;
    }
    case KILN_TYPE_TENSOR: {
      const Tensor t = v.cast<Tensor>();
      const Device d = t.device();
      if (!d.is_remote()) {
        throw ValueError(fmt::format(
            "cannot pass the local tensor {} to a remote function: copy it to a device of the "
            "session first",
            t.str()));
      }
      if (d.session_index() != index) {
        throw ValueError(fmt::format("cannot pass tensor {} of another RPC session", t.str()));
      }
      if (!t.is_contiguous()) throw ValueError("strided tensors cannot be passed over RPC");
      DLTensor header = *t.dl();
      header.device = d.server_device().to_dlpack();
      wire::write_tensor_header(w, reinterpret_cast<uint64_t>(t.dl()->data), header);
      return;
    }
    case KILN_TYPE_FUNCTION: {
      const auto* handle = remote_handle_of(v.cast<Function>());
      if (handle == nullptr) {
        throw ValueError(fmt::format(
            "cannot pass the local function '{}' to a remote function: only functions of the "
            "same session travel",
            v.cast<Function>().name()));
      }
      if (handle->session.get() != this) {
        throw ValueError("cannot pass a function of another RPC session");
      }
      w.u8(static_cast<uint8_t>(Tag::kFunction));
      w.u64(handle->handle);
      return;
    }
    case kTypeObject: {
      if (auto handle = v.as_object<RemoteHandle>()) {
        if (handle->session.get() != this) {
          throw ValueError("cannot pass an object of another RPC session");
        }
        w.u8(static_cast<uint8_t>(handle->is_module ? Tag::kModule : Tag::kObject));
        w.u64(handle->handle);
        return;
      }
      break;
    }
    default:
      break;
  }
  throw ValueError(fmt::format("a {} cannot be passed to a remote function", v.type_name()));
}

Any RPCSession::Impl::decode(wire::Reader& r) {
  const auto tag = static_cast<Tag>(r.u8("tag"));
  Any plain;
  if (wire::decode_plain_value(r, tag, plain)) return plain;
  switch (tag) {
    case Tag::kDevice:
      return Any(to_remote(r.device("device")));
    case Tag::kTensor: {
      const wire::TensorHeader h = wire::read_tensor_header(r);
      return Any(
          Tensor(wire::make_tensor(h, reinterpret_cast<void*>(h.handle), to_remote(h.device),
                                   make_object<RemoteHandle>(shared_from_this(), h.handle, false),
                                   backend_for(h.device.type))));
    }
    case Tag::kFunction:
      return Any(remote_function(shared_from_this(), r.u64("handle"), "remote function"));
    case Tag::kModule:
      return Any::object(make_object<RemoteHandle>(shared_from_this(), r.u64("handle"), true));
    case Tag::kObject:
      return Any::object(make_object<RemoteHandle>(shared_from_this(), r.u64("handle"), false));
    default:
      break;
  }
  r.fail("tag", fmt::format("unknown value tag {}", static_cast<int>(tag)));
}

// ---- connect ------------------------------------------------------------------------------

RPCSession connect(const std::string& host, int port, const ConnectOptions& options,
                   Runtime& runtime) {
  if (options.session_timeout_s < 0) throw ValueError("session_timeout must be >= 0");
  auto conn = Connection::connect(host, port, options.connect_timeout);
  // The handshake is bounded too: a peer that accepts and stays silent is not a server.
  conn->set_timeouts(options.connect_timeout, options.connect_timeout);
  // ...as a whole: a peer that drips bytes cannot stretch it past connect_timeout either.
  const auto handshake_deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  conn->set_deadline(handshake_deadline);
  auto impl = std::make_shared<RPCSession::Impl>();
  impl->peer = conn->peer();
  impl->session_timeout_s = options.session_timeout_s;
  try {
    impl->server_key = handshake::client(*conn, options, handshake_deadline);
  } catch (const ConnectionError& e) {
    throw RuntimeError(fmt::format("RPC handshake with {}:{} failed: {}", host, port, e.what()));
  }
  // A session with a timeout never waits much longer than it for a reply: the server ends
  // the session at the timeout and says so, so silence past it means the server is gone.
  const auto limit =
      options.session_timeout_s > 0
          ? std::chrono::milliseconds(static_cast<int64_t>(options.session_timeout_s * 1000) + 5000)
          : std::chrono::milliseconds(0);
  conn->set_deadline(std::nullopt);
  conn->set_timeouts(limit, limit);
  impl->reply_limit = limit;
  return attach_session(std::move(impl), std::move(conn), runtime);
}

RPCSession attach_session(std::shared_ptr<RPCSession::Impl> impl, std::unique_ptr<Connection> conn,
                          Runtime& runtime) {
  impl->conn = std::move(conn);
  impl->runtime.emplace(runtime);
  impl->index = runtime.attach_remote_session(
      [weak = std::weak_ptr<RPCSession::Impl>(impl)](int32_t server_type) {
        auto session = weak.lock();
        return session ? session->backend_for(server_type) : Ref<DeviceBackend>();
      });
  log(LogLevel::kDebug, "rpc",
      fmt::format("session {} with {} ({})", impl->index, impl->peer, impl->server_key));
  return RPCSession(std::move(impl));
}

// ---- RPCSession ---------------------------------------------------------------------------

namespace {
RPCSession::Impl& require(const std::shared_ptr<RPCSession::Impl>& impl) {
  if (!impl) throw RuntimeError("this RPCSession is not connected");
  return *impl;
}

std::vector<uint8_t> body_with_string(const std::string& s) {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str(s);
  return body;
}

// The code of device type `type` ("cuda", or one a plugin of the session's runtime named).
int32_t device_code(const RPCSession::Impl& impl, const std::string& type) {
  if (auto code = impl.runtime->device_types().find(type)) return *code;
  throw ValueError(fmt::format("unknown device type '{}'", type));
}
}  // namespace

Device RPCSession::device(int32_t type, int32_t id) const {
  auto& impl = require(impl_);
  if (type < 0 || type >= kRemoteDeviceMask) {
    throw ValueError(fmt::format("device type {} is not a server device type", type));
  }
  return impl.to_remote({type, id});
}

Device RPCSession::device(const std::string& type, int32_t id) const {
  return device(device_code(require(impl_), type), id);
}

int32_t RPCSession::device_count(const std::string& type, std::string* why_none) const {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.i32(device_code(require(impl_), type));
  auto values = require(impl_).request(Code::kDeviceCount, body);
  if (values.size() != 2) throw require(impl_).malformed_reply("DeviceCount");
  if (why_none != nullptr) *why_none = values[1].cast<std::string>();
  return static_cast<int32_t>(values[0].cast<int64_t>());
}

void RPCSession::upload(const std::filesystem::path& local_file,
                        const std::string& remote_path) const {
  std::ifstream in(local_file, std::ios::binary);
  if (!in) throw NotFoundError(fmt::format("cannot read '{}' to upload it", local_file.string()));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  upload_bytes(data, remote_path);
}

void RPCSession::upload_bytes(const std::string& data, const std::string& remote_path) const {
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str(remote_path);
  w.u64(data.size());
  require(impl_).request(Code::kUpload, body, data.data(), data.size());
}

std::string RPCSession::download(const std::string& remote_path) const {
  return require(impl_).request_file(remote_path);
}

void RPCSession::remove(const std::string& remote_path) const {
  require(impl_).request(Code::kRemove, body_with_string(remote_path));
}

std::vector<std::string> RPCSession::listdir(const std::string& remote_path) const {
  auto values = require(impl_).request(Code::kListDir, body_with_string(remote_path));
  std::vector<std::string> names;
  names.reserve(values.size());
  for (const Any& v : values) names.push_back(v.cast<std::string>());
  return names;
}

RemoteModule RPCSession::load_module(const std::string& remote_path) const {
  auto& impl = require(impl_);
  auto values = impl.request(Code::kLoadModule, body_with_string(remote_path));
  auto obj = std::make_shared<RemoteModule::Obj>();
  if (values.size() == 2) obj->handle = values[0].as_object<RemoteHandle>();
  if (!obj->handle) throw impl.malformed_reply("LoadModule");
  obj->entry_name = values[1].cast<std::string>();
  return RemoteModule(std::move(obj));
}

Function RPCSession::get_function(const std::string& name) const {
  return require(impl_).function_reply(Code::kGetGlobalFunc, body_with_string(name));
}

void RPCSession::close() const {
  if (impl_) impl_->close();
}

bool RPCSession::closed() const {
  if (!impl_) return true;
  std::lock_guard lock(impl_->mu);
  return impl_->closed;
}

const std::string& RPCSession::peer() const { return require(impl_).peer; }
const std::string& RPCSession::server_key() const { return require(impl_).server_key; }
int32_t RPCSession::index() const { return require(impl_).index; }

// ---- RemoteModule -------------------------------------------------------------------------

Function RemoteModule::get_function(const std::string& name) const {
  if (!obj_) throw RuntimeError("RemoteModule is empty");
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.u64(obj_->handle->handle);
  w.str(name);
  return obj_->handle->session->function_reply(Code::kModuleGetFunction, body);
}

const std::string& RemoteModule::entry_name() const {
  if (!obj_) throw RuntimeError("RemoteModule is empty");
  return obj_->entry_name;
}

uint64_t RemoteModule::handle() const { return obj_ ? obj_->handle->handle : 0; }

RPCSession RemoteModule::session() const {
  if (!obj_) throw RuntimeError("RemoteModule is empty");
  return RPCSession(obj_->handle->session);
}

RemoteModule RemoteModule::from_value(const Any& value) {
  const Ref<RemoteHandle> handle = value.as_object<RemoteHandle>();
  if (!handle || !handle->is_module) {
    throw TypeError(fmt::format("expected a remote module, got {}", value.type_name()));
  }
  auto obj = std::make_shared<Obj>();
  obj->handle = handle;
  return RemoteModule(std::move(obj));
}

RemoteTimeEvaluator RemoteModule::time_evaluator(const std::string& name, Device device,
                                                 TimeEvaluatorOptions options) const {
  options.validate();
  if (!device.is_remote() || device.session_index() != obj_->handle->session->index) {
    throw ValueError(fmt::format("time_evaluator: {} is not a device of this module's RPC session",
                                 device.str()));
  }
  Function f = get_function(name);
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.u64(remote_handle_of(f)->handle);
  w.device(device.server_device());
  encode_evaluator_options(w, options);
  return RemoteTimeEvaluator(obj_->handle->session->function_reply(Code::kTimeEvaluator, body));
}

BenchmarkResult RemoteTimeEvaluator::operator()(const std::vector<Any>& args) const {
  const Any result = remote_.call_packed(args);
  return benchmark_result_from_wire(result.cast<std::string>());
}

}  // namespace kiln::rpc
