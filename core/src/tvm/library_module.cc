// SPDX-License-Identifier: Apache-2.0
// Loading a TVM-compiled library: dlopen a private copy of it (tvm/private_copy.h) once Kiln
// answers the C functions it imports, fill the copy's context symbols with Kiln's services, expose
// its
// `__tvm_ffi_<name>` functions, and rebuild the module tree of its embedded library blob
// (device code, a Relax executable) on Kiln's own modules.
#include "tvm/library_module.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "kiln/device_code.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/sdk/support/library_claims.hpp"
#include "kiln/vm/virtual_machine.h"
#include "tvm/elf_symbols.h"
#include "tvm/ffi_provider.h"
#include "tvm/host_services.h"
#include "tvm/library_blob.h"
#include "tvm/private_copy.h"
#include "tvm/relax_executable.h"
#include "tvm/tvm_ffi_abi.h"

namespace kiln::tvm_interop {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kExportPrefix = "__tvm_ffi_";
constexpr std::string_view kLibrarySymbolPrefix = "__tvm_ffi__";  // blob, context, metadata
constexpr const char* kBlobSymbol = "__tvm_ffi__library_bin";

// The C functions of tvm-ffi a library may import and the provider answers.
const std::set<std::string> kProvidedImports(std::begin(kFfiImports), std::end(kFfiImports));

// One exported function: what the KilnCallable's `self` points at.
struct TvmFunction {
  SafeCall call;
  LibraryContext* context;
  bool uses_services;  // context->uses_services, beside `call` for the hot path
  std::string label;   // "<file>: <name>", the prefix of its errors
};

// The dlopen handle and everything the library's code refers to. Kept alive by every function
// and module made from the library.
class LoadedLibrary : public Object {
 public:
  LoadedLibrary(void* handle, std::unique_ptr<LibraryContext> context)
      : handle_(handle), context_(std::move(context)) {}
  ~LoadedLibrary() override {
    functions_.clear();
    context_.reset();
    sdk::close_claimed_library(handle_);
  }
  void* handle() const { return handle_; }
  LibraryContext* context() const { return context_.get(); }
  TvmFunction* add(SafeCall call, const std::string& label) {
    functions_.push_back(std::make_unique<TvmFunction>(
        TvmFunction{call, context_.get(), context_->uses_services, label}));
    return functions_.back().get();
  }

