// SPDX-License-Identifier: Apache-2.0
// Loading SDK-built kernel libraries, and the default kernel environment (see
// kiln/sdk/support/kernel_library.hpp).
#include "kiln/sdk/support/kernel_library.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "kiln/sdk/abi.hpp"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/library_claims.hpp"
#include "kiln/sdk/support/memfd_library.hpp"

namespace kiln::sdk {
namespace {

[[noreturn]] void throw_error(int32_t code, const std::string& message) {
  throw Error(code, message);
}

// "major.minor", for ABI messages.
std::string version(unsigned major, unsigned minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

KernelLibrary::KernelLibrary(void* dl, std::string label) : dl_(dl), label_(std::move(label)) {}

KernelLibrary::~KernelLibrary() {
  // Unload first: the library may use its environment until it is gone (e.g. in static
  // destructors that log), and env_owner_ is released only after this body.
  close_claimed_library(dl_);
}

std::unique_ptr<KernelLibrary> KernelLibrary::open_file(const std::string& path,
                                                        const KernelLibraryOptions& options) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    throw_error(error == ENOENT ? KILN_ERROR_NOT_FOUND : KILN_ERROR_VALUE,
                "cannot load " + path + ": " + std::strerror(error));
  }
  // A bare file name would make dlopen() search the library path instead of opening the
  // file the caller named.
  const std::string dl_path = path.find('/') == std::string::npos ? "./" + path : path;
  // The dynamic loader returns the object it has for a name (or a file) it knows: a library
  // loaded from this path before, perhaps rewritten since, or one another loader holds. Each
  // KernelLibrary is an object of its own, so the file is then loaded from its bytes instead.
  if (void* loaded = ::dlopen(dl_path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    ::dlclose(loaded);
    return open_copy_of_file(path, options);
  }
  dlerror();
  void* dl = ::dlopen(dl_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* why = dlerror();
    throw_error(KILN_ERROR_VALUE,
                "cannot load " + path + ": " + (why != nullptr ? why : "dlopen failed"));
  }
  if (!claim_library(dl)) {  // the same file under another name (a link) is loaded already
    ::dlclose(dl);
    return open_copy_of_file(path, options);
  }
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(dl, path));
  library->initialise(options);
  return library;
}

std::unique_ptr<KernelLibrary> KernelLibrary::open_copy_of_file(
    const std::string& path, const KernelLibraryOptions& options) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw_error(KILN_ERROR_VALUE, "cannot read " + path);
  void* dl = dlopen_bytes(bytes.data(), bytes.size(), path);
  claim_library_or_close(dl, path);
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(dl, path));
  library->initialise(options);
  return library;
}

std::unique_ptr<KernelLibrary> KernelLibrary::open_bytes(const void* data, size_t size,
                                                         const KernelLibraryOptions& options) {
  std::string label = "in-memory kernel library (" + std::to_string(size) + " bytes)";
  void* dl = dlopen_bytes(data, size, label);
  claim_library_or_close(dl, label);
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(dl, std::move(label)));
  library->initialise(options);
  return library;
}

