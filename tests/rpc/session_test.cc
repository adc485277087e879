// SPDX-License-Identifier: Apache-2.0
// RPC sessions against an in-process server on loopback (SPEC.md §4.8): values, tensors,
// files and their sandbox, remote modules and the remote time evaluator, tokens, timeouts
// and hostile peers.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace session_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

ServerOptions loopback(std::string key = "test") {
  ServerOptions o;
  o.port = 0;
  o.key = std::move(key);
  o.test_hooks.test_functions = true;
  return o;
}

// The single session directory of `server`, once there is one.
fs::path session_dir(const Server& server) {
  for (const auto& e : fs::directory_iterator(server.work_dir())) return e.path();
  return {};
}

// Whether every session directory of `server` is gone within 5 s.
bool wait_until_empty(const Server& server) {
  return kiln::test::wait_until([&] { return fs::is_empty(server.work_dir()); },
                                std::chrono::seconds(5));
}

std::vector<float> iota(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale;
  return v;
}

TEST(RpcSession, EchoesValuesAndCallsGlobals) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  EXPECT_EQ(s.server_key(), "server:test");
  Function echo = s.get_function("testing.echo");
  EXPECT_EQ(echo(int64_t{-7}).cast<int64_t>(), -7);
  EXPECT_EQ(echo(int64_t{1} << 62).cast<int64_t>(), int64_t{1} << 62);
  EXPECT_DOUBLE_EQ(echo(2.5).cast<double>(), 2.5);
  EXPECT_EQ(echo(true).cast<bool>(), true);
  EXPECT_EQ(echo(std::string("hello")).cast<std::string>(), "hello");
  const std::string raw("a\0b\xff", 4);
  const Any bytes = echo(Any::bytes(raw));
  EXPECT_EQ(bytes.type_code(), KILN_TYPE_BYTES);
  EXPECT_EQ(bytes.cast<std::string>(), raw);
  EXPECT_EQ(echo(DataType::Float(16)).cast<DataType>(), DataType::Float(16));
  EXPECT_EQ(echo(Any::shape({2, 3})).cast<std::vector<int64_t>>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(echo(s.cpu()).cast<Device>(), s.cpu()) << "devices keep the session's mask";
  EXPECT_TRUE(echo().is_none());
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{10}).cast<int64_t>(), 11);
  EXPECT_EQ(s.get_function("rpc.test.strcat")(std::string("abc"), int64_t{11}).cast<std::string>(),
            "abc:11");
  EXPECT_TRUE(s.get_function("rpc.test.nop")().is_none()) << "zero-argument calls work";
  // Remote functions travel back as arguments of the same session.
  EXPECT_EQ(echo(echo).cast<Function>()(int64_t{3}).cast<int64_t>(), 3);
}

TEST(RpcSession, ServesOnAHostName) {
  ServerOptions options = loopback();
  options.host = "localhost";
  Server server(options);
  RPCSession s = connect("localhost", server.port(), "test");
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  options.host = "no-such-host.invalid";
  EXPECT_THAT([&] { Server unresolvable(options); },
              ::testing::ThrowsMessage<RuntimeError>(
                  HasSubstr("cannot resolve host 'no-such-host.invalid'")));
}

TEST(RpcSession, DeviceQueries) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  std::string why;
  EXPECT_GE(s.device_count("cpu", &why), 1);
  EXPECT_EQ(s.device_count("vulkan", &why), 0);
  EXPECT_THAT(why, HasSubstr("no backend for device type"));
  // The remote device's backend answers through the session.
  Ref<DeviceBackend> backend = Runtime::global().backend(s.cpu().type);
  EXPECT_GE(backend->device_count(), 1);
  const auto attributes = backend->attributes(0);
  EXPECT_FALSE(attributes.empty());
  EXPECT_EQ(Device(s.cpu()).server_device(), Device::cpu());
  EXPECT_THROW(s.device("no-such-type"), ValueError);
}