 private:
  void* handle_;
  std::unique_ptr<LibraryContext> context_;
  std::vector<std::unique_ptr<TvmFunction>> functions_;
};

// A shape argument as tvm-ffi passes it: an object (header, then the cell) that lives for the
// call; compiled code reads it and never takes a reference.
struct StackShape {
  FfiObject header;
  FfiShapeCell cell;
};

[[noreturn, gnu::cold, gnu::noinline]] void bad_argument(const TvmFunction& f, int32_t i,
                                                         int32_t type_code) {
  throw TypeError(fmt::format("{}: argument {} is a {}, which TVM-compiled functions do not take",
                              f.label, i, type_code_name(type_code)));
}

[[noreturn, gnu::cold, gnu::noinline]] void bad_result(const TvmFunction& f, int32_t type_index) {
  throw TypeError(
      fmt::format("{}: returned a value of tvm-ffi type index {}, which Kiln does not "
                  "take from compiled functions",
                  f.label, type_index));
}

// KilnAny -> TVMFFIAny for an argument. Tensors pass as their DLTensor (no copy).
[[gnu::noinline]] void to_ffi(const KilnAny& k, FfiAny* a, StackShape* shape, const TvmFunction& f,
                              int32_t i) {
  a->zero_padding = 0;
  a->v_int64 = 0;
  switch (k.type_code) {
    case KILN_TYPE_NONE:
      a->type_index = kNone;
      return;
    case KILN_TYPE_BOOL:
      a->type_index = kBool;
      a->v_int64 = k.value.v_int64;
      return;
    case KILN_TYPE_INT:
      a->type_index = kInt;
      a->v_int64 = k.value.v_int64;
      return;
    case KILN_TYPE_FLOAT:
      a->type_index = kFloat;
      a->v_float64 = k.value.v_float64;
      return;
    case KILN_TYPE_STRING:
      a->type_index = kRawStr;
      a->v_c_str = k.value.v_str;
      return;
    case KILN_TYPE_BYTES:  // KilnByteArray and TVMFFIByteArray share their layout
      a->type_index = kByteArrayPtr;
      a->v_ptr = const_cast<KilnByteArray*>(k.value.v_bytes);
      return;
    case KILN_TYPE_DEVICE:
      a->type_index = kDevice;
      a->v_device = k.value.v_device;
      return;
    case KILN_TYPE_DTYPE:
      a->type_index = kDataType;
      a->v_dtype = k.value.v_dtype;
      return;
    case KILN_TYPE_TENSOR:
      a->type_index = kDLTensorPtr;
      a->v_ptr = k.value.v_tensor;
      return;
    case KILN_TYPE_OPAQUE:
      a->type_index = kOpaquePtr;
      a->v_ptr = k.value.v_ptr;
      return;
    case KILN_TYPE_SHAPE:
      *shape = StackShape{{1, kShape, 0, nullptr},
                          {k.value.v_shape->dims, static_cast<size_t>(k.value.v_shape->ndim)}};
      a->type_index = kShape;
      a->v_obj = &shape->header;
      return;
    default:
      bad_argument(f, i, k.type_code);
  }
}

static_assert(sizeof(KilnByteArray) == sizeof(FfiByteArray) &&
                  offsetof(KilnByteArray, size) == offsetof(FfiByteArray, size),
              "byte arrays pass through unchanged");

// tvm-ffi's type index for each Kiln type code whose 8-byte payload passes unchanged (-1: the
// value needs building, or cannot pass). BYTES: KilnByteArray and TVMFFIByteArray share their
// layout; TENSOR: the DLTensor pointer.
constexpr int32_t kSameBits = -1;
constexpr int32_t kTypeIndexOf[16] = {
    kNone,          // KILN_TYPE_NONE
    kBool,          // KILN_TYPE_BOOL
    kInt,           // KILN_TYPE_INT
    kFloat,         // KILN_TYPE_FLOAT
    kRawStr,        // KILN_TYPE_STRING
    kByteArrayPtr,  // KILN_TYPE_BYTES
    kDevice,        // KILN_TYPE_DEVICE
    kDataType,      // KILN_TYPE_DTYPE
    kSameBits,      // KILN_TYPE_SHAPE: a shape object
    kDLTensorPtr,   // KILN_TYPE_TENSOR
    kSameBits,      // KILN_TYPE_FUNCTION: not passed
    kOpaquePtr,     // KILN_TYPE_OPAQUE
    kSameBits,      // 12..15: not ABI type codes
    kSameBits,     kSameBits, kSameBits,
};

// Converts `n` arguments into `a`: the payload is copied as is, the tag mapped by table; shapes
// become objects in `shapes`. The loop is the whole per-argument cost of a call.
inline void convert_args(const TvmFunction& f, const KilnAny* args, int32_t n, FfiAny* a,
                         StackShape* shapes) {
  for (int32_t i = 0; i < n; ++i) {
    const uint32_t code = static_cast<uint32_t>(args[i].type_code);
    const int32_t index = code < 16 ? kTypeIndexOf[code] : kSameBits;
    // The type index and its zero padding as one word, then the payload: two 8-byte stores.
    const uint64_t head = static_cast<uint32_t>(index);
    std::memcpy(&a[i], &head, sizeof(head));
    a[i].v_int64 = args[i].value.v_int64;
    if (index == kSameBits) [[unlikely]]
      to_ffi(args[i], &a[i], &shapes[i], f, i);
  }
}

// Converts a result of compiled code into `ret` (which comes pre-set to NONE).
inline void store_result(const TvmFunction& f, const FfiAny& result, KilnAny* ret) {
  switch (result.type_index) {
    case kNone:
      break;
    case kInt:
      ret->type_code = KILN_TYPE_INT;
      ret->value.v_int64 = result.v_int64;
      break;
    case kBool:
      ret->type_code = KILN_TYPE_BOOL;
      ret->value.v_int64 = result.v_int64 != 0;
      break;
    case kFloat:
      ret->type_code = KILN_TYPE_FLOAT;
      ret->value.v_float64 = result.v_float64;
      break;
    default:
      bad_result(f, result.type_index);
  }
}

// Calls `f` with converted arguments and converts its result into `ret`; throws what the call
// raised.
void call_converted(const TvmFunction& f, const FfiAny* a, int32_t num_args, KilnAny* ret) {
  FfiAny result;
  result.type_index = kNone;
  CallScope scope(f.context);
  if (const int rc = f.call(nullptr, a, num_args, &result); rc != 0) [[unlikely]] {
    CallScope::raise(rc, f.label);
  }
  scope.succeeded();
  store_result(f, result, ret);
}

// Any call: arguments of every kind, any count, errors as KilnErrors.
[[gnu::noinline]] KilnError* call_general(const TvmFunction& f, const KilnAny* args,
                                          int32_t num_args, KilnAny* ret) {
  try {
    std::vector<FfiAny> a(static_cast<size_t>(num_args));
    std::vector<StackShape> shapes(static_cast<size_t>(num_args));
    convert_args(f, args, num_args, a.data(), shapes.data());
    call_converted(f, a.data(), num_args, ret);
    return nullptr;
  } catch (...) {
    return kiln::detail::error_from_current_exception("");
  }
}

// The end of a fast call that failed (rc != 0), left a service's exception pending, or returned
// a value (kernels return none).
[[gnu::cold, gnu::noinline]] KilnError* finish_unusual_call(const TvmFunction& f, int rc,
                                                            const FfiAny& result, KilnAny* ret) {
  try {
    if (rc != 0) CallScope::raise(rc, f.label);
    detail::discard_pending();
    store_result(f, result, ret);
    return nullptr;
  } catch (...) {
    return kiln::detail::error_from_current_exception("");
  }
}

// The KilnCallable of every exported function. The common call — up to kFast arguments whose
// payload passes unchanged (tensors, scalars, strings, devices) and no result — is
// straight-line code that catches nothing; everything else goes to call_general or
// finish_unusual_call.
KilnError* call_tvm_function(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret) {
  const auto& f = *static_cast<const TvmFunction*>(self);
  constexpr int32_t kFast = 4;
  if (num_args > kFast) [[unlikely]]
    return call_general(f, args, num_args, ret);
  FfiAny a[kFast];
  for (int32_t i = 0; i < num_args; ++i) {
    const uint32_t code = static_cast<uint32_t>(args[i].type_code);
    const int32_t index = code < 16 ? kTypeIndexOf[code] : kSameBits;
    if (index == kSameBits) [[unlikely]]
      return call_general(f, args, num_args, ret);
    // The type index and its zero padding as one word, then the payload: two 8-byte stores.
    const uint64_t head = static_cast<uint32_t>(index);
    std::memcpy(&a[i], &head, sizeof(head));
    a[i].v_int64 = args[i].value.v_int64;
  }
  FfiAny result;
  result.type_index = kNone;
  int rc = 0;
  bool pending = false;
  if (!f.uses_services) [[likely]] {  // nothing in the call can read the scope
    rc = f.call(nullptr, a, num_args, &result);
  } else {
    const CallScope scope(f.context);
    rc = f.call(nullptr, a, num_args, &result);
    pending = detail::t_state.pending;
  }
  if (rc != 0 || pending || result.type_index != kNone) [[unlikely]]
    return finish_unusual_call(f, rc, result, ret);
  return nullptr;
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw NotFoundError(fmt::format("cannot open {}", path.string()));
  std::vector<uint8_t> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    throw RuntimeError(fmt::format("cannot read {}", path.string()));
  }
  return bytes;
}

