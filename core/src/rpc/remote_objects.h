// SPDX-License-Identifier: Apache-2.0
// Client-side handles of remote objects, and the wire forms of evaluator options and
// results (shared by the client and the server).
#ifndef KILN_SRC_RPC_REMOTE_OBJECTS_H_
#define KILN_SRC_RPC_REMOTE_OBJECTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/object.h"
#include "kiln/rpc/session.h"
#include "rpc/protocol.h"

namespace kiln::rpc {

// A server-side object this client holds: freed on the server when the last reference goes.
// Holds its session open.
class RemoteHandle : public Object {
 public:
  RemoteHandle(std::shared_ptr<RPCSession::Impl> session, uint64_t handle, bool is_module)
      : session(std::move(session)), handle(handle), is_module(is_module) {}
  ~RemoteHandle() override;
  std::shared_ptr<RPCSession::Impl> session;
  uint64_t handle;
  bool is_module;
};

struct RemoteModule::Obj {
  Ref<RemoteHandle> handle;
  std::string entry_name;
};

// A Function that calls server function `handle`.
Function remote_function(std::shared_ptr<RPCSession::Impl> session, uint64_t handle,
                         std::string name);
// The remote handle behind `f`, or null for a local function.
const RemoteHandle* remote_handle_of(const Function& f);

void encode_evaluator_options(wire::Writer& w, const TimeEvaluatorOptions& options);
TimeEvaluatorOptions decode_evaluator_options(wire::Reader& r);
// A BenchmarkResult as JSON with everything it carries, and back.
std::string benchmark_result_to_wire(const BenchmarkResult& result);
BenchmarkResult benchmark_result_from_wire(const std::string& text);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_REMOTE_OBJECTS_H_
