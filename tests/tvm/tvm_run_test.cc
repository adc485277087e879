// TVM-compiled libraries through local_run and rpc_run (a tracker and a server on loopback):
// exported by Kiln's tar and so exporters, loaded again (remotely by the server), run, and
// compared with TVM's own CPU results.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/tracker.h"
#include "tvm_fixtures.h"

namespace kiln::tvm_test {
namespace {

class TvmRun : public TvmFixtureTest {
 protected:
  std::vector<Any> args_of(const std::string& name) const {
    std::vector<Tensor> t = inputs(name);
    return {t.begin(), t.end()};
  }
  testing::RunHooks hooks_for(const std::string& name) const {
    testing::RunHooks hooks;
    hooks.function = tvm_case(name).at("function").get<std::string>();
    return hooks;
  }
};

TEST_F(TvmRun, LocalRunThroughEachExporter) {
  for (const std::string name : {"vadd", "row_sum", "conv2d"}) {
    for (const std::string exporter : {"tar", "so"}) {
      SCOPED_TRACE(name + " exported as " + exporter);
      testing::RunResult r =
          testing::local_run(load_module(library(name)), "cpu", args_of(name),
                             EvaluatorConfig{2, 2, 0, false}, exporter, std::nullopt,
                             hooks_for(name));
      expect_close(r.outputs.back().cast<Tensor>(), expected(name), 1e-4, 1e-3, name);
    }
  }
}

TEST_F(TvmRun, RpcRunOnALoopbackServer) {
  rpc::TrackerOptions to;
  to.port = 0;
  rpc::Tracker tracker(to);
  rpc::ServerOptions so;
  so.port = 0;
  so.key = "tvm-board";
  so.tracker = fmt::format("127.0.0.1:{}", tracker.port());
  rpc::Server server(so);
  rpc::RPCConfig config;
  config.tracker_host = "127.0.0.1";
  config.tracker_port = tracker.port();
  config.tracker_key = "tvm-board";
  config.session_timeout_sec = 60;
  config.request_wait_sec = 20;
  for (const std::string name : {"vadd", "row_sum", "workspace"}) {
    for (const std::string exporter : {"tar", "so"}) {
      SCOPED_TRACE(name + " exported as " + exporter);
      testing::RunResult r =
          testing::rpc_run(load_module(library(name)), "cpu", args_of(name),
                           EvaluatorConfig{2, 2, 0, false}, config, exporter, std::nullopt,
                           hooks_for(name));
      expect_close(r.outputs.back().cast<Tensor>(), expected(name), 1e-4, 1e-3, name);
    }
  }
}

}  // namespace
}  // namespace kiln::tvm_test
