// SPDX-License-Identifier: Apache-2.0
// RPC client sessions (namespace kiln::rpc): connect to a `kiln rpc-server`, allocate and
// copy remote tensors, exchange files with the session's work directory, load modules and
// call their functions, and run the time evaluator on the server so that only its results
// cross the wire. The protocol is docs/rpc-protocol.md; behaviour follows SPEC.md §4.
#ifndef KILN_RPC_SESSION_H_
#define KILN_RPC_SESSION_H_

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/rpc/rpc_error.h"

namespace kiln {
class Runtime;
}  // namespace kiln

namespace kiln::rpc {

// How a client connects.
struct ConnectOptions {
  std::string key;               // the server's key, or a tracker's match key
  double session_timeout_s = 0;  // 0: unlimited (the server may impose its own)
  std::string token;             // the shared token when the server requires one
  std::chrono::milliseconds connect_timeout{10000};
};

class RemoteModule;
class RemoteTimeEvaluator;

// One session with an RPC server. Copies share the session; the connection closes when the
// last copy, remote tensor and remote function is gone, or at close(). Thread-safe: calls
// are serialised (one request in flight per session).
class RPCSession {
 public:
  RPCSession() = default;

  // This session's view of the server's device `type`:`id`: a Device whose type carries
  // the session mask (type + (index + 1) * 128), so Tensor::empty, copy_from and copy_to on
  // it go over this session. `type` is a device name ("cpu", "opencl", ...) or code.
  Device device(const std::string& type, int32_t id = 0) const;
  Device device(int32_t type, int32_t id = 0) const;
  Device cpu(int32_t id = 0) const { return device(kDLCPU, id); }
  // The number of devices of `type` on the server; `why_none` receives the server's reason
  // when it is 0.
  int32_t device_count(const std::string& type, std::string* why_none = nullptr) const;

  // Files in the session's work directory (relative paths only; `..`, absolute paths and
  // symlinks leading out are refused by the server with an RPCError).
  void upload(const std::filesystem::path& local_file, const std::string& remote_path) const;
  void upload_bytes(const std::string& data, const std::string& remote_path) const;
  std::string download(const std::string& remote_path) const;
  // Removes a file, or a directory with everything in it; a missing path is not an error.
  void remove(const std::string& remote_path) const;
  // The names in a directory of the work directory ("" is the work directory), sorted.
  std::vector<std::string> listdir(const std::string& remote_path = "") const;

  // Loads a module from the work directory with the server's runtime (any format it reads).
  RemoteModule load_module(const std::string& remote_path) const;
  // A global function registered on the server (NotFoundError-carrying RPCError if absent).
  Function get_function(const std::string& name) const;

  // Ends the session: sends Shutdown and closes. Later calls throw RuntimeError
  // "the RPC session with <host:port> is closed". Idempotent.
  void close() const;
  bool closed() const;
  // "host:port" of the server and its key ("server:<key>").
  const std::string& peer() const;
  const std::string& server_key() const;
  // The session's index in its runtime: remote devices carry (index + 1) * 128.
  int32_t index() const;

  struct Impl;
  explicit RPCSession(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// Connects to a server directly; the session's remote devices are served through `runtime`
// (which the session keeps alive). Throws RuntimeError naming host:port for a refused or
// silent peer, a peer that is not a Kiln RPC server, a protocol version mismatch, a key
// that does not match, a busy server or a token that is missing or wrong.
RPCSession connect(const std::string& host, int port, const ConnectOptions& options,
                   Runtime& runtime);
// API-edge default: connect(host, port, options, Runtime::global()).
RPCSession connect(const std::string& host, int port, const ConnectOptions& options = {});
// TVM's signature: connect(host, port, key, session_timeout).
RPCSession connect(const std::string& host, int port, const std::string& key,
                   double session_timeout_s = 0);

// An in-process session, TVM's rpc.LocalSession: the same client API over a server that runs
// on a loopback port of this process, for tests and code that treat local and remote alike.
// Its files live in a fresh private temporary directory, removed when the session ends; only
// this client can use the server (a random token, one session); its remote devices are this
// process's devices of `runtime` (which the session keeps alive). It serves testing.echo and
// every global function registered in this process, under any name, on a thread of this
// process (as TVM's: a crash in what it runs ends this process). Data still crosses a socket,
// so timings include the protocol as a remote session's would, less the network.
RPCSession local_session(Runtime& runtime);

// A module loaded on the server.
class RemoteModule {
 public:
  RemoteModule() = default;
  // The module a remote function returned (an executable's vm_load_executable(), ...).
  // TypeError when `value` is not a module of an RPC session.
  static RemoteModule from_value(const Any& value);
  // The function `name` of the module (or its imports); an RPCError when absent.
  Function get_function(const std::string& name) const;
  Function operator[](const std::string& name) const { return get_function(name); }
  const std::string& entry_name() const;
  // A time evaluator for function `name` run on the server (SPEC.md §1.2). Each call sends
  // the arguments, runs the whole measurement loop remotely and returns the result.
  RemoteTimeEvaluator time_evaluator(const std::string& name, Device device,
                                     TimeEvaluatorOptions options = {}) const;
  uint64_t handle() const;
  // The session the module lives in.
  RPCSession session() const;
  bool defined() const { return static_cast<bool>(obj_); }

  struct Obj;
  explicit RemoteModule(std::shared_ptr<Obj> obj) : obj_(std::move(obj)) {}

 private:
  std::shared_ptr<Obj> obj_;
};

// A time evaluator living on the server; its `number` grows across calls as a local one's.
class RemoteTimeEvaluator {
 public:
  explicit RemoteTimeEvaluator(Function remote) : remote_(std::move(remote)) {}
  // Arguments may be remote tensors of the session, ints, floats and bools.
  BenchmarkResult operator()(const std::vector<Any>& args) const;

 private:
  Function remote_;
};

}  // namespace kiln::rpc

namespace kiln {
// The RPC errors under the names the reference uses (kiln::RPCError, SPEC.md §4.2).
using RPCError = rpc::RPCError;
using RPCSessionTimeoutError = rpc::RPCSessionTimeoutError;
}  // namespace kiln

#endif  // KILN_RPC_SESSION_H_