TEST(RpcSession, RemoteErrorsCarryTheRemoteMessage) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  try {
    s.get_function("rpc.test.raise")(std::string("boom 42"));
    FAIL() << "expected an RPCError";
  } catch (const RPCError& e) {
    EXPECT_THAT(e.what(), HasSubstr("RPCError: Error caught from RPC call:\n"));
    EXPECT_THAT(e.remote_message(), HasSubstr("boom 42"));
  }
  EXPECT_THROW(s.get_function("no.such.function"), RPCError);
  EXPECT_THROW(s.get_function("rpc.test.addone")(std::string("x")), RPCError);
  // The session is still usable after remote errors.
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(RpcSession, LocalValuesThatCannotTravelAreRefused) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  Function echo = s.get_function("testing.echo");
  Tensor local = Tensor::empty({4}, DataType::Float(32));
  EXPECT_THAT([&] { echo(local); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("local tensor")));
  EXPECT_THROW(echo(Device::cpu()), ValueError);
  Function local_f = Function::from_typed("f", [](int64_t x) { return x; });
  EXPECT_THROW(echo(local_f), ValueError);
}

TEST(RpcSession, LargeTensorRoundTrip) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  const std::vector<float> host = iota(5041 * 720, 0.5f);
  Tensor remote = Tensor::empty({5041, 720}, DataType::Float(32), s.cpu());
  EXPECT_EQ(remote.device().str(), fmt::format("remote{}:cpu:0", s.index()));
  remote.copy_from(host.data(), host.size() * sizeof(float));
  Tensor back = remote.to_host();
  ASSERT_EQ(back.numel(), 5041 * 720);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size() * sizeof(float)), 0);
  // A remote tensor returned by a remote function is usable like one allocated here.
  Tensor echoed = s.get_function("testing.echo")(remote).cast<Tensor>();
  EXPECT_EQ(echoed.device(), s.cpu());
  EXPECT_EQ(echoed.to_host().host_span<float>()[7], 3.5f);
  // Copies on the remote device.
  Tensor copy = Tensor::empty({5041, 720}, DataType::Float(32), s.cpu());
  copy.copy_from(remote);
  EXPECT_EQ(copy.to_host().host_span<float>()[5041 * 720 - 1], (5041 * 720 - 1) * 0.5f);
}

TEST(RpcSession, AllocationsAreBoundedByTheSessionsMemoryLimit) {
  ServerOptions o = loopback();
  o.max_session_memory = 1 << 20;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  Tensor half = Tensor::empty({128 * 1024}, DataType::Float(32), s.cpu());  // 512 KiB
  try {
    Tensor::empty({1 << 20}, DataType::Float(32), s.cpu());
    FAIL() << "expected an RPCError";
  } catch (const RPCError& e) {
    EXPECT_THAT(e.remote_message(), ::testing::StartsWith("allocating 4194304 bytes would exceed "
                                                          "the session's memory limit of 1048576"));
  }
  EXPECT_THROW(Tensor::empty({int64_t{1} << 62}, DataType::UInt(8), s.cpu()), RPCError);
  half = Tensor();  // freed: its bytes count no more
  Tensor again = Tensor::empty({192 * 1024}, DataType::Float(32), s.cpu());  // 768 KiB
  EXPECT_EQ(again.numel(), 192 * 1024);
}

