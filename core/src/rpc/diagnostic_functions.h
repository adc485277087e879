// SPDX-License-Identifier: Apache-2.0
// Kiln's own functions that a session may offer beside the application's (docs/rpc.md, "Which
// functions a session serves"). They are never put in the global registry: a session looks
// them up here, and only when its server offers them. So whether a name is hidden depends on
// where its function comes from, never on the name: every function the application registered
// is served under any name, "testing.*" and "rpc.test.*" included, and a server that offers
// the diagnostic functions does not leak them into the registry other servers (and the
// application) see.
#ifndef KILN_SRC_RPC_DIAGNOSTIC_FUNCTIONS_H_
#define KILN_SRC_RPC_DIAGNOSTIC_FUNCTIONS_H_

#include <optional>
#include <string>

#include "kiln/function.h"

namespace kiln::rpc {

// The name of TVM's echo function.
inline constexpr char kEchoFunctionName[] = "testing.echo";

// testing.echo: returns its first argument (None when called without one), as TVM's does.
Function echo_function();

// Kiln's diagnostic function `name`, or nullopt when Kiln has none of that name:
// testing.echo, rpc.test.addone, .strcat, .sleep, .block, .alloc, .raise, .nop, .crash, .getenv,
// .read_file and .pid. Offered only with ServerTestHooks::test_functions, because several let
// a client hold a session (sleep, block), take memory (alloc), end its process (crash) or read
// what it can (getenv, read_file).
std::optional<Function> diagnostic_function(const std::string& name);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_DIAGNOSTIC_FUNCTIONS_H_