void KernelLibrary::initialise(const KernelLibraryOptions& options) {
  if (!options.make_env) {
    throw_error(KILN_ERROR_VALUE, label_ + ": KernelLibraryOptions::make_env is not set");
  }
  dlerror();
  void* symbol = ::dlsym(dl_, KILN_KERNEL_LIBRARY_SYMBOL);
  if (symbol == nullptr) {
    throw_error(KILN_ERROR_VALUE, label_ + " is not a Kiln kernel library: no " +
                                      KILN_KERNEL_LIBRARY_SYMBOL + " symbol");
  }
  const auto entry = reinterpret_cast<KilnKernelLibraryFn>(symbol);
  const KilnKernelLibrary* library_table = nullptr;
  {
    std::unique_lock<std::mutex> lock;
    if (options.init_mutex != nullptr) lock = std::unique_lock<std::mutex>(*options.init_mutex);
    KernelLibraryEnv env = options.make_env(dl_, label_);
    env_owner_ = std::move(env.owner);
    library_table = entry(env.env);
  }
  const std::string ours = version(KILN_ABI_VERSION_MAJOR, KILN_ABI_VERSION_MINOR);
  if (library_table == nullptr) {
    throw_error(KILN_ERROR_ABI, label_ + ": " + KILN_KERNEL_LIBRARY_SYMBOL + " returned NULL");
  }
  if (std::string why = check_struct<KilnKernelLibrary>(library_table, "its KilnKernelLibrary");
      !why.empty()) {
    throw_error(KILN_ERROR_ABI, label_ + ": " + why);
  }
  // A library built against a later minor may have a longer table: read it as ours.
  const KilnKernelLibrary table = zero_extended<KilnKernelLibrary>(library_table);
  const std::string theirs = version(table.abi_major, table.abi_minor);
  if (table.abi_major != KILN_ABI_VERSION_MAJOR) {
    throw_error(KILN_ERROR_ABI, label_ + " was built for Kiln ABI " + theirs + " but " +
                                    options.loader_name + " implements " + ours +
                                    " (major versions differ)");
  }
  if (table.abi_minor > KILN_ABI_VERSION_MINOR) {
    throw_error(KILN_ERROR_ABI, label_ + " needs Kiln ABI " + theirs + " but " +
                                    options.loader_name + " implements only " + ours +
                                    ": upgrade Kiln");
  }
  if (table.num_functions < 0 || (table.num_functions > 0 && table.functions == nullptr)) {
    throw_error(KILN_ERROR_VALUE, label_ + ": malformed function table (num_functions = " +
                                      std::to_string(table.num_functions) + ")");
  }
  if (std::string why =
          StridedArray<KilnDeviceBlob>(table.blobs, table.num_blobs).check("KilnDeviceBlob");
      !why.empty()) {
    throw_error(KILN_ERROR_VALUE, label_ + ": malformed blob table (num_blobs = " +
                                      std::to_string(table.num_blobs) + "): " + why);
  }
  for (int32_t i = 0; i < table.num_functions; ++i) {
    const KilnKernelFunction& f = table.functions[i];
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
  if (table.entry_name != nullptr && by_name_.count(table.entry_name) == 0) {
    throw_error(KILN_ERROR_VALUE, label_ + ": entry function '" + table.entry_name +
                                      "' is not one of its functions (" + available() + ")");
  }
  table_ = table;
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

// ---- DefaultKernelEnvs

namespace {

// One environment: the C table and what its slots need.
struct DefaultKernelEnv {
  KilnKernelEnv env{};
  const KilnHostServices* host = nullptr;
  std::string label;
  int32_t num_threads = 1;
  DefaultKernelEnvs::ParallelFor parallel_for;  // empty: threads started per call
};

const KilnHostServices* host_of(void* ctx) { return static_cast<DefaultKernelEnv*>(ctx)->host; }

KilnError* env_error_new(void* ctx, int32_t code, const char* message) {
  const KilnHostServices* host = host_of(ctx);
  return host->error_new(host->host_ctx, code, message);
}

void env_error_free(void* ctx, KilnError* error) {
  const KilnHostServices* host = host_of(ctx);
  if (error != nullptr && host->error_free != nullptr) host->error_free(host->host_ctx, error);
}

void env_log(void* ctx, int32_t level, const char* message) {
  const auto* self = static_cast<DefaultKernelEnv*>(ctx);
  const KilnHostServices* host = self->host;
  if (host->log == nullptr) return;
  if (host->log_enabled != nullptr && !host->log_enabled(host->host_ctx, level)) return;
  try {  // a log line is not worth an exception across the ABI
    const std::string line = self->label + ": " + (message != nullptr ? message : "");
    host->log(host->host_ctx, level, plugin_name().c_str(), line.c_str());
  } catch (...) {
  }
}

// Splits [begin, end) into at most num_threads chunks of at least `grain` elements; runs chunk
// 0 on the caller and the others on threads started here (on the caller, in order, when a
// thread cannot be started). Returns the first chunk's error in chunk order; chunks not begun
// after an error are skipped, and every other error is freed.
KilnError* env_parallel_for(void* ctx, int64_t begin, int64_t end, int64_t grain,
                            KilnParallelBody body, void* closure) {
  const auto* self = static_cast<DefaultKernelEnv*>(ctx);
  if (body == nullptr) return env_error_new(ctx, KILN_ERROR_VALUE, "parallel_for: body is NULL");
  if (self->parallel_for) return self->parallel_for(begin, end, grain, body, closure);
  if (end <= begin) return nullptr;
  const int64_t count = end - begin;
  const int64_t chunk_floor = std::max<int64_t>(grain, 1);
  const int64_t chunks =
      std::clamp<int64_t>(count / chunk_floor, 1, std::max<int32_t>(self->num_threads, 1));
  if (chunks == 1) return body(closure, begin, end);

  std::vector<KilnError*> errors(static_cast<size_t>(chunks), nullptr);
  std::atomic<bool> failed{false};
  auto run = [&](int64_t c) {
    if (failed.load(std::memory_order_relaxed)) return;
    const int64_t b = begin + count * c / chunks;
    const int64_t e = begin + count * (c + 1) / chunks;
    if (KilnError* err = body(closure, b, e)) {
      errors[static_cast<size_t>(c)] = err;
      failed.store(true, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  int64_t started = 1;
  try {
    threads.reserve(static_cast<size_t>(chunks - 1));
    for (; started < chunks; ++started) threads.emplace_back(run, started);
  } catch (...) {
    // Out of threads or memory: what did not start runs on the caller below.
  }
  run(0);
  for (int64_t c = started; c < chunks; ++c) run(c);
  for (std::thread& t : threads) t.join();
  KilnError* first = nullptr;
  for (KilnError* err : errors) {
    if (err == nullptr) continue;
    if (first == nullptr) {
      first = err;
    } else {
      env_error_free(ctx, err);
    }
  }
  return first;
}

}  // namespace

DefaultKernelEnvs::DefaultKernelEnvs(int32_t num_threads, const KilnHostServices* host,
                                     ParallelFor parallel_for)
    : num_threads_(
          num_threads > 0
              ? num_threads
              : std::max<int32_t>(1, static_cast<int32_t>(std::thread::hardware_concurrency()))),
      host_(host),
      parallel_for_(std::move(parallel_for)) {}

KernelEnvFactory DefaultKernelEnvs::factory() {
  return [this](void* dl_handle, const std::string& label) -> KernelLibraryEnv {
    const KilnHostServices* host = host_ != nullptr ? host_ : host_services();
    if (host == nullptr) {
      throw Error(KILN_ERROR_RUNTIME,
                  label + ": no host services yet (load kernel libraries after negotiation)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = by_handle_.begin(); it != by_handle_.end();) {
      it = it->second.expired() ? by_handle_.erase(it) : std::next(it);
    }
    if (auto it = by_handle_.find(dl_handle); it != by_handle_.end()) {
      if (std::shared_ptr<const void> owner = it->second.lock()) {
        return {owner, &static_cast<const DefaultKernelEnv*>(owner.get())->env};
      }
    }
    auto made = std::make_shared<DefaultKernelEnv>();
    made->host = host;
    made->label = label;
    made->num_threads = num_threads_;
    made->parallel_for = parallel_for_;
    made->env = make_table<KilnKernelEnv>();
    made->env.ctx = made.get();
    made->env.error_new = env_error_new;
    made->env.error_free = env_error_free;
    made->env.log = env_log;
    made->env.parallel_for = env_parallel_for;
    made->env.num_threads = num_threads_;
    std::shared_ptr<const void> owner = made;
    by_handle_[dl_handle] = owner;
    return {owner, &made->env};
  };
}

}  // namespace kiln::sdk
