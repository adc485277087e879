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
constexpr const char* kRaiseSymbol = "TVMFFIErrorSetRaisedFromCStrParts";

template <typename Fn>
Fn symbol(void* handle, const char* name, const std::string& origin) {
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    throw UnavailableError(fmt::format("{} answers {} but not {}, which Kiln needs to read errors",
                                       origin, kRaiseSymbol, name));
  }
  return reinterpret_cast<Fn>(p);
}

FfiProvider load_provider() {
  std::string origin;
  if (void* present = dlsym(RTLD_DEFAULT, kRaiseSymbol)) {
    Dl_info info{};
    origin = dladdr(present, &info) != 0 && info.dli_fname != nullptr ? std::string(info.dli_fname)
                                                                      : std::string("the process");
  } else {
    // Beside libkiln, in the build tree and when installed alike.
    const auto path = boost::dll::this_line_location().parent_path() / kAbiLibrary;
    if (dlopen(path.string().c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      throw UnavailableError(fmt::format(
          "TVM-compiled libraries call {} in the process; Kiln provides it in {}, which cannot "
          "be loaded: {}",
          kRaiseSymbol, path.string(), why != nullptr ? why : "unknown dlopen error"));
    }
    origin = path.string();
  }
  FfiProvider p;
  p.origin = origin;
  p.move_from_raised =
      symbol<decltype(p.move_from_raised)>(RTLD_DEFAULT, "TVMFFIErrorMoveFromRaised", origin);
  p.set_raised_from_cstr = symbol<decltype(p.set_raised_from_cstr)>(
      RTLD_DEFAULT, "TVMFFIErrorSetRaisedFromCStr", origin);
  p.dec_ref = symbol<decltype(p.dec_ref)>(RTLD_DEFAULT, "TVMFFIObjectDecRef", origin);
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
