// SPDX-License-Identifier: Apache-2.0
// Loading SDK-built kernel libraries (docs/plugin-abi.md §11) from a file or from bytes, for any
// backend or loader whose device code is host code: dlopen, the kiln_kernel_library() call with
// an environment, and every check of §11.2 (ABI version, table size, function table, blobs).
// The cpu plugin's "so" loader and module_load use it; so can a vendor's backend.
//
//   kiln::sdk::DefaultKernelEnvs envs;  // errors and logs to the host, a thread parallel_for
//   auto library = kiln::sdk::KernelLibrary::open_bytes(data, size, {"mydev", envs.factory()});
//   const KilnKernelFunction& f = library->function("vector_add");
#ifndef KILN_SDK_SUPPORT_KERNEL_LIBRARY_HPP_
#define KILN_SDK_SUPPORT_KERNEL_LIBRARY_HPP_

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/c/host.h"
#include "kiln/c/kernel.h"

namespace kiln::sdk {

// The environment a kernel library's kiln_kernel_library() receives. `owner` keeps `env`
// alive; the KernelLibrary holds it until after dlclose, since the library may keep `env`.
struct KernelLibraryEnv {
  std::shared_ptr<const void> owner;
  const KilnKernelEnv* env = nullptr;
};

// Makes (or reuses) the environment for the library dlopen()ed as `dl_handle`, named `label`
// in messages. KernelLibrary gives every library a handle of its own; a factory used by other
// loaders as well should still keep one environment per handle, since dlopen of a library
// already loaded returns the same handle and the library may keep the environment it was given.
using KernelEnvFactory = std::function<KernelLibraryEnv(void* dl_handle, const std::string& label)>;

// How KernelLibrary loads.
struct KernelLibraryOptions {
  // Who loads, in ABI messages: "... but <loader> implements only 1.0: upgrade Kiln".
  std::string loader_name = "this loader";
  // Required: the environment for each library (see DefaultKernelEnvs).
  KernelEnvFactory make_env;
  // Held (when not NULL) around make_env and the library's kiln_kernel_library() call, for
  // loaders whose environments or libraries must be initialised one at a time. Borrowed.
  std::mutex* init_mutex = nullptr;
};

// One loaded kernel library. Every pointer it hands out (names, functions, blobs) lives until
// it is destroyed, which dlclose()s the library and then drops its environment. Not copyable.
class KernelLibrary {
 public:
  // dlopen()s the file at `path` and initialises it. The library is a dynamic-loader object of
  // its own: when the path (or the same file under another name) is loaded already, by Kiln or
  // anyone else in the process, a copy of the file's current bytes is loaded from memory
  // instead. Throws kiln::sdk::Error:
  // KILN_ERROR_NOT_FOUND when the file does not exist, KILN_ERROR_VALUE when the dynamic
  // loader rejects it (with the dlerror() text) or it is not a Kiln kernel library, and the
  // errors of initialisation: KILN_ERROR_VALUE for a malformed function or blob table,
  // duplicate function names or an entry that is not a function; KILN_ERROR_ABI for a NULL
  // table, one smaller than the 1.0 layout, another major version or a newer minor.
  static std::unique_ptr<KernelLibrary> open_file(const std::string& path,
                                                  const KernelLibraryOptions& options);
  // Loads `size` bytes at `data` (borrowed; copied into a memory file) and initialises them,
  // as open_file() does.
  static std::unique_ptr<KernelLibrary> open_bytes(const void* data, size_t size,
                                                   const KernelLibraryOptions& options);
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;
  ~KernelLibrary();

  // The path, or a description of an in-memory library, as used in messages.
  const std::string& label() const { return label_; }
  // The library's table as this SDK compiled KilnKernelLibrary (a zero-extended copy; its
  // pointers are borrowed from the library).
  const KilnKernelLibrary& table() const { return table_; }
  // The function names in table order (borrowed from the library).
  const std::vector<const char*>& function_names() const { return names_; }
  // Finds function `name` (borrowed); throws kiln::sdk::Error(KILN_ERROR_NOT_FOUND) listing
  // the available names, or KILN_ERROR_VALUE for a NULL name.
  const KilnKernelFunction& function(const char* name) const;

 private:
  // Takes ownership of `dl` (a dlopen handle) at once, so that a failing initialise() still
  // closes it.
  KernelLibrary(void* dl, std::string label);
  // Loads the current bytes of the file at `path` from memory, as open_file() does.
  static std::unique_ptr<KernelLibrary> open_copy_of_file(const std::string& path,
                                                          const KernelLibraryOptions& options);
  void initialise(const KernelLibraryOptions& options);
  std::string available() const;

  void* dl_;
  std::string label_;
  std::shared_ptr<const void> env_owner_;
  KilnKernelLibrary table_{};
  std::vector<const char*> names_;
  std::unordered_map<std::string_view, const KilnKernelFunction*> by_name_;
};

// Kernel environments made from a plugin's host services: errors through the host's factory,
// log lines through the host's logger as "<label>: ...", and a parallel_for. By default that
// splits a loop over up to `num_threads` threads (the caller's among them), each chunk at least
// `grain` elements, starting the threads per call, which costs tens of microseconds: a backend
// that runs many small parallel kernels passes its own (the cpu plugin passes its pool's). One
// environment per dlopen handle, kept while a library uses it (a handle another loader shares keeps
// the environment of its last initialisation). Must outlive every KernelLibrary opened with its
// factory.
class DefaultKernelEnvs {
 public:
  // A parallel_for to offer instead of the default threads; the arguments and result are those
  // of KilnKernelEnv::parallel_for after `ctx`. Must not throw.
  using ParallelFor = std::function<KilnError*(int64_t begin, int64_t end, int64_t grain,
                                               KilnParallelBody body, void* closure)>;

  // `num_threads` < 1 means std::thread::hardware_concurrency(). `host` (borrowed, outlives
  // this object): the services errors and logs go to; NULL means the ones the plugin
  // negotiated (kiln::sdk::host_services), read when an environment is made.
  explicit DefaultKernelEnvs(int32_t num_threads = 0, const KilnHostServices* host = nullptr,
                             ParallelFor parallel_for = {});
  DefaultKernelEnvs(const DefaultKernelEnvs&) = delete;
  DefaultKernelEnvs& operator=(const DefaultKernelEnvs&) = delete;

  // The factory for KernelLibraryOptions::make_env; it refers to this object.
  KernelEnvFactory factory();
  // The parallelism each environment offers.
  int32_t num_threads() const { return num_threads_; }

 private:
  int32_t num_threads_;
  const KilnHostServices* host_;
  ParallelFor parallel_for_;
  std::mutex mu_;
  std::unordered_map<void*, std::weak_ptr<const void>> by_handle_;
};

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_KERNEL_LIBRARY_HPP_