bool is_tvm_export(const std::string& name) {
  return name.rfind(kExportPrefix, 0) == 0 && name.rfind(kLibrarySymbolPrefix, 0) != 0 &&
         name.size() > kExportPrefix.size();
}

// Refuses libraries Kiln cannot run, naming why, before anything is loaded.
void check_compatible(const std::vector<ElfSymbol>& symbols, const fs::path& path) {
  for (const ElfSymbol& s : symbols) {
    if (s.defined && (s.name == "__tvm_main__" || s.name == "__tvm_module_ctx")) {
      throw ValueError(fmt::format(
          "{} was built by TVM 0.20 or earlier (it exports {}, the runtime ABI before tvm-ffi); "
          "Kiln runs libraries of the tvm-ffi {}.{} ABI (TVM 0.21 and later): rebuild it with "
          "a current TVM",
          path.string(), s.name, kTvmFfiMajor, kTvmFfiMinor));
    }
  }
  for (const ElfSymbol& s : symbols) {
    if (!s.defined &&
        (s.name.rfind("TVMFFI", 0) == 0 || s.name.rfind("TVMBackend", 0) == 0 ||
         s.name.rfind("TVMAPI", 0) == 0) &&
        kProvidedImports.count(s.name) == 0) {
      throw ValueError(fmt::format(
          "{} needs {} from the process, which is not in the tvm-ffi {}.{} subset Kiln provides "
          "(docs/tvm-interop.md lists it); the library was built for another tvm-ffi version",
          path.string(), s.name, kTvmFfiMajor, kTvmFfiMinor));
    }
  }
}

// The module of one entry of the library blob that is not the library itself.
Module module_from_blob(const BlobModule& entry, std::vector<Module> imports,
                        const std::string& where, const DeviceContext& devices) {
  if (entry.kind == "relax.VMExecutable") {
    // Kernel names resolve against the imports (the library); the bytecode names the library's
    // file so that a package made from the module finds it again.
    vm::Executable exec = read_relax_executable(entry.bytes, where);
    for (const Module& i : imports) {
      if (i.get()->self_contained) exec.imports.push_back(i.artifacts().front().name);
    }
    return vm::make_executable_module(std::move(exec), std::move(imports), "relax_vm.kvm", devices);
  }
  if (!is_device_module_kind(entry.kind)) {
    throw ValueError(fmt::format(
        "{}: a module of kind '{}', which Kiln does not load (it loads the library, device code "
        "of kinds opencl, cuda and rocm, and relax.VMExecutable)",
        where, entry.kind));
  }
  std::vector<DeviceCode> code;
  code.push_back(device_code_from_tvm(entry, where));
  Module m = make_device_code_module(std::move(code), devices);
  for (Module& i : imports) m.import_module(i);
  return m;
}

