// SPDX-License-Identifier: Apache-2.0
// libkiln_bench_tvm_ffi_calls.so: the bodies of examples/kernels/calls.cc (noop, add3, touch3),
// exported through tvm-ffi's own packed calling convention, so that Kiln and tvm-ffi are
// measured calling the same C++ bodies, each through its own runtime:
//  - as module functions (TVM_FFI_DLL_EXPORT_TYPED_FUNC: the symbols __tvm_ffi_<name> that
//    tvm::ffi::Module::LoadFromFile finds), for kiln_bench_calls;
//  - as global functions kiln_bench.<name> (registered when the library loads), for TVM's Relax
//    VM in bench/tvm/tvm_vm_bench.py, which resolves a Call's callee in the global registry.
// Built only where the apache-tvm-ffi wheel is found (bench/CMakeLists.txt).
#include <tvm/ffi/container/tensor.h>  // DLTensor* arguments
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>

namespace {

// The same statements as examples/kernels/calls.cc; only the error type is tvm-ffi's.
void noop() {}

int64_t add3(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b) +
                              static_cast<uint64_t>(c));
}

void touch3(DLTensor* a, DLTensor* b, DLTensor* c) {
  if (a == nullptr || b == nullptr || c == nullptr) {
    TVM_FFI_THROW(ValueError) << "touch3: a tensor is NULL";
  }
  if ((a->ndim | b->ndim | c->ndim) < 0) {
    TVM_FFI_THROW(ValueError) << "touch3: negative ndim";
  }
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop, noop);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add3, add3);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(touch3, touch3);

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("kiln_bench.noop", noop)
      .def("kiln_bench.add3", add3)
      .def("kiln_bench.touch3", touch3);
}
