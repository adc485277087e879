// SPDX-License-Identifier: Apache-2.0
// A Runtime owns what it makes, and what it makes keeps it alive: each object below is made
// through a Runtime whose handle is then destroyed, and used afterwards. The plugins must still
// be loaded and the runtime's state valid; under AddressSanitizer (build-asan) a use of the
// freed runtime is a failure, not a lucky pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "kiln/kiln.h"
#include "kiln/rpc/session.h"
#include "kiln/vm/exec_builder.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln {
namespace {

const std::string kKernelDir = KILN_EXAMPLE_KERNEL_DIR;

// A fresh runtime (not the process-wide one), so that dropping it is the only owner going.
std::unique_ptr<Runtime> fresh_runtime() { return std::make_unique<Runtime>(); }

// vector_add's arguments on `context`'s cpu: out[i] = a[i] + 0.5 * b[i] = i + 1.
std::vector<Any> vector_add_args(int64_t n, const DeviceContext& context) {
  Tensor a = Tensor::empty({n}, DataType::Float(32), Device::cpu(), context);
  Tensor b = Tensor::empty({n}, DataType::Float(32), Device::cpu(), context);
  Tensor out = Tensor::empty({n}, DataType::Float(32), Device::cpu(), context);
  for (int64_t i = 0; i < n; ++i) {
    a.host_span<float>()[i] = static_cast<float>(i);
    b.host_span<float>()[i] = 2.0f;
    out.host_span<float>()[i] = 0.0f;
  }
  return {Any(a), Any(b), Any(out), Any(0.5)};
}

void expect_vector_add(const std::vector<Any>& args) {
  Tensor out = args[2].cast<Tensor>();
  for (int64_t i = 0; i < out.shape()[0]; ++i) ASSERT_FLOAT_EQ(out.host_span<float>()[i], i + 1.0f);
}

TEST(RuntimeLifetime, CopiesShareOneRuntime) {
  auto rt = fresh_runtime();
  Runtime copy = *rt;
  EXPECT_EQ(copy.retain(), rt->retain()) << "a copy is another handle to the same state";
  rt.reset();
  EXPECT_TRUE(copy.find_backend(kDLCPU));
}

TEST(RuntimeLifetime, ModuleOutlivesItsRuntime) {
  auto rt = fresh_runtime();
  Module m = rt->load_module(kKernelDir + "/libvector_add.so");
  std::vector<Any> args = vector_add_args(64, *rt);
  rt.reset();
  m.get_function("vector_add")(args[0], args[1], args[2], args[3]);
  expect_vector_add(args);
}

TEST(RuntimeLifetime, VirtualMachineOutlivesItsRuntime) {
  // alloc_storage asks the VM's runtime for the cpu backend on every call.
  vm::ExecBuilder b;
  b.emit_function("main", 0);
  b.emit_call("vm.builtin.alloc_storage",
              {vm::ExecBuilder::vm_state(), b.c(vm::Constant(vm::ShapeConstant{{24}})),
               vm::ExecBuilder::imm(0), b.c(vm::Constant(DataType::Float(32))),
               b.c(vm::Constant(std::string("global")))},
              0);
  b.emit_call(
      "vm.builtin.alloc_tensor",
      {vm::ExecBuilder::r(0), vm::ExecBuilder::imm(0), b.c(vm::Constant(vm::ShapeConstant{{4, 6}})),
       b.c(vm::Constant(DataType::Float(32)))},
      1);
  b.emit_ret(vm::ExecBuilder::r(1));
  b.end_function("main");
  auto rt = fresh_runtime();
  std::optional<vm::VirtualMachine> machine;
  machine.emplace(b.get(), std::vector<Module>{}, std::vector<Device>{Device::cpu()}, *rt,
                  vm::MemoryConfig("naive"));
  rt.reset();
  Tensor t = (*machine)["main"]().cast<Tensor>();
  EXPECT_EQ(t.numel(), 24);
  t.host_span<float>()[23] = 1.0f;
}

TEST(RuntimeLifetime, EvaluatorOutlivesItsRuntime) {
  auto rt = fresh_runtime();
  Module m = rt->load_module(kKernelDir + "/libvector_add.so");
  std::vector<Any> args = vector_add_args(64, *rt);
  TimeEvaluatorOptions options;
  options.number = 2;
  options.repeat = 2;
  TimeEvaluator evaluator(m.get_function("vector_add"), Device::cpu(), options, *rt);
  m = Module();
  rt.reset();
  BenchmarkResult r = evaluator(args);
  EXPECT_EQ(r.results().size(), 2u);
  expect_vector_add(args);
}

TEST(RuntimeLifetime, ProfilerOutlivesItsRuntime) {
  auto rt = fresh_runtime();
  profiling::Profiler profiler({Device::cpu()}, {}, {}, *rt);
  rt.reset();
  profiler.start();
  profiler.start_call("work", Device::cpu());
  profiler.stop_call();
  profiler.stop();
  EXPECT_THAT(profiler.report().table(), ::testing::HasSubstr("work"));
}

TEST(RuntimeLifetime, RemoteSessionOutlivesItsRuntime) {
  // The client resolves device names and the in-process server serves devices and modules
  // through the runtime both were made with.
  auto rt = fresh_runtime();
  rpc::RPCSession session = rpc::local_session(*rt);
  rt.reset();
  EXPECT_EQ(session.device("cpu").server_device(), Device::cpu());
  EXPECT_EQ(session.device_count("cpu"), 1);
  session.upload(kKernelDir + "/libvector_add.so", "vector_add.so");
  rpc::RemoteModule m = session.load_module("vector_add.so");
  EXPECT_TRUE(m.get_function("vector_add"));
  session.close();
}

}  // namespace
}  // namespace kiln
