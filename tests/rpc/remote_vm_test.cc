// SPDX-License-Identifier: Apache-2.0
// The VM over RPC (issue 19 item 4; SPEC §2.8 over a session, §2.13, §2.14, §3.10 item 10):
// a VM made on a loopback server from a remote executable, driven through the stateful API,
// save_function, time_evaluator and profile, with results checked against the same program
// run locally.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/remote_vm.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/vm/virtual_machine.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace remote_vm_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kKernels = KILN_EXAMPLE_KERNEL_DIR;
const fs::path kProgram = fs::path(KILN_BUILD_DIR) / "examples/vm/mlp.kvmt";

ServerOptions loopback() {
  ServerOptions o;
  o.port = 0;
  o.key = "vm";
  return o;
}

// The MLP example's inputs (x [64, 256], w1 [256, 128], b1 [128], w2 [128, 64], b2 [64]).
std::vector<std::vector<float>> mlp_inputs() {
  const std::vector<size_t> sizes = {64u * 256, 256u * 128, 128, 128u * 64, 64};
  std::vector<std::vector<float>> inputs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> v(sizes[i]);
    for (size_t j = 0; j < v.size(); ++j)
      v[j] = static_cast<float>((j * 7 + i * 3) % 11) * 0.05f - 0.2f;
    inputs.push_back(std::move(v));
  }
  return inputs;
}

const std::vector<std::vector<int64_t>> kShapes = {{64, 256}, {256, 128}, {128}, {128, 64}, {64}};

std::vector<Any> tensors_on(Device device) {
  std::vector<Any> out;
  const auto inputs = mlp_inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = Tensor::empty(kShapes[i], DataType::Float(32), device);
    t.copy_from(inputs[i].data(), inputs[i].size() * sizeof(float));
    out.emplace_back(t);
  }
  return out;
}

std::vector<float> host_values(const Any& tensor) {
  const Tensor t = tensor.cast<Tensor>();
  std::vector<float> v(size_t{64} * 64);
  t.copy_to(v.data(), v.size() * sizeof(float));
  return v;
}

// The session's work directory laid out as the build tree is, so the program's imports
// (../kernels/lib*.so) resolve inside it.
RemoteModule upload_mlp(RPCSession& s) {
  for (const char* lib : {"libmatmul.so", "libbias_add.so", "librelu.so"}) {
    s.upload(kKernels / lib, std::string("kernels/") + lib);
  }
  s.upload(kProgram, "vm/mlp.kvmt");
  return s.load_module("vm/mlp.kvmt");
}

std::vector<float> local_result() {
  vm::VirtualMachine local(load_module(kProgram), {Device::cpu()});
  return host_values(local.get_function("main").call_packed(tensors_on(Device::cpu())));
}

TEST(RemoteVM, StatefulApiSaveFunctionTimeEvaluatorAndProfile) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "vm");
  RemoteModule exec = upload_mlp(s);
  const std::vector<float> expected = local_result();

  RemoteVirtualMachine vm(exec, {s.cpu()}, "naive", /*profile=*/true);
  EXPECT_EQ(vm.devices().size(), 1u);
  const std::vector<Any> args = tensors_on(s.cpu());

  // A direct call, then the stateful API: the same numbers as the local VM.
  EXPECT_EQ(host_values(vm["main"].call_packed(args)), expected);
  vm.set_input("main", args);
  vm.invoke_stateful("main");
  EXPECT_EQ(vm.get_output_arity("main"), -1);  // a tensor, not a tuple
  const Any out = vm.get_output("main");
  EXPECT_TRUE(out.cast<Tensor>().device().is_remote());
  EXPECT_EQ(host_values(out), expected);

  // save_function, then the saved function through the VM module (a live view) and timed on
  // the server.
  vm.save_function("main", "saved_main", args);
  EXPECT_EQ(host_values(vm.module()["saved_main"]()), expected);
  TimeEvaluatorOptions o;
  o.number = 3;
  o.repeat = 2;
  BenchmarkResult r = vm.time_evaluator("saved_main", s.cpu(), o)({});
  EXPECT_EQ(r.results().size(), 2u);
  EXPECT_GT(r.min(), 0.0);
  // The stateful form, as SPEC §2.13 times it.
  EXPECT_EQ(
      vm.time_evaluator("invoke_stateful", s.cpu(), o)({Any(std::string("main"))}).results().size(),
      2u);

  // profile (of the inputs set_input stored, as §2.14 allows): the kernels' rows come back.
  const profiling::Report report = vm.profile("main", {});
  EXPECT_THAT(report.table(), HasSubstr("matmul"));
  EXPECT_THAT(report.table(), HasSubstr("relu"));
}

TEST(RemoteVM, ErrorsNameWhatIsWrong) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "vm");
  RemoteModule exec = upload_mlp(s);
  EXPECT_THROW(RemoteVirtualMachine(exec, {}), ValueError);
  try {
    RemoteVirtualMachine vm(exec, {Device::cpu()});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a device of the executable's RPC session"));
  }
  try {
    RemoteVirtualMachine vm(exec, {s.cpu(3)});
    FAIL();
  } catch (const RPCError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device cpu:3 does not exist"));
  }
  RemoteVirtualMachine plain(exec, {s.cpu()});
  try {
    plain.profile("main", tensors_on(s.cpu()));
    FAIL();
  } catch (const RPCError& e) {
    EXPECT_THAT(e.what(), HasSubstr("profile"));
  }
  try {
    plain.invoke_stateful("main");
    FAIL();
  } catch (const RPCError& e) {
    EXPECT_THAT(e.what(), HasSubstr("main"));
  }
  // The session still serves after the errors.
  EXPECT_EQ(host_values(plain["main"].call_packed(tensors_on(s.cpu()))), local_result());
  EXPECT_THROW(RemoteModule::from_value(Any(int64_t{1})), TypeError);
}

TEST(RemoteVM, AServerProcessRunsAVMForAClient) {
  // The same through `kiln rpc-server` in its own process, so nothing is shared in memory.
  test::StartedProcess server = test::start_rpc_server({"--key", "vm"});
  ASSERT_GT(server.port, 0);
  RPCSession s = connect("127.0.0.1", server.port, "vm");
  RemoteModule exec = upload_mlp(s);
  RemoteVirtualMachine vm(exec, {s.cpu()});
  EXPECT_EQ(host_values(vm["main"].call_packed(tensors_on(s.cpu()))), local_result());
}

}  // namespace remote_vm_test
}  // namespace kiln::rpc