TEST(RpcSession, FilesStayInTheSessionsWorkDirectory) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  s.upload_bytes(data, "dat.bin");
  s.upload_bytes("x", "sub/dir/y.txt");
  EXPECT_EQ(s.download("dat.bin"), data);
  EXPECT_EQ(s.listdir(), (std::vector<std::string>{"dat.bin", "sub/"}));
  EXPECT_EQ(s.listdir("sub/dir"), (std::vector<std::string>{"y.txt"}));
  s.remove("dat.bin");
  s.remove("does-not-exist");
  s.remove("");  // the work directory itself: a no-op, as in the reference
  EXPECT_EQ(s.listdir(), (std::vector<std::string>{"sub/"}));
  EXPECT_THAT([&] { s.download("missing"); },
              ::testing::ThrowsMessage<RPCError>(HasSubstr("missing")));

  // Path traversal.
  for (const std::string bad : {"../escape", "a/../../escape", "/etc/passwd", "/tmp/x"}) {
    EXPECT_THROW(s.upload_bytes("x", bad), RPCError) << bad;
    EXPECT_THROW(s.download(bad), RPCError) << bad;
    EXPECT_THROW(s.remove(bad), RPCError) << bad;
    EXPECT_THROW(s.listdir(bad), RPCError) << bad;
  }
  // A symlink out of the work directory (planted behind the server's back) is refused.
  const fs::path dir = session_dir(server);
  ASSERT_FALSE(dir.empty());
  fs::create_directory_symlink("/etc", dir / "etc");
  EXPECT_THAT([&] { s.download("etc/hostname"); },
              ::testing::ThrowsMessage<RPCError>(HasSubstr("leads out")));
  EXPECT_THROW(s.upload_bytes("x", "etc/evil"), RPCError);
  EXPECT_FALSE(fs::exists("/etc/evil"));
  s.close();
  EXPECT_TRUE(wait_until_empty(server));
}

TEST(RpcSession, RemoteModuleCallAndTimeEvaluator) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "test");
  s.upload(kKernels + "/libvector_add.so", "libvector_add.so");
  RemoteModule m = s.load_module("libvector_add.so");
  const int64_t n = 1000;
  Tensor a = Tensor::empty({n}, DataType::Float(32), s.cpu());
  Tensor b = Tensor::empty({n}, DataType::Float(32), s.cpu());
  Tensor out = Tensor::empty({n}, DataType::Float(32), s.cpu());
  const auto av = iota(n);
  const std::vector<float> bv(n, 2.0f);
  a.copy_from(av.data(), n * sizeof(float));
  b.copy_from(bv.data(), n * sizeof(float));
  m["vector_add"](a, b, out, 0.25);
  Tensor host = out.to_host();
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(host.host_span<float>()[i], i + 0.5f);

  TimeEvaluatorOptions options;
  options.number = 5;
  options.repeat = 3;
  BenchmarkResult r = m.time_evaluator("vector_add", s.cpu(), options)({a, b, out, 0.25});
  EXPECT_EQ(r.results().size(), 3u);
  for (double t : r.results()) EXPECT_GT(t, 0.0);
  EXPECT_FALSE(r.timer.empty());
  // The evaluator lives on the server: like a local one, its number grows to min_repeat_ms and
  // stays grown across calls.
  options.min_repeat_ms = 20;
  RemoteTimeEvaluator grown = m.time_evaluator("vector_add", s.cpu(), options);
  const BenchmarkResult first = grown({a, b, out, 0.25});
  const BenchmarkResult second = grown({a, b, out, 0.25});
  EXPECT_GT(first.numbers.back(), 5);
  EXPECT_GE(second.numbers.front(), first.numbers.back());
  EXPECT_THROW(m.get_function("no_such_kernel"), RPCError);
  EXPECT_THROW(s.load_module("missing.so"), RPCError);
}

