// SPDX-License-Identifier: Apache-2.0
// local_session(): an RPCSession with a server of its own, in this process (TVM's
// rpc.LocalSession).
#include <fmt/format.h>

#include <memory>
#include <random>

#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/runtime.h"
#include "rpc/client.h"

namespace kiln::rpc {

RPCSession local_session(Runtime& runtime) {
  std::random_device random;
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.key = "local";
  options.max_sessions = 1;
  // As TVM's LocalSession: the session serves the functions this process registered (under any
  // name) and testing.echo, so it runs on a thread of this process, not in a session process
  // (which would see neither). Only this client can reach it (below), and what it runs is this
  // process's own code or what this client uploads.
  options.isolation = SessionIsolation::kThread;
  options.test_hooks.echo_function = true;
  // Nobody else on this machine can take the loopback port meanwhile: the token is known only
  // here, and the one session slot is this client's.
  options.token = fmt::format("{:08x}{:08x}{:08x}{:08x}", random(), random(), random(), random());
  auto server = std::make_shared<Server>(options, runtime);
  ConnectOptions connect_options;
  connect_options.key = "local";
  connect_options.token = options.token;
  RPCSession session = connect("127.0.0.1", server->port(), connect_options, runtime);
  session.impl()->keep_alive = std::move(server);
  return session;
}

}  // namespace kiln::rpc
