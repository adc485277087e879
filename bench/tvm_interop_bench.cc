// SPDX-License-Identifier: Apache-2.0
// TVM-compiled functions called through Kiln beside TVM's own runtime (tvm-ffi's C++ Module and
// Function, from the apache-tvm-ffi wheel), in one process, cases interleaved
// (--benchmark_enable_random_interleaving). The floor is the library's exported symbol called
// directly with pre-packed TVMFFIAny arguments: what any runtime must at least pay.
//
//   no-op: `noop(a)` (TVM's argument checks, no work); vadd: 2^20 float32 elements.
//
// The libraries come from tests/tvm/make_fixtures.py (ctest's tvm_fixtures writes them to
// build/tvm_fixtures; KILN_TVM_FIXTURES overrides). docs/benchmarks.md has the figures.
//
// Also the Relax MLP end to end: Kiln's VM beside TVM's relax.VirtualMachine, whose runtime
// (libtvm_runtime.so of the same wheel) this process loads for that case.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/vm/virtual_machine.h"

namespace {

std::string fixture(const std::string& file) {
  const char* dir = std::getenv("KILN_TVM_FIXTURES");
  return std::string(dir != nullptr ? dir : KILN_TVM_FIXTURE_DIR) + "/" + file;
}

// The arrays of one case, as Kiln tensors (TVM reads the same DLTensors).
struct Arrays {
  explicit Arrays(int64_t n) {
    for (auto* t : {&a, &b, &c}) {
      *t = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
      std::fill(t->host_span<float>().begin(), t->host_span<float>().end(), 1.0f);
    }
  }
  kiln::Tensor a, b, c;
};

using SafeCall = int (*)(void*, const TVMFFIAny*, int32_t, TVMFFIAny*);

TVMFFIAny dltensor_arg(const kiln::Tensor& t) {
  TVMFFIAny v{};
  v.type_index = kTVMFFIDLTensorPtr;
  v.v_ptr = const_cast<DLTensor*>(t.dl());
  return v;
}

// Floor: the exported symbol, called with arguments packed once.
void run_floor(benchmark::State& state, const char* library, const char* symbol, int n_args,
               int64_t n) {
  void* h = dlopen(fixture(library).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    state.SkipWithError(dlerror());
    return;
  }
  auto fn = reinterpret_cast<SafeCall>(dlsym(h, symbol));
  Arrays arrays(n);
  TVMFFIAny args[3] = {dltensor_arg(arrays.a), dltensor_arg(arrays.b), dltensor_arg(arrays.c)};
  TVMFFIAny ret{};
  for (auto _ : state) {
    if (fn(nullptr, args, n_args, &ret) != 0) state.SkipWithError("call failed");
  }
  dlclose(h);
}

void run_tvm(benchmark::State& state, const char* library, const char* function, int n_args,
             int64_t n) {
  tvm::ffi::Module m = tvm::ffi::Module::LoadFromFile(fixture(library));
  tvm::ffi::Function f = m->GetFunction(function).value();
  Arrays arrays(n);
  auto* a = const_cast<DLTensor*>(arrays.a.dl());
  auto* b = const_cast<DLTensor*>(arrays.b.dl());
  auto* c = const_cast<DLTensor*>(arrays.c.dl());
  for (auto _ : state) {
    if (n_args == 1) {
      f(a);
    } else {
      f(a, b, c);
    }
  }
}

void run_kiln(benchmark::State& state, const char* library, const char* function, int n_args,
              int64_t n) {
  kiln::Module m = kiln::load_module(fixture(library));
  kiln::Function f = m.get_function(function);
  Arrays arrays(n);
  for (auto _ : state) {
    if (n_args == 1) {
      f(arrays.a);
    } else {
      f(arrays.a, arrays.b, arrays.c);
    }
  }
}

// Kiln's bridge alone: the module function's KilnCallable, called with packed KilnAny values
// (what kiln::Function adds on top is the packing and the result's Any).
void run_kiln_abi(benchmark::State& state, const char* library, const char* function) {
  kiln::Module m = kiln::load_module(fixture(library));
  const KilnCallable c = m.get_function(function).callable();
  Arrays arrays(1);
  KilnAny arg{};
  arg.type_code = KILN_TYPE_TENSOR;
  arg.value.v_tensor = const_cast<DLTensor*>(arrays.a.dl());
  for (auto _ : state) {
    KilnAny ret{};
    if (c.call(c.self, &arg, 1, &ret) != nullptr) state.SkipWithError("call failed");
    benchmark::DoNotOptimize(ret);
  }
}

// ---- The Relax MLP (tests/tvm/make_fixtures.py: relu(x @ w1 + b1) @ w2, x of 32 x 16) end to
// end in each VM: TVM's relax.VirtualMachine from libtvm_runtime (loaded here), Kiln's VM.

constexpr int64_t kBatch = 32;

// A host buffer both runtimes read: TVM sees it as a tvm::ffi::Tensor over Kiln's memory.
struct MlpInputs {
  MlpInputs() {
    for (auto [t, shape] :
         {std::pair{&x, std::vector<int64_t>{kBatch, 16}},
          std::pair{&w1, std::vector<int64_t>{16, 32}}, std::pair{&b1, std::vector<int64_t>{32}},
          std::pair{&w2, std::vector<int64_t>{32, 8}}}) {
      *t = kiln::Tensor::empty(shape, kiln::DataType::Float(32));
      float v = 0.01f;
      for (float& e : t->host_span<float>()) e = (v += 0.001f);
    }
  }
  kiln::Tensor x, w1, b1, w2;
};

struct CpuAlloc {
  void AllocData(DLTensor* t) { t->data = std::aligned_alloc(64, 64 * ((bytes(t) + 63) / 64)); }
  void FreeData(DLTensor* t) { std::free(t->data); }
  static size_t bytes(const DLTensor* t) {
    size_t n = (t->dtype.bits + 7) / 8;
    for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
    return n;
  }
};

tvm::ffi::Tensor tvm_copy(const kiln::Tensor& t) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  tvm::ffi::Tensor out =
      tvm::ffi::Tensor::FromNDAlloc(CpuAlloc(), tvm::ffi::ShapeView(shape.data(), shape.size()),
                                    DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
  std::memcpy(out.data_ptr(), t.data(), CpuAlloc::bytes(t.dl()));
  return out;
}

void BM_Tvm_RelaxMlp(benchmark::State& state) {
  if (dlopen(KILN_TVM_RUNTIME_LIB, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    state.SkipWithError(dlerror());
    return;
  }
  tvm::ffi::Module ex = tvm::ffi::Module::LoadFromFile(fixture("mlp.so"));
  tvm::ffi::Module vm = ex->GetFunction("vm_load_executable").value()().cast<tvm::ffi::Module>();
  // One CPU device with the pooled allocator (2), and the CPU as host: TVM's defaults.
  vm->GetFunction("vm_initialization")
      .value()(static_cast<int>(kDLCPU), 0, 2, static_cast<int>(kDLCPU), 0, 2);
  tvm::ffi::Function main = vm->GetFunction("main").value();
  MlpInputs in;
  tvm::ffi::Tensor x = tvm_copy(in.x), w1 = tvm_copy(in.w1), b1 = tvm_copy(in.b1),
                   w2 = tvm_copy(in.w2);
  for (auto _ : state) benchmark::DoNotOptimize(main(x, w1, b1, w2));
}

void BM_Kiln_RelaxMlp(benchmark::State& state) {
  kiln::Module m = kiln::load_module(fixture("mlp.so"));
  kiln::vm::VirtualMachine vm(m, {kiln::Device::cpu()});
  kiln::Function main = vm.get_function("main");
  MlpInputs in;
  for (auto _ : state) benchmark::DoNotOptimize(main(in.x, in.w1, in.b1, in.w2));
}

BENCHMARK(BM_Tvm_RelaxMlp);
BENCHMARK(BM_Kiln_RelaxMlp);

constexpr int64_t kVaddElements = int64_t{1} << 20;

void BM_Floor_Noop(benchmark::State& s) { run_floor(s, "noop.so", "__tvm_ffi_noop", 1, 1); }
void BM_Tvm_Noop(benchmark::State& s) { run_tvm(s, "noop.so", "noop", 1, 1); }
void BM_Kiln_Noop(benchmark::State& s) { run_kiln(s, "noop.so", "noop", 1, 1); }
void BM_KilnAbi_Noop(benchmark::State& s) { run_kiln_abi(s, "noop.so", "noop"); }
void BM_Floor_Vadd1M(benchmark::State& s) {
  run_floor(s, "vadd.so", "__tvm_ffi_vadd", 3, kVaddElements);
}
void BM_Tvm_Vadd1M(benchmark::State& s) { run_tvm(s, "vadd.so", "vadd", 3, kVaddElements); }
void BM_Kiln_Vadd1M(benchmark::State& s) { run_kiln(s, "vadd.so", "vadd", 3, kVaddElements); }

// ---- Parallel-launch overhead: an empty parallel loop of 2 iterations (parallel2.so) through
// each runtime's own pool: TVM's thread pool (libtvm_runtime, loaded here, with
// TVM_NUM_THREADS=2 unless set: TVM counts physical cores and would use 1 on a 2-thread
// machine) and the Kiln cpu plugin's task team (its default: the process's CPUs). Both then run
// 2 tasks. The floor: the same loop compiled serial (serial2.so), called directly.

const bool tvm_threads_set = [] { return setenv("TVM_NUM_THREADS", "2", 0) == 0; }();

void BM_Floor_Parallel2(benchmark::State& s) {
  run_floor(s, "serial2.so", "__tvm_ffi_serial2", 1, 2);
}
void BM_Tvm_Parallel2(benchmark::State& s) {
  if (!tvm_threads_set || dlopen(KILN_TVM_RUNTIME_LIB, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    s.SkipWithError("cannot load TVM's runtime (its thread pool)");
    return;
  }
  run_tvm(s, "parallel2.so", "parallel2", 1, 2);
}
void BM_Kiln_Parallel2(benchmark::State& s) { run_kiln(s, "parallel2.so", "parallel2", 1, 2); }

BENCHMARK(BM_Floor_Parallel2);
BENCHMARK(BM_Tvm_Parallel2);
BENCHMARK(BM_Kiln_Parallel2);

BENCHMARK(BM_Floor_Noop);
BENCHMARK(BM_Tvm_Noop);
BENCHMARK(BM_Kiln_Noop);
BENCHMARK(BM_KilnAbi_Noop);
BENCHMARK(BM_Floor_Vadd1M);
BENCHMARK(BM_Tvm_Vadd1M);
BENCHMARK(BM_Kiln_Vadd1M);

}  // namespace

BENCHMARK_MAIN();