TEST(RpcSession, TokenIsRequiredAndNeverSent) {
  ServerOptions o = loopback();
  o.token = "s3cret-token-0123456789";
  Server server(o);
  ConnectOptions c;
  c.key = "test";
  EXPECT_THAT([&] { connect("127.0.0.1", server.port(), c); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("requires a token")));
  c.token = "wrong-token-0123456789";
  EXPECT_THAT([&] { connect("127.0.0.1", server.port(), c); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("could not prove the channel")));
  c.token = "s3cret-token-0123456789";
  RPCSession s = connect("127.0.0.1", server.port(), c);
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(RpcSession, WrongKeyAndBusyServerAreRefused) {
  ServerOptions o = loopback("board");
  o.max_sessions = 1;
  Server server(o);
  EXPECT_THAT([&] { connect("127.0.0.1", server.port(), "other"); },
              ::testing::ThrowsMessage<RuntimeError>(HasSubstr("does not match")));
  RPCSession first = connect("127.0.0.1", server.port(), "board");
  // A flood of connections beyond --max-sessions: each is refused cleanly as busy.
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT([&] { connect("127.0.0.1", server.port(), "board"); },
                ::testing::ThrowsMessage<RuntimeError>(HasSubstr("busy")));
  }
  EXPECT_EQ(first.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  first.close();
  ASSERT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 0; }, 5s));
  RPCSession second = connect("127.0.0.1", server.port(), "board");
  EXPECT_EQ(second.get_function("rpc.test.addone")(int64_t{2}).cast<int64_t>(), 3);
}

TEST(RpcSession, SessionTimeoutWhileIdleAndDuringACall) {
  Server server(loopback());
  RPCSession idle = connect("127.0.0.1", server.port(), "test", 1);
  // Well past the 1 s: a loaded machine (a sanitizer build, two tests at once) may start the
  // session's worker late, and its clock with it.
  std::this_thread::sleep_for(3s);
  EXPECT_THROW(idle.get_function("rpc.test.addone"), RPCSessionTimeoutError);
  EXPECT_TRUE(idle.closed());

  RPCSession busy = connect("127.0.0.1", server.port(), "test", 1);
  Function sleep = busy.get_function("rpc.test.sleep");
  const auto start = std::chrono::steady_clock::now();
  try {
    sleep(8.0);
    FAIL() << "expected RPCSessionTimeoutError";
  } catch (const RPCSessionTimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("RPCSessionTimeoutError: Your 1s session has expired"));
  }
  // Not a speed bound: a client that learned only when the call returned would take 8 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s) << "the client learns at the timeout";
}

TEST(RpcSession, TheServersTimeoutCapsTheClients) {
  ServerOptions o = loopback();
  o.session_timeout_s = 0.5;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), "test");  // asks for no limit
  // Well past the 0.5 s: a session process in a sanitizer build on a loaded machine may learn
  // of its deadline late (the fresh-Debian run's ASan pass saw it alive at 1.2 s).
  std::this_thread::sleep_for(3s);
  EXPECT_THROW(s.get_function("rpc.test.addone"), RPCSessionTimeoutError);
}

// ---- hostile and broken peers ----

std::unique_ptr<Connection> raw_session(int port, const std::string& key = "test") {
  return test::raw_session("127.0.0.1", port, key);
}

// Whether the server closed `conn` (reads EOF or reset within 5 s).
bool closed_by_server(Connection& conn) {
  try {
    char c;
    conn.read_exact(&c, 1, "anything");
    return false;
  } catch (const ConnectionError& e) {
    return e.closed();
  }
}

