#include "kernel_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "kiln/sdk/abi.hpp"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/memfd_library.hpp"
#include "plugin_state.h"

namespace kiln::cpu {
namespace {

// Throws kiln::sdk::Error(code, message).
[[noreturn]] void throw_error(int32_t code, const std::string& message) {
  throw sdk::Error(code, message);
}

// "major.minor", for ABI messages.
std::string version(unsigned major, unsigned minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

KernelLibrary::KernelLibrary(void* dl, std::string label) : dl_(dl), label_(std::move(label)) {}

KernelLibrary::~KernelLibrary() {
  // Unload first: the library may use its environment until it is gone (e.g. in static
  // destructors that log), and env_ is released only after this body.
  ::dlclose(dl_);
}

std::unique_ptr<KernelLibrary> KernelLibrary::open_file(PluginState& state,
                                                        const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    throw_error(error == ENOENT ? KILN_ERROR_NOT_FOUND : KILN_ERROR_VALUE,
                "cannot load " + path + ": " + std::strerror(error));
  }
  // A bare file name would make dlopen() search the library path instead of opening the
  // file the caller named.
  const std::string dl_path = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void* dl = ::dlopen(dl_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* why = dlerror();
    throw_error(KILN_ERROR_VALUE,
                "cannot load " + path + ": " + (why != nullptr ? why : "dlopen failed"));
  }
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(dl, path));
  library->initialise(state);
  return library;
}

std::unique_ptr<KernelLibrary> KernelLibrary::open_bytes(PluginState& state, const void* data,
                                                         size_t size) {
  std::string label = "in-memory kernel library (" + std::to_string(size) + " bytes)";
  void* dl = sdk::dlopen_bytes(data, size, label);
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(dl, std::move(label)));
  library->initialise(state);
  return library;
}

void KernelLibrary::initialise(PluginState& state) {
  dlerror();
  void* symbol = ::dlsym(dl_, KILN_KERNEL_LIBRARY_SYMBOL);
  if (symbol == nullptr) {
    throw_error(KILN_ERROR_VALUE, label_ + " is not a Kiln kernel library: no " +
                                      KILN_KERNEL_LIBRARY_SYMBOL + " symbol");
  }
  const auto entry = reinterpret_cast<KilnKernelLibraryFn>(symbol);
  const KilnKernelLibrary* library_table = nullptr;
  {
    std::lock_guard<std::mutex> lock(state.init_mutex());
    env_ = state.env_for(dl_, label_);
    library_table = entry(env_->get());
  }
  const std::string ours = version(KILN_ABI_VERSION_MAJOR, KILN_ABI_VERSION_MINOR);
  if (library_table == nullptr) {
    throw_error(KILN_ERROR_ABI, label_ + ": " + KILN_KERNEL_LIBRARY_SYMBOL + " returned NULL");
  }
  if (std::string why =
          sdk::check_struct<KilnKernelLibrary>(library_table, "its KilnKernelLibrary");
      !why.empty()) {
    throw_error(KILN_ERROR_ABI, label_ + ": " + why);
  }
  // A library built against a later minor may have a longer table: read it as ours.
  const KilnKernelLibrary copy = sdk::zero_extended<KilnKernelLibrary>(library_table);
  const KilnKernelLibrary* table = &copy;
  const std::string theirs = version(table->abi_major, table->abi_minor);
  if (table->abi_major != KILN_ABI_VERSION_MAJOR) {
    throw_error(KILN_ERROR_ABI, label_ + " was built for Kiln ABI " + theirs +
                                    " but the cpu plugin implements " + ours +
                                    " (major versions differ)");
  }
  if (table->abi_minor > KILN_ABI_VERSION_MINOR) {
    throw_error(KILN_ERROR_ABI, label_ + " needs Kiln ABI " + theirs +
                                    " but the cpu plugin implements only " + ours +
                                    ": upgrade Kiln");
  }
  if (table->num_functions < 0 || (table->num_functions > 0 && table->functions == nullptr)) {
    throw_error(KILN_ERROR_VALUE, label_ + ": malformed function table (num_functions = " +
                                      std::to_string(table->num_functions) + ")");
  }
  if (std::string why =
          sdk::StridedArray<KilnDeviceBlob>(table->blobs, table->num_blobs).check("KilnDeviceBlob");
      !why.empty()) {
    throw_error(KILN_ERROR_VALUE, label_ + ": malformed blob table (num_blobs = " +
                                      std::to_string(table->num_blobs) + "): " + why);
  }
  for (int32_t i = 0; i < table->num_functions; ++i) {
    const KilnKernelFunction& f = table->functions[i];
    if (f.name == nullptr || f.fn == nullptr) {
      throw_error(KILN_ERROR_VALUE, label_ + ": function #" + std::to_string(i) +
                                        (f.name == nullptr ? " has no name" : " has no code"));
    }
    if (!by_name_.emplace(f.name, &f).second) {
      throw_error(KILN_ERROR_VALUE,
                  label_ + ": function '" + f.name + "' is exported more than once");
    }
    names_.push_back(f.name);
  }
  if (table->entry_name != nullptr && by_name_.count(table->entry_name) == 0) {
    throw_error(KILN_ERROR_VALUE, label_ + ": entry function '" + table->entry_name +
                                      "' is not one of its functions (" + available() + ")");
  }
  table_ = copy;
}

const KilnKernelFunction& KernelLibrary::function(const char* name) const {
  if (name == nullptr) throw_error(KILN_ERROR_VALUE, "function name is NULL");
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    const char* library_name = table_.name != nullptr ? table_.name : "?";
    throw_error(KILN_ERROR_NOT_FOUND, std::string("no function '") + name +
                                          "' in kernel library '" + library_name + "' (" + label_ +
                                          "); available: " + available());
  }
  return *it->second;
}

std::string KernelLibrary::available() const {
  if (names_.empty()) return "none";
  std::string list;
  for (const char* name : names_) {
    if (!list.empty()) list += ", ";
    list += name;
  }
  return list;
}

}  // namespace kiln::cpu
