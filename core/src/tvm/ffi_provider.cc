// SPDX-License-Identifier: Apache-2.0
#include "tvm/ffi_provider.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <map>
#include <string_view>

#include "kiln/error.h"

namespace kiln::tvm_interop {

namespace {

constexpr const char* kAbiLibrary = "libkiln_tvm_ffi_abi.so";

// The private name of tvm-ffi's `name` ("TVMFFIObjectDecRef" -> "KilnTFObjectDecRef").
std::string private_name(std::string_view name) {
  return kPrivateFfiPrefix + std::string(name.substr(sizeof(kFfiPrefix) - 1));
}

template <typename Fn>
Fn symbol(void* handle, std::string_view name, const std::string& origin) {
  const std::string renamed = private_name(name);
  void* p = dlsym(handle, renamed.c_str());
  if (p == nullptr) {
    throw UnavailableError(
        fmt::format("{} does not define {} (Kiln's name for {}): a libkiln_tvm_ffi_abi of "
                    "another Kiln release is installed beside libkiln",
                    origin, renamed, name));
  }
  return reinterpret_cast<Fn>(p);
}

FfiProvider load_provider() {
  // Beside libkiln, in the build tree and when installed alike. RTLD_GLOBAL: the renamed
  // imports of the libraries' copies resolve against it; its names are Kiln's own, so nothing
  // else in the process binds to them.
  const auto path = boost::dll::this_line_location().parent_path() / kAbiLibrary;
  void* handle = dlopen(path.string().c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw UnavailableError(fmt::format(
        "TVM-compiled libraries call the tvm-ffi C functions {}...; Kiln provides them in {}, "
        "which cannot be loaded: {}",
        kFfiImports[0], path.string(), why != nullptr ? why : "unknown dlopen error"));
  }
  FfiProvider p;
  p.origin = path.string();
  p.move_from_raised =
      symbol<decltype(p.move_from_raised)>(handle, "TVMFFIErrorMoveFromRaised", p.origin);
  p.dec_ref = symbol<decltype(p.dec_ref)>(handle, "TVMFFIObjectDecRef", p.origin);
  return p;
}

std::string_view view(const FfiByteArray& a) {
  return a.data != nullptr ? std::string_view(a.data, a.size) : std::string_view();
}

}  // namespace

const FfiProvider& ffi_provider() {
  static const FfiProvider provider = load_provider();
  return provider;
}

void raise_ffi_error(int rc, const std::string& context) {
  const FfiProvider& p = ffi_provider();
  void* handle = nullptr;
  p.move_from_raised(&handle);
  if (handle == nullptr) {
    throw RuntimeError(
        fmt::format("{}: failed (returned {}) without raising an error", context, rc));
  }
  auto* obj = static_cast<FfiObject*>(handle);
  std::string kind = "RuntimeError";
  std::string message = "(an object that is not an error was raised)";
  if (obj->type_index == kError) {
    const auto* cell = reinterpret_cast<const FfiErrorCell*>(obj + 1);
    kind = view(cell->kind);
    message = view(cell->message);
  }
  p.dec_ref(handle);
  const std::string text = fmt::format("{}: {}: {}", context, kind, message);
  if (kind == "ValueError") throw ValueError(text);
  if (kind == "TypeError") throw TypeError(text);
  if (kind == "IndexError") throw IndexError(text);
  if (kind == "NotImplementedError") throw UnimplementedError(text);
  if (kind == "MemoryError") throw OutOfMemoryError(text);
  throw RuntimeError(text);
}

}  // namespace kiln::tvm_interop