TEST(RpcServerFaults, GarbageAndTruncatedFramesEndOnlyThatSession) {
  ServerOptions o = loopback();
  o.max_sessions = 4;
  Server server(o);
  RPCSession good = connect("127.0.0.1", server.port(), "test");

  // An absurd frame length.
  auto a = raw_session(server.port());
  const uint8_t huge[12] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 3, 0, 0, 0};
  a->write_all(huge, sizeof(huge));
  EXPECT_TRUE(closed_by_server(*a));
  // An unknown request code.
  auto b = raw_session(server.port());
  b->write_frame(static_cast<wire::Code>(77), {1, 2, 3});
  EXPECT_TRUE(closed_by_server(*b));
  // A call of a handle that was never handed out: an error reply, the session goes on.
  auto c = raw_session(server.port());
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.u64(12345);
  w.u32(0);
  c->write_frame(wire::Code::kCallFunc, body);
  const auto reply = c->read_frame_header(1 << 20);
  EXPECT_EQ(reply.code, static_cast<uint32_t>(wire::Code::kException));
  c->skip(reply.body_length(), "reply");
  // An echo whose argument count lies.
  body.clear();
  w.str("testing.echo");
  c->write_frame(wire::Code::kGetGlobalFunc, body);
  const auto got = c->read_frame_header(1 << 20);
  ASSERT_EQ(got.code, static_cast<uint32_t>(wire::Code::kReturn));
  std::vector<uint8_t> ret;
  c->read_body(got.body_length(), ret, "reply");
  uint64_t echo_handle = 0;
  std::memcpy(&echo_handle, ret.data() + 5, 8);  // count, tag, handle
  body.clear();
  w.u64(echo_handle);
  w.u32(1000);
  c->write_frame(wire::Code::kCallFunc, body);
  EXPECT_TRUE(closed_by_server(*c));
  // A string length beyond the message.
  auto d = raw_session(server.port());
  body.clear();
  w.u64(uint64_t{1} << 40);
  d->write_frame(wire::Code::kGetGlobalFunc, body);
  EXPECT_TRUE(closed_by_server(*d));
  // Garbage instead of a hello.
  auto e = Connection::connect("127.0.0.1", server.port(), 5s);
  e->set_timeouts(5s, 5s);
  e->write_all("GET / HTTP/1.1\r\n\r\n", 18);
  EXPECT_TRUE(closed_by_server(*e));
  // A header cut short, then silence: the session ends when the client goes.
  auto f = raw_session(server.port());
  f->write_all(huge, 5);
  f.reset();

  EXPECT_EQ(good.get_function("rpc.test.addone")(int64_t{41}).cast<int64_t>(), 42);
  EXPECT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 1; }, 5s));
}

TEST(RpcServerFaults, ATvmClientIsToldItIsTalkingToKiln) {
  Server server(loopback());
  auto conn = Connection::connect("127.0.0.1", server.port(), 5s);
  conn->set_timeouts(5s, 5s);
  const int32_t tvm_magic = 0xFF271;
  conn->write_all(&tvm_magic, 4);
  int32_t reply = 0;
  conn->read_exact(&reply, 4, "reply");
  EXPECT_EQ(reply, 0xFF273) << "TVM's RPC_CODE_MISMATCH";
}

TEST(RpcServerFaults, VersionMismatchIsExplained) {
  Server server(loopback());
  auto conn = Connection::connect("127.0.0.1", server.port(), 5s);
  conn->set_timeouts(5s, 5s);
  std::vector<uint8_t> hello(wire::kMagic, wire::kMagic + 8);
  wire::Writer w(hello);
  w.u16(99);
  w.u16(0);
  w.u32(11);
  w.raw("client:test", 11);
  w.f64(0);
  conn->write_all(hello.data(), hello.size());
  char magic[8];
  conn->read_exact(magic, 8, "magic");
  uint16_t version = 0, status = 0;
  uint32_t len = 0;
  conn->read_exact(&version, 2, "version");
  conn->read_exact(&status, 2, "status");
  conn->read_exact(&len, 4, "len");
  std::string message(len, '\0');
  conn->read_exact(message.data(), len, "message");
  EXPECT_EQ(status, static_cast<uint16_t>(wire::HelloStatus::kVersionMismatch));
  EXPECT_THAT(message, HasSubstr(fmt::format("version {}", wire::kProtocolVersion)));
  EXPECT_THAT(message, HasSubstr("99"));
}

TEST(RpcServerFaults, ClientVanishingMidUploadFreesTheSession) {
  Server server(loopback());
  auto conn = raw_session(server.port());
  ASSERT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 1; }, 5s));
  test::start_upload(*conn, 64 << 20, 1 << 20);
  conn.reset();  // gone mid-upload
  EXPECT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 0; }, 5s));
  EXPECT_TRUE(kiln::test::wait_until([&] { return fs::is_empty(server.work_dir()); }, 5s))
      << "the session's files went with it";
}

}  // namespace session_test
}  // namespace kiln::rpc
