// The VM's dispatch cost: a VM function of kCalls Call instructions to the same packed
// function, beside kCalls direct calls of that function from C++ in the same run, per call:
// a no-op (libcalls.so noop) and a function taking 3 register arguments (libcalls.so touch3
// with three tensors, and add3 with three ints). Also the MLP example (examples/vm/mlp.kvmt)
// with pooled against naive allocation.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

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

// The MLP example (examples/vm/mlp.kvmt: two dense layers, matmul + bias_add + relu, with
// storage from vm.builtin.alloc_storage) with each allocator, on the inputs of
// configs/runs/vm_mlp.yaml.
void BM_MLP(benchmark::State& state, const char* memory) {
  kiln::Module program = kiln::load_module(kKernels + "/../vm/mlp.kvmt");
  kiln::vm::VirtualMachine vm(program, {kiln::Device::cpu()}, memory);
  std::vector<Any> args;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{64, 256}, {256, 128}, {128}, {128, 64}, {64}}) {
    kiln::Tensor t = kiln::Tensor::empty(shape, kiln::DataType::Float(32));
    for (float& v : t.host_span<float>()) v = 0.01f;
    args.emplace_back(t);
  }
  kiln::Function f = vm["main"];
  for (auto _ : state) benchmark::DoNotOptimize(f.call_packed(args));
}

BENCHMARK(BM_Direct_Noop);
BENCHMARK(BM_VM_Noop);
BENCHMARK(BM_Direct_Int64x3);
BENCHMARK(BM_VM_Int64x3);
BENCHMARK(BM_Direct_Tensorx3);
BENCHMARK(BM_VM_Tensorx3);
BENCHMARK_CAPTURE(BM_MLP, naive, "naive");
BENCHMARK_CAPTURE(BM_MLP, pooled, "pooled");

}  // namespace

BENCHMARK_MAIN();