class TvmLibraryLoader : public FormatLoader {
 public:
  std::string describe() const override { return "TVM-compiled libraries (tvm-ffi)"; }
  std::vector<std::string> formats() const override { return {"so"}; }
  bool accepts(const fs::path& path, const std::string& format) const override {
    if (format != "so") return false;
    try {
      return is_tvm_library(read_file(path));
    } catch (const Error&) {
      return false;  // not an ELF file we can read: another loader may
    }
  }

  Module load(const fs::path& path, ModuleLoadContext& load) const override {
    const std::vector<uint8_t> file = read_file(path);
    const std::vector<ElfSymbol> symbols = read_dynamic_symbols(file, path.string());
    check_compatible(symbols, path);
    ffi_provider();  // before dlopen: the copy imports from it (throws why it is missing)

    std::vector<uint8_t> copy = file;
    rename_ffi_imports(copy, symbols, path.string());
    void* handle = load_private_copy(copy, path.filename().string(), path.string());
    auto library = make_object<LoadedLibrary>(
        handle, std::make_unique<LibraryContext>(path.filename().string(), load.devices()));
    std::vector<std::string> names;
    for (const ElfSymbol& s : symbols) {
      if (s.defined) names.push_back(s.name);
    }
    if (auto unknown = fill_context_symbols(handle, library->context(), names); !unknown.empty()) {
      throw ValueError(fmt::format(
          "{} calls runtime services Kiln does not provide ({}); the library was built for "
          "another tvm-ffi version than {}.{}",
          path.string(), fmt::join(unknown, ", "), kTvmFfiMajor, kTvmFfiMinor));
    }

    bool has_main = false;
    for (const std::string& n : names) has_main |= n == "__tvm_ffi_main";
    auto host = make_object<ModuleObj>(kTvmLibraryKind, has_main ? "main" : "");
    for (const ElfSymbol& s : symbols) {
      if (!s.defined || !s.function || !is_tvm_export(s.name)) continue;
      const std::string name = s.name.substr(kExportPrefix.size());
      auto call = reinterpret_cast<SafeCall>(dlsym(handle, s.name.c_str()));
      if (call == nullptr) continue;
      TvmFunction* state =
          library->add(call, fmt::format("{}: {}", path.filename().string(), name));
      host->add_function(name,
                         Function::from_abi(KilnCallable{call_tvm_function, state}, library, name));
    }
    host->payload = library;
    host->set_source(path.string());
    host->artifacts.push_back(Artifact{path.filename().string(), "host_library", file});
    host->self_contained = true;
    Module host_module(std::move(host));

    const auto* blob_symbol = find_symbol(symbols, kBlobSymbol);
    if (blob_symbol == nullptr) return host_module;
    const auto* blob = static_cast<const uint8_t*>(dlsym(handle, kBlobSymbol));
    if (blob == nullptr) {
      throw ValueError(
          fmt::format("{}: {} is listed but cannot be found", path.string(), kBlobSymbol));
    }
    const std::string where = fmt::format("{}: {}", path.string(), kBlobSymbol);
    const std::vector<BlobModule> entries =
        parse_library_blob(std::span<const uint8_t>(blob, blob_symbol->size), where);
    // Children before parents: the blob's import tree is acyclic (checked by the parser), so
    // building in reverse topological order gives every module its imports when it is made.
    std::vector<Module> built(entries.size());
    std::vector<bool> done(entries.size(), false);
    std::function<Module(size_t)> build = [&](size_t i) -> Module {
      if (done[i]) return built[i];
      std::vector<Module> imports;
      for (size_t c : entries[i].imports) imports.push_back(build(c));
      const std::string entry_where =
          fmt::format("{} (module {}, kind '{}')", where, i, entries[i].kind);
      if (entries[i].kind == "_lib") {
        for (Module& m : imports) {
          host_module.import_module(m);
          library->context()->imports.push_back(m);
        }
        built[i] = host_module;
      } else {
        built[i] = module_from_blob(entries[i], std::move(imports), entry_where, load.devices());
      }
      done[i] = true;
      return built[i];
    };
    Module root = build(0);
    if (root.get() != host_module.get()) {
      // The library file alone loads back as this tree: export it, not the parts.
      root.get()->artifacts = host_module.artifacts();
      root.get()->self_contained = true;
    }
    return root;
  }
};

}  // namespace

std::shared_ptr<const FormatLoader> tvm_library_format_loader() {
  return std::make_shared<TvmLibraryLoader>();
}

}  // namespace kiln::tvm_interop
