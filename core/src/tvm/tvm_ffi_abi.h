// SPDX-License-Identifier: Apache-2.0
// The subset of the tvm-ffi C ABI (apache-tvm-ffi 0.1, include/tvm/ffi/c_api.h) that code
// compiled by TVM 0.21 and later calls, declared from that specification so that Kiln builds
// without TVM. Layouts are checked below; docs/tvm-interop.md says which calls Kiln answers.
#ifndef KILN_TVM_TVM_FFI_ABI_H_
#define KILN_TVM_TVM_FFI_ABI_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace kiln::tvm_interop {

// The tvm-ffi release whose ABI this header follows (its c_api.h version).
inline constexpr int kTvmFfiMajor = 0;
inline constexpr int kTvmFfiMinor = 1;

// Type indices of TVMFFIAny (the ones that cross between Kiln and compiled code).
enum TypeIndex : int32_t {
  kNone = 0,
  kInt = 1,
  kBool = 2,
  kFloat = 3,
  kOpaquePtr = 4,
  kDataType = 5,
  kDevice = 6,
  kDLTensorPtr = 7,
  kRawStr = 8,
  kByteArrayPtr = 9,
  kObjectRValueRef = 10,
  kSmallStr = 11,
  kSmallBytes = 12,
  kStaticObjectBegin = 64,
  kStr = 65,
  kBytes = 66,
  kError = 67,
  kFunction = 68,
  kShape = 69,
  kTensor = 70,
  kModule = 73,
};

// The header of every heap object: strong count in the low 32 bits of the combined count.
struct FfiObject {
  uint64_t combined_ref_count;
  int32_t type_index;
  uint32_t padding;
  void (*deleter)(void* self, int flags);
};

// The 16-byte tagged value of the packed calling convention.
struct FfiAny {
  int32_t type_index;
  uint32_t zero_padding;  // the length of a small string
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
    const char* v_c_str;
    FfiObject* v_obj;
    DLDataType v_dtype;
    DLDevice v_device;
    char v_bytes[8];
  };
};

struct FfiByteArray {
  const char* data;
  size_t size;
};

struct FfiShapeCell {
  const int64_t* data;
  size_t size;
};

// What follows the header of an error object.
struct FfiErrorCell {
  FfiByteArray kind;
  FfiByteArray message;
  FfiByteArray backtrace;
  void (*update_backtrace)(void* self, const FfiByteArray* backtrace, int32_t mode);
  void* cause_chain;
  void* extra_context;
};

// The signature of every exported function (`__tvm_ffi_<name>`): 0 on success, else nonzero
// with the error raised through TVMFFIErrorSetRaised*.
using SafeCall = int (*)(void* self, const FfiAny* args, int32_t num_args, FfiAny* result);

// The group a parallel task runs in (TVMParallelGroupEnv of TVM's c_backend_api.h).
struct ParallelGroupEnv {
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, ParallelGroupEnv* penv, void* cdata);

// The tvm-ffi C functions a compiled library may import from the process, and the names Kiln's
// private copy of the library imports them by instead (the first six letters "TVMFFI" become
// "KilnTF", so that the renamed string fits where the original was). libkiln_tvm_ffi_abi
// defines the private names and nothing of tvm-ffi's, so a tvm-ffi in the process never binds to
// Kiln's definitions, nor Kiln's copies to tvm-ffi's (docs/tvm-interop.md, "Beside TVM").
inline constexpr const char* kFfiImports[] = {
    "TVMFFIErrorSetRaisedFromCStrParts", "TVMFFIErrorSetRaisedFromCStr",
    "TVMFFIErrorMoveFromRaised", "TVMFFIObjectIncRef", "TVMFFIObjectDecRef"};
inline constexpr const char kFfiPrefix[] = "TVMFFI";
inline constexpr const char kPrivateFfiPrefix[] = "KilnTF";
static_assert(sizeof(kFfiPrefix) == sizeof(kPrivateFfiPrefix), "renamed in place");

static_assert(sizeof(FfiAny) == 16, "TVMFFIAny is 16 bytes");
static_assert(sizeof(FfiObject) == 24, "TVMFFIObject is 24 bytes");
static_assert(offsetof(FfiAny, v_int64) == 8, "TVMFFIAny's payload is at byte 8");

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_TVM_FFI_ABI_H_
