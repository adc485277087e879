// SPDX-License-Identifier: Apache-2.0
// The services behind TVM's context symbols. Compiled code calls them with no context argument,
// so the library a call runs for is the thread's current one (CallScope), carried over to the
// worker threads of a parallel launch.
#include "tvm/host_services.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "ffi/error_object.h"
#include "kiln/device_backend.h"
#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "tvm/ffi_provider.h"
#include "tvm/tvm_ffi_abi.h"

namespace kiln::tvm_interop {

LibraryContext::LibraryContext(std::string library, const DeviceContext& devices)
    : devices_owner(devices.retain()),
      library(std::move(library)),
      devices(*devices_owner),
      cpu(devices.find_backend(kDLCPU)) {
  if (cpu) team = kiln_find_task_team(cpu->table().next);
}

LibraryContext::~LibraryContext() {
  if (log_level() > LogLevel::kDebug) return;
  log(LogLevel::kDebug, "tvm",
      fmt::format("{}: served {} workspace allocations ({} bytes) from Kiln's backends and {} "
                  "parallel launches ({} tasks) on {}",
                  library, workspace_allocations.load(), workspace_bytes.load(),
                  parallel_launches.load(), parallel_tasks.load(),
                  team != nullptr
                      ? fmt::format("the {} plugin's task team of {} threads ({})",
                                    cpu->plugin_name(), team->max_tasks, team->size_source)
                      : std::string("the calling thread (no task team)")));
}

namespace {

using detail::t_state;

// What a Kiln service threw during the current call (compiled code only sees -1); touched on
// the error path only.
thread_local std::exception_ptr t_pending;

int fail() {
  t_pending = std::current_exception();
  t_state.pending = true;
  return -1;
}

// Takes the recorded exception (or null).
std::exception_ptr take_pending() {
  std::exception_ptr e = std::move(t_pending);
  t_pending = nullptr;
  t_state.pending = false;
  return e;
}

LibraryContext& current_library(const char* service) {
  if (t_state.library == nullptr) {
    throw RuntimeError(fmt::format("{} was called outside a call into a TVM library", service));
  }
  return *t_state.library;
}

// ---- __TVMFFIFunctionCall ----------------------------------------------------------------

// Converts one argument compiled code passes to an imported function. Raw pointers are device
// buffers of the current device (TVM passes buffers to kernels as their data pointers).
KilnAny to_kiln(const FfiAny& a, DLTensor* view, int64_t* zero_dim, const ImportedFunction& f,
                int32_t index) {
  KilnAny k{};
  switch (a.type_index) {
    case kNone:
      k.type_code = KILN_TYPE_NONE;
      break;
    case kInt:
      k.type_code = KILN_TYPE_INT;
      k.value.v_int64 = a.v_int64;
      break;
    case kBool:
      k.type_code = KILN_TYPE_BOOL;
      k.value.v_int64 = a.v_int64 != 0;
      break;
    case kFloat:
      k.type_code = KILN_TYPE_FLOAT;
      k.value.v_float64 = a.v_float64;
      break;
    case kDLTensorPtr:
      k.type_code = KILN_TYPE_TENSOR;
      k.value.v_tensor = static_cast<DLTensor*>(a.v_ptr);
      break;
    case kOpaquePtr:
      if (!t_state.device_set) {
        throw RuntimeError(fmt::format(
            "{}: '{}' got a device buffer (argument {}) before the code selected a device",
            f.library->library, f.name, index));
      }
      *view = DLTensor{};
      view->data = a.v_ptr;
      view->device = t_state.device;
      view->ndim = 1;
      view->dtype = DLDataType{kDLUInt, 8, 1};
      view->shape = zero_dim;
      k.type_code = KILN_TYPE_TENSOR;
      k.value.v_tensor = view;
      break;
    case kRawStr:
      k.type_code = KILN_TYPE_STRING;
      k.value.v_str = a.v_c_str;
      break;
    default:
      throw TypeError(
          fmt::format("{}: '{}' got argument {} of tvm-ffi type index {}, which Kiln "
                      "does not pass to imported functions",
                      f.library->library, f.name, index, a.type_index));
  }
  return k;
}

int function_call(void* handle, FfiAny* args, int32_t num_args, FfiAny* result) {
  try {
    auto* f = static_cast<ImportedFunction*>(handle);
    result->type_index = kNone;
    result->zero_padding = 0;
    result->v_int64 = 0;
    if (!f->function) {  // __tvm_set_device(device_type, device_id)
      if (num_args < 2 || args[0].type_index != kInt || args[1].type_index != kInt) {
        throw TypeError("__tvm_set_device takes (int device_type, int device_id)");
      }
      t_state.device = DLDevice{static_cast<DLDeviceType>(args[0].v_int64),
                                static_cast<int32_t>(args[1].v_int64)};
      t_state.device_set = true;
      return 0;
    }
    constexpr int32_t kInline = 16;
    KilnAny inline_args[kInline];
    DLTensor inline_views[kInline];
    std::vector<KilnAny> heap_args;
    std::vector<DLTensor> heap_views;
    KilnAny* k = inline_args;
    DLTensor* views = inline_views;
    if (num_args > kInline) {
      heap_args.resize(static_cast<size_t>(num_args));
      heap_views.resize(static_cast<size_t>(num_args));
      k = heap_args.data();
      views = heap_views.data();
    }
    int64_t zero_dim = 0;
    for (int32_t i = 0; i < num_args; ++i) k[i] = to_kiln(args[i], &views[i], &zero_dim, *f, i);
    const Any r = f->function.call_abi(k, num_args);
    switch (r.type_code()) {
      case KILN_TYPE_NONE:
        break;
      case KILN_TYPE_INT:
        result->type_index = kInt;
        result->v_int64 = r.cast<int64_t>();
        break;
      case KILN_TYPE_FLOAT:
        result->type_index = kFloat;
        result->v_float64 = r.cast<double>();
        break;
      default:
        throw TypeError(fmt::format("{}: '{}' returned a {}, which compiled code cannot take",
                                    f->library->library, f->name, r.type_name()));
    }
    return 0;
  } catch (...) {
    return fail();
  }
}

// ---- __TVMFFIEnvModLookupFromImports, __TVMFFIHandleInitOnce -----------------------------

int lookup_from_imports(void* library_ctx, const char* name, void** out) {
  try {
    if (library_ctx == nullptr || name == nullptr) {
      throw RuntimeError("__TVMFFIEnvModLookupFromImports: the library context is not set");
    }
    *out = static_cast<LibraryContext*>(library_ctx)->lookup(name);
    return 0;
  } catch (...) {
    return fail();
  }
}

std::mutex g_init_once_mu;  // InitOnce runs rarely (the first call of each kernel)

int handle_init_once(void** handle_addr, int (*init)(void** result)) {
  std::lock_guard<std::mutex> lock(g_init_once_mu);
  if (*handle_addr != nullptr) return 0;
  void* result = nullptr;
  if (const int rc = init(&result); rc != 0) return rc;
  *handle_addr = result;
  return 0;
}

// ---- __TVMBackendAllocWorkspace / FreeWorkspace -------------------------------------------

constexpr size_t kWorkspaceAlignment = 64;

void* alloc_workspace(int device_type, int device_id, uint64_t nbytes, int /*dtype_code*/,
                      int /*dtype_bits*/) {
  try {
    LibraryContext& lib = current_library("__TVMBackendAllocWorkspace");
    // Host scratch comes from the library's pool; a device's from its backend.
    void* p = device_type == kDLCPU
                  ? lib.host_workspace.alloc(static_cast<size_t>(nbytes))
                  : lib.devices.backend(device_type)
                        ->alloc(device_id, static_cast<size_t>(std::max<uint64_t>(nbytes, 1)),
                                kWorkspaceAlignment);
    lib.workspace_allocations.fetch_add(1, std::memory_order_relaxed);
    lib.workspace_bytes.fetch_add(nbytes, std::memory_order_relaxed);
    return p;
  } catch (...) {
    fail();
    return nullptr;  // TVM's code checks for NULL and returns -1
  }
}

int free_workspace(int device_type, int device_id, void* ptr) {
  try {
    LibraryContext& lib = current_library("__TVMBackendFreeWorkspace");
    if (device_type == kDLCPU && lib.host_workspace.free(ptr)) return 0;
    lib.devices.backend(device_type)->free(device_id, ptr);
    return 0;
  } catch (...) {
    return fail();
  }
}

// ---- __TVMBackendParallelLaunch / ParallelBarrier -----------------------------------------

// A reusable barrier for the tasks of one launch (sense counted by generation). Every task
// stores the launch's task count before it runs, so the count is set before any task arrives.
struct Barrier {
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  std::atomic<int> num_task{0};
};

int parallel_barrier(int /*task_id*/, ParallelGroupEnv* penv) {
  auto* b = static_cast<Barrier*>(penv->sync_handle);
  const int gen = b->generation.load(std::memory_order_acquire);
  if (b->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      b->num_task.load(std::memory_order_relaxed)) {
    b->arrived.store(0, std::memory_order_relaxed);
    b->generation.fetch_add(1, std::memory_order_acq_rel);
  } else {
    while (b->generation.load(std::memory_order_acquire) == gen) std::this_thread::yield();
  }
  return 0;
}

// One __TVMBackendParallelLaunch: the compiled loop body and what its tasks share.
struct Launch {
  ParallelLambda lambda;
  void* cdata;
  LibraryContext* library;
  Barrier barrier;
  std::mutex error_mu;
  std::exception_ptr first_error;
};

// A task on the team (or the caller): runs the lambda for `task` of `num_tasks` in the
// launching library's scope; a failure's error moves to the launch (it lives in this thread's
// slots).
int32_t run_task(void* closure, int32_t task, int32_t num_tasks) {
  auto& launch = *static_cast<Launch*>(closure);
  launch.barrier.num_task.store(num_tasks, std::memory_order_relaxed);
  LibraryContext* saved = t_state.library;
  t_state.library = launch.library;
  ParallelGroupEnv env{&launch.barrier, num_tasks};
  const int rc = launch.lambda(task, &env, launch.cdata);
  t_state.library = saved;
  if (rc == 0) return 0;
  std::exception_ptr e = take_pending();
  if (!e) {
    try {
      raise_ffi_error(rc, "parallel task " + std::to_string(task));
    } catch (...) {
      e = std::current_exception();
    }
  }
  std::lock_guard<std::mutex> lock(launch.error_mu);
  if (!launch.first_error) launch.first_error = e;
  return rc;
}

// Runs the tasks on the task team of the cpu backend the library was loaded with: every task of
// a launch on its own thread at once, so they may meet at barriers. Without a team (a cpu
// plugin that offers none), the launch is one task on the caller, which any loop accepts.
int parallel_launch(ParallelLambda lambda, void* cdata, int num_task) {
  try {
    LibraryContext& lib = current_library("__TVMBackendParallelLaunch");
    Launch launch{lambda, cdata, &lib, {}, {}, {}};
    int32_t failed = 0;
    if (lib.team != nullptr) {
      // TVM's code asks for 0 tasks: "as many as there are threads".
      if (KilnError* e = lib.team->run(lib.team->self, num_task, run_task, &launch, &failed)) {
        ffi::raise_plugin_error(e, fmt::format("{}: the task team of plugin '{}'", lib.library,
                                               lib.cpu->plugin_name()));
      }
    } else {
      failed = run_task(&launch, 0, 1);
    }
    lib.parallel_launches.fetch_add(1, std::memory_order_relaxed);
    lib.parallel_tasks.fetch_add(static_cast<uint64_t>(std::max(launch.barrier.num_task.load(), 1)),
                                 std::memory_order_relaxed);
    if (launch.first_error) std::rethrow_exception(launch.first_error);
    if (failed != 0)
      throw RuntimeError(fmt::format("{}: a parallel task failed ({})", lib.library, failed));
    return 0;
  } catch (...) {
    return fail();
  }
}

// ---- the table -----------------------------------------------------------------------------

struct ContextSymbol {
  const char* name;
  void* service;
};

const ContextSymbol kContextSymbols[] = {
    {"__TVMFFIFunctionCall", reinterpret_cast<void*>(&function_call)},
    {"__TVMFFIEnvModLookupFromImports", reinterpret_cast<void*>(&lookup_from_imports)},
    {"__TVMFFIHandleInitOnce", reinterpret_cast<void*>(&handle_init_once)},
    {"__TVMBackendAllocWorkspace", reinterpret_cast<void*>(&alloc_workspace)},
    {"__TVMBackendFreeWorkspace", reinterpret_cast<void*>(&free_workspace)},
    {"__TVMBackendParallelLaunch", reinterpret_cast<void*>(&parallel_launch)},
    {"__TVMBackendParallelBarrier", reinterpret_cast<void*>(&parallel_barrier)},
};

}  // namespace

ImportedFunction* LibraryContext::lookup(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second.get();
  auto f = std::make_unique<ImportedFunction>();
  f->name = name;
  f->library = this;
  if (name != "__tvm_set_device") {
    for (const Module& m : imports) {
      if (m.has_function(name)) {
        f->function = m.get_function(name);
        break;
      }
    }
    if (!f->function) {
      std::string kinds;
      for (const Module& m : imports) kinds += (kinds.empty() ? "" : ", ") + m.kind();
      throw NotFoundError(fmt::format(
          "{}: the compiled code looks up '{}', which none of its imported modules ({}) defines",
          library, name, kinds.empty() ? "none" : kinds));
    }
  }
  return cache_.emplace(name, std::move(f)).first->second.get();
}

std::vector<std::string> fill_context_symbols(void* library_handle, LibraryContext* context,
                                              const std::vector<std::string>& defined_symbols) {
  std::set<std::string> known;
  for (const ContextSymbol& s : kContextSymbols) {
    known.insert(s.name);
    if (auto* slot = static_cast<void**>(dlsym(library_handle, s.name))) {
      *slot = s.service;
      context->uses_services = true;
    }
  }
  if (auto* ctx = static_cast<void**>(dlsym(library_handle, "__tvm_ffi__library_ctx"))) {
    *ctx = context;
  }
  std::vector<std::string> unknown;
  for (const std::string& name : defined_symbols) {
    if ((name.rfind("__TVM", 0) == 0) && known.count(name) == 0) unknown.push_back(name);
  }
  return unknown;
}

namespace detail {
constinit thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));

void discard_pending() { take_pending(); }
}  // namespace detail

void CallScope::raise(int rc, const std::string& context) {
  if (std::exception_ptr e = take_pending()) {
    // Drop whatever compiled code may have raised on top of it.
    void* stale = nullptr;
    ffi_provider().move_from_raised(&stale);
    if (stale != nullptr) ffi_provider().dec_ref(stale);
    std::rethrow_exception(e);
  }
  raise_ffi_error(rc, context);
}

}  // namespace kiln::tvm_interop
