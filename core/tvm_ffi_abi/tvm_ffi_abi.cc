// SPDX-License-Identifier: Apache-2.0
// libkiln_tvm_ffi_abi: the tvm-ffi C functions that TVM-compiled libraries import from the
// process (they link against nothing), implemented by Kiln so that a TVM library loads with no
// TVM installed. They are defined under Kiln-private names ("KilnTF..." for "TVMFFI...", see
// kFfiImports in tvm/tvm_ffi_abi.h): libkiln loads a private copy of each TVM library whose
// imports are renamed to these, so this library, loaded with RTLD_GLOBAL, never interposes on a
// tvm-ffi (libtvm_ffi.so) in the same process, in either loading order. libkiln reads raised
// errors through KilnTFErrorMoveFromRaised; the error objects have tvm-ffi's layout because the
// compiled code may read them (docs/tvm-interop.md, "The tvm-ffi ABI" and "Beside TVM").
#include <atomic>
#include <new>
#include <string>

#include "tvm/tvm_ffi_abi.h"

namespace {

using kiln::tvm_interop::FfiByteArray;
using kiln::tvm_interop::FfiErrorCell;
using kiln::tvm_interop::FfiObject;

// An error object: tvm-ffi's header and error cell, then the storage they point into.
struct ErrorObject {
  FfiObject header;
  FfiErrorCell cell;
  std::string kind;
  std::string message;
};
static_assert(offsetof(ErrorObject, cell) == sizeof(FfiObject), "the cell follows the header");

void delete_error(void* self, int /*flags*/) { delete static_cast<ErrorObject*>(self); }

ErrorObject* new_error(const char* kind, std::string message) {
  auto* e = new (std::nothrow) ErrorObject{};
  if (e == nullptr) return nullptr;
  e->header.combined_ref_count = 1;
  e->header.type_index = kiln::tvm_interop::kError;
  e->header.deleter = delete_error;
  e->kind = kind != nullptr ? kind : "RuntimeError";
  e->message = std::move(message);
  e->cell.kind = FfiByteArray{e->kind.data(), e->kind.size()};
  e->cell.message = FfiByteArray{e->message.data(), e->message.size()};
  e->cell.backtrace = FfiByteArray{"", 0};
  return e;
}

void release(FfiObject* obj) {
  auto* count = reinterpret_cast<std::atomic<uint64_t>*>(&obj->combined_ref_count);
  if ((count->fetch_sub(1, std::memory_order_acq_rel) & 0xffffffffu) == 1 &&
      obj->deleter != nullptr) {
    obj->deleter(obj, 1 /* strong */);
  }
}

// The error raised on this thread and not yet taken (owned).
thread_local ErrorObject* t_raised = nullptr;

void set_raised(ErrorObject* e) {
  if (t_raised != nullptr) release(&t_raised->header);
  t_raised = e;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void KilnTFErrorSetRaisedFromCStrParts(
    const char* kind, const char** message_parts, int32_t num_parts) {
  std::string message;
  for (int32_t i = 0; message_parts != nullptr && i < num_parts; ++i) {
    if (message_parts[i] != nullptr) message += message_parts[i];
  }
  set_raised(new_error(kind, std::move(message)));
}

__attribute__((visibility("default"))) void KilnTFErrorSetRaisedFromCStr(const char* kind,
                                                                         const char* message) {
  set_raised(new_error(kind, message != nullptr ? message : ""));
}

// Moves the raised error (or NULL) into `*result`; the caller owns one reference.
__attribute__((visibility("default"))) void KilnTFErrorMoveFromRaised(void** result) {
  *result = t_raised;
  t_raised = nullptr;
}

__attribute__((visibility("default"))) int KilnTFObjectIncRef(void* obj) {
  if (obj != nullptr) {
    reinterpret_cast<std::atomic<uint64_t>*>(&static_cast<FfiObject*>(obj)->combined_ref_count)
        ->fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

__attribute__((visibility("default"))) int KilnTFObjectDecRef(void* obj) {
  if (obj != nullptr) release(static_cast<FfiObject*>(obj));
  return 0;
}

}  // extern "C"
