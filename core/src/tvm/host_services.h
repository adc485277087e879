// SPDX-License-Identifier: Apache-2.0
// The runtime services TVM-compiled code calls through the weak "context symbols" a loader fills
// in each library (__TVMBackendParallelLaunch, __TVMFFIEnvModLookupFromImports, ...), and the
// per-library state they act on. docs/tvm-interop.md lists them with their semantics.
#ifndef KILN_TVM_HOST_SERVICES_H_
#define KILN_TVM_HOST_SERVICES_H_

#include <dlpack/dlpack.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/device_backend.h"
#include "kiln/function.h"
#include "kiln/module.h"
#include "kiln/private/task_team.h"
#include "tvm/host_workspace_pool.h"

namespace kiln {
class DeviceContext;
}

namespace kiln::tvm_interop {

struct LibraryContext;

// A function compiled code obtained from __TVMFFIEnvModLookupFromImports: the handle it passes
// back to __TVMFFIFunctionCall.
struct ImportedFunction {
  std::string name;
  Function function;        // unset for the built-in __tvm_set_device
  LibraryContext* library;  // the library that looked it up
};

// What `__tvm_ffi__library_ctx` points at: the library's imports (device code), the devices
// its workspaces and kernels use, and the cpu backend whose task team runs its parallel loops.
// Owned by the library's module; lives as long as its code.
struct LibraryContext {
  // Finds the task team of `devices`' cpu backend (none: parallel loops run as one task).
  LibraryContext(std::string library, const DeviceContext& devices);
  // Logs (debug) what the services did for the library.
  ~LibraryContext();

  std::shared_ptr<const DeviceContext> devices_owner;  // keeps the runtime alive
  std::string library;                                 // the file, for messages
  const DeviceContext& devices;                        // *devices_owner
  Ref<DeviceBackend> cpu;              // keeps the team's plugin loaded; null without a cpu backend
  const KilnTaskTeam* team = nullptr;  // cpu's task team, when it offers one

  // What the services did, for the debug log when the library is unloaded (and the tests that
  // check which runtime served a call).
  std::atomic<uint64_t> workspace_allocations{0};
  std::atomic<uint64_t> workspace_bytes{0};
  std::atomic<uint64_t> parallel_launches{0};
  std::atomic<uint64_t> parallel_tasks{0};  // summed over launches
  HostWorkspacePool host_workspace;         // the cpu device's workspaces
  std::vector<Module> imports;              // searched in order by lookups from imports
  // Whether the library's code can call one of Kiln's services (it defines one of their context
  // symbols): only then does a call into it need the thread's current-library scope
  // (CallScope). Set by fill_context_symbols.
  bool uses_services = false;

  // Finds `name` for compiled code (cached; the result lives as long as this context).
  ImportedFunction* lookup(const std::string& name);

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ImportedFunction>> cache_;
};

// Sets every context symbol `library_handle` (a dlopen handle) defines to Kiln's service, and
// `__tvm_ffi__library_ctx` to `context`. Returns the names of `__TVM*` context symbols the
// library defines that Kiln has no service for (the library cannot run when it calls them).
std::vector<std::string> fill_context_symbols(void* library_handle, LibraryContext* context,
                                              const std::vector<std::string>& defined_symbols);

namespace detail {
// What the services need to know about the current call on this thread. Initial-exec TLS with
// constant initialisation: one thread-pointer-relative access, on every call into a library.
struct ThreadState {
  LibraryContext* library = nullptr;  // the library the running code belongs to
  bool pending = false;               // a service failed: its exception is in pending_error()
  bool device_set = false;            // __tvm_set_device ran on this thread
  DLDevice device{kDLCPU, 0};         // the device it selected
};
extern constinit thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));
// Drops the exception a service recorded but the compiled code did not report.
void discard_pending();
}  // namespace detail

// Marks `context` as the library compiled code runs for on this thread while the scope lives.
class CallScope {
 public:
  explicit CallScope(LibraryContext* context) : previous_(detail::t_state.library) {
    detail::t_state.library = context;
  }
  ~CallScope() { detail::t_state.library = previous_; }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

  // After compiled code returned 0.
  void succeeded() const {
    if (detail::t_state.pending) [[unlikely]]
      detail::discard_pending();
  }
  // After compiled code returned `rc` != 0: rethrows what a Kiln service threw inside the call,
  // else the error the code raised, prefixed by `context`. Needs no scope: static.
  [[noreturn]] static void raise(int rc, const std::string& context);

 private:
  LibraryContext* previous_;
};

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_HOST_SERVICES_H_
