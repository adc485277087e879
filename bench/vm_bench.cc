// SPDX-License-Identifier: Apache-2.0
// The VM's dispatch cost, per Call instruction: a VM function of kCalls Call instructions to the
// same packed function of libcalls.so (noop; add3 with three int registers; touch3 with three
// tensor registers), each result dropped.
//   BM_Kiln_VM*   Kiln's VM, one call of the VM function per iteration (manual time / kCalls)
//   BM_Floor_VM*  the floor: kCalls direct calls of the same function from C++
//                 (Function::call_abi with packed arguments), the fastest of 8 placements of
//                 that loop (bench/fastest_loop.h)
// TVM's Relax VM runs the same program over the same bodies in bench/tvm/tvm_vm_bench.py
// (BM_Tvm_VM*). Also the MLP example (examples/vm/mlp.kvmt) with pooled against naive
// allocation. Run through bench/interleave.py (docs/benchmarks.md, "VM dispatch").
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "fastest_loop.h"
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

// The floor: kCalls direct calls with packed arguments, ns per call (manual time).
void run_direct(benchmark::State& state, const char* name, const std::vector<KilnAny>& args) {
  kiln::Function f = calls()[name];
  const KilnAny* packed = args.data();
  const auto n = static_cast<int32_t>(args.size());
  for (auto _ : state) {
    state.SetIterationTime(
        kiln_bench::fastest_batch_seconds(
            [&f, packed, n](int64_t) { benchmark::DoNotOptimize(f.call_abi(packed, n)); }, kCalls) /
        kCalls);
  }
}

// One call of the VM function (kCalls Call instructions) per iteration, ns per instruction.
void run_vm(benchmark::State& state, const char* name, int num_args, const std::vector<Any>& args) {
  kiln::vm::VirtualMachine vm = dispatch_vm(name, num_args);
  kiln::Function run = vm["run"];
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(run.call_packed(args));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count() / kCalls);
  }
}

std::vector<Any> tensors3() {
  kiln::Tensor t = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  return {Any(t), Any(t), Any(t)};
}

std::vector<KilnAny> to_abi(const std::vector<Any>& args) {
  std::vector<KilnAny> abi;
  for (const Any& a : args) abi.push_back(a.to_abi());
  return abi;
}

void BM_Floor_VMNoop(benchmark::State& state) { run_direct(state, "noop", {}); }
void BM_Kiln_VMNoop(benchmark::State& state) { run_vm(state, "noop", 0, {Any(0), Any(0), Any(0)}); }

void BM_Floor_VMTensorx3(benchmark::State& state) {
  const std::vector<Any> args = tensors3();
  run_direct(state, "touch3", to_abi(args));
}
void BM_Kiln_VMTensorx3(benchmark::State& state) { run_vm(state, "touch3", 3, tensors3()); }

void BM_Floor_VMInt64x3(benchmark::State& state) {
  const std::vector<Any> args = {Any(1), Any(2), Any(3)};
  run_direct(state, "add3", to_abi(args));
}
void BM_Kiln_VMInt64x3(benchmark::State& state) {
  run_vm(state, "add3", 3, {Any(1), Any(2), Any(3)});
}

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

// Manual time is per call while an iteration makes kCalls calls (8 x kCalls for a floor): fixed
// iteration counts (~0.1-0.2 s), since Google Benchmark would size the run by the manual time.
BENCHMARK(BM_Floor_VMNoop)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Kiln_VMNoop)->UseManualTime()->Iterations(20000);
BENCHMARK(BM_Floor_VMInt64x3)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Kiln_VMInt64x3)->UseManualTime()->Iterations(20000);
BENCHMARK(BM_Floor_VMTensorx3)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Kiln_VMTensorx3)->UseManualTime()->Iterations(20000);
BENCHMARK_CAPTURE(BM_MLP, naive, "naive");
BENCHMARK_CAPTURE(BM_MLP, pooled, "pooled");

}  // namespace

BENCHMARK_MAIN();
