// The VM's dispatch cost: a VM function of kCalls Call instructions to the same packed
// function, beside kCalls direct calls of that function from C++ in the same run, per call:
// a no-op (libcalls.so noop) and a function taking 3 register arguments (libcalls.so touch3
// with three tensors, and add3 with three ints). Also the MLP example (matmul, bias_add, relu
// with storage from alloc_storage) with pooled against naive allocation.
#include <benchmark/benchmark.h>

#include <string>

#include "kiln/kiln.h"
#include "kiln/vm/exec_builder.h"
#include "kiln/vm/virtual_machine.h"

namespace {

using kiln::Any;
using kiln::vm::ExecBuilder;

constexpr int kCalls = 1000;
const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

kiln::Module& calls() {
  static kiln::Module m = kiln::load_module(kKernels + "/libcalls.so");
  return m;
}

// run(r0, r1, r2): kCalls x `callee(r0, r1, r2)` (or no arguments), then return none.
kiln::vm::VirtualMachine dispatch_vm(const std::string& callee, int num_args) {
  ExecBuilder b;
  b.add_import("libcalls.so");
  b.emit_function("run", 3);
  std::vector<ExecBuilder::Operand> args;
  for (int i = 0; i < num_args; ++i) args.push_back(ExecBuilder::r(i));
  for (int i = 0; i < kCalls; ++i) b.emit_call(callee, args);
  b.emit_ret(ExecBuilder::void_arg());
  b.end_function("run");
  return kiln::vm::VirtualMachine(b.get(), {calls()}, {kiln::Device::cpu()});
}

template <typename Args>
void run_direct(benchmark::State& state, const char* name, const Args& args) {
  kiln::Function f = calls()[name];
  for (auto _ : state) {
    for (int i = 0; i < kCalls; ++i)
      benchmark::DoNotOptimize(f.call_abi(args.data(), static_cast<int32_t>(args.size())));
  }
  state.SetItemsProcessed(state.iterations() * kCalls);
}

void run_vm(benchmark::State& state, const char* name, int num_args, const std::vector<Any>& args) {
  kiln::vm::VirtualMachine vm = dispatch_vm(name, num_args);
  kiln::Function run = vm["run"];
  for (auto _ : state) benchmark::DoNotOptimize(run.call_packed(args));
  state.SetItemsProcessed(state.iterations() * kCalls);
}

std::vector<Any> tensors3() {
  kiln::Tensor t = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  return {Any(t), Any(t), Any(t)};
}

void BM_Direct_Noop(benchmark::State& state) {
  std::vector<KilnAny> none(1);
  kiln::Function f = calls()["noop"];
  for (auto _ : state) {
    for (int i = 0; i < kCalls; ++i) benchmark::DoNotOptimize(f.call_abi(none.data(), 0));
  }
  state.SetItemsProcessed(state.iterations() * kCalls);
}
void BM_VM_Noop(benchmark::State& state) { run_vm(state, "noop", 0, {Any(0), Any(0), Any(0)}); }

void BM_Direct_Tensorx3(benchmark::State& state) {
  const std::vector<Any> args = tensors3();
  std::vector<KilnAny> abi;
  for (const Any& a : args) abi.push_back(a.to_abi());
  run_direct(state, "touch3", abi);
}
void BM_VM_Tensorx3(benchmark::State& state) { run_vm(state, "touch3", 3, tensors3()); }

void BM_Direct_Int64x3(benchmark::State& state) {
  const std::vector<Any> args = {Any(1), Any(2), Any(3)};
  std::vector<KilnAny> abi;
  for (const Any& a : args) abi.push_back(a.to_abi());
  run_direct(state, "add3", abi);
}
void BM_VM_Int64x3(benchmark::State& state) { run_vm(state, "add3", 3, {Any(1), Any(2), Any(3)}); }

// main(x, w, b) = relu(bias_add(x @ w, b)) with its output in storage from alloc_storage.
kiln::vm::Executable mlp(int64_t batch, int64_t out) {
  using kiln::vm::Constant;
  using kiln::vm::ShapeConstant;
  ExecBuilder b;
  for (const char* lib : {"libmatmul.so", "libbias_add.so", "librelu.so"}) b.add_import(lib);
  const auto f32 = b.c(Constant(kiln::DataType::Float(32)));
  b.emit_function("main", 3);
  b.emit_call("vm.builtin.alloc_storage",
              {ExecBuilder::vm_state(), b.c(Constant(ShapeConstant{{batch * out}})),
               ExecBuilder::imm(0), f32, b.c(Constant(std::string("global")))},
              3);
  b.emit_call(
      "vm.builtin.alloc_tensor",
      {ExecBuilder::r(3), ExecBuilder::imm(0), b.c(Constant(ShapeConstant{{batch, out}})), f32}, 4);
  b.emit_call("matmul", {ExecBuilder::r(0), ExecBuilder::r(1), ExecBuilder::r(4)});
  b.emit_call("bias_add", {ExecBuilder::r(4), ExecBuilder::r(2), ExecBuilder::r(4)});
  b.emit_call("relu", {ExecBuilder::r(4), ExecBuilder::r(4)});
  b.emit_ret(ExecBuilder::r(4));
  b.end_function("main");
  return b.get();
}

// `batch` x `in` inputs through a dense layer of `out` units: 8x64->64 keeps its 2 KiB output
// in one page; 256x512->512 takes 512 KiB per call, above glibc's mmap threshold, so a naive
// allocation maps and unmaps (and faults in) fresh pages every call.
void BM_MLP(benchmark::State& state, const char* memory, int64_t batch, int64_t in, int64_t out) {
  std::vector<kiln::Module> libs = {kiln::load_module(kKernels + "/libmatmul.so"),
                                    kiln::load_module(kKernels + "/libbias_add.so"),
                                    kiln::load_module(kKernels + "/librelu.so")};
  kiln::vm::VirtualMachine vm(mlp(batch, out), libs, {kiln::Device::cpu()}, memory);
  kiln::Tensor x = kiln::Tensor::empty({batch, in}, kiln::DataType::Float(32));
  kiln::Tensor w = kiln::Tensor::empty({in, out}, kiln::DataType::Float(32));
  kiln::Tensor bias = kiln::Tensor::empty({out}, kiln::DataType::Float(32));
  for (auto* t : {&x, &w, &bias}) {
    for (float& v : t->host_span<float>()) v = 0.01f;
  }
  kiln::Function f = vm["main"];
  for (auto _ : state) benchmark::DoNotOptimize(f(x, w, bias));
}

BENCHMARK(BM_Direct_Noop);
BENCHMARK(BM_VM_Noop);
BENCHMARK(BM_Direct_Int64x3);
BENCHMARK(BM_VM_Int64x3);
BENCHMARK(BM_Direct_Tensorx3);
BENCHMARK(BM_VM_Tensorx3);
BENCHMARK_CAPTURE(BM_MLP, naive_8x64x64, "naive", 8, 64, 64);
BENCHMARK_CAPTURE(BM_MLP, pooled_8x64x64, "pooled", 8, 64, 64);
BENCHMARK_CAPTURE(BM_MLP, naive_256x512x512, "naive", 256, 512, 512);
BENCHMARK_CAPTURE(BM_MLP, pooled_256x512x512, "pooled", 256, 512, 512);

}  // namespace

BENCHMARK_MAIN();
