// SPDX-License-Identifier: Apache-2.0
// Remote devices other than the CPU, on PoCL (the OpenCL CPU driver, as in CI): tensor copies
// go through the server's staging buffer in 4 MiB pieces, and rpc_run runs an OpenCL C module
// on the server's OpenCL device. Skips with the server's reason where there is no OpenCL
// device.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "example_args.h"
#include "kiln/kiln.h"
#include "pocl_env.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace opencl_remote_test {

using namespace std::chrono_literals;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

ServerOptions loopback() {
  ServerOptions o;
  o.port = 0;
  o.key = "ocl";
  return o;
}

#define SKIP_WITHOUT_REMOTE_OPENCL(session)                       \
  do {                                                            \
    std::string why;                                              \
    if ((session).device_count("opencl", &why) == 0) {            \
      GTEST_SKIP() << "the server has no OpenCL device: " << why; \
    }                                                             \
    kiln::test::pocl_loaded = true;                               \
  } while (0)

TEST(RpcOpenCL, LargeCopiesGoThroughTheStagingBufferInPieces) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "ocl");
  SKIP_WITHOUT_REMOTE_OPENCL(s);
  const int64_t n = 5041 * 720;  // 14.5 MB: four staging pieces
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    host[static_cast<size_t>(i)] = static_cast<float>(i % 9973) * 0.5f;
  Tensor remote = Tensor::empty({5041, 720}, DataType::Float(32), s.device("opencl"));
  EXPECT_EQ(remote.device().str(), fmt::format("remote{}:opencl:0", s.index()));
  remote.copy_from(host.data(), host.size() * sizeof(float));
  Tensor copy = Tensor::empty({5041, 720}, DataType::Float(32), s.device("opencl"));
  copy.copy_from(remote);  // on the remote device
  Tensor back = copy.to_host();
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size() * sizeof(float)), 0);
}

TEST(RpcOpenCL, RpcRunRunsAnOpenCLModuleOnTheServersDevice) {
  Tracker tracker([] {
    TrackerOptions o;
    o.port = 0;
    return o;
  }());
  ServerOptions o = loopback();
  o.tracker = fmt::format("127.0.0.1:{}", tracker.port());
  Server server(o);
  {
    RPCSession probe = connect_tracker("127.0.0.1", tracker.port()).request("ocl", 1, 30, 1, 10s);
    SKIP_WITHOUT_REMOTE_OPENCL(probe);
  }
  Module m = load_module(kKernels + "/opencl/vector_add.cl");
  const int64_t n = 4096;
  // The OpenCL kernel's launch geometry follows the arguments: n, work groups, group size.
  std::vector<Any> args = kiln::test::vector_add_args(n);
  args.insert(args.end(), {Any(n), Any(n / 256), Any(int64_t{256})});
  RPCConfig c;
  c.tracker_host = "127.0.0.1";
  c.tracker_port = tracker.port();
  c.tracker_key = "ocl";
  c.request_wait_sec = 10;
  testing::RunHooks hooks;
  hooks.function = "vector_add";  // device code modules have no entry function
  testing::RunResult r = testing::rpc_run(m, "opencl", args, EvaluatorConfig{2, 2, 0, false}, c,
                                          std::string("tar"), std::nullopt, hooks);
  Tensor got = r.outputs[2].cast<Tensor>();
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(got.host_span<float>()[i], i + 0.5f) << i;
  EXPECT_EQ(r.profile.results().size(), 2u);
  EXPECT_EQ(r.profile.timer, "device") << "the server's OpenCL event timer measured";
  EXPECT_TRUE(
      kiln::test::wait_until([&] { return std::filesystem::is_empty(server.work_dir()); }, 5s));
}

}  // namespace opencl_remote_test
}  // namespace kiln::rpc
