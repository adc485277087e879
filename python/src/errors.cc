// SPDX-License-Identifier: Apache-2.0
// Errors both ways: kiln errors become Python exceptions of the matching kind, and Python
// exceptions raised in callbacks cross Kiln as kiln errors and come back out unchanged. Also
// Ctrl-C while Kiln works with the GIL released (SignalWatch, bindings.h).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kiln/error.h"
#include "kiln/measurement_worker.h"

namespace kiln::python {
namespace {

// kiln's exception classes, made once in register_errors. Borrowed: the module owns them (a
// strong reference here would keep the module alive past interpreter shutdown).
struct ErrorClasses {
  PyObject* kiln_error = nullptr;  // kiln.KilnError(RuntimeError)
  PyObject* not_found = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* unimplemented = nullptr;
  PyObject* abi = nullptr;
  PyObject* rpc = nullptr;
  PyObject* rpc_timeout = nullptr;
  PyObject* rpc_server_lost = nullptr;
  PyObject* worker = nullptr;  // kiln.WorkerError(KilnError)
};
ErrorClasses classes;

// The module kiln's exception classes name as theirs: the package (kiln, which re-exports
// them: users catch kiln.NotFoundError and tracebacks print that) when `m` is kiln._kiln, else
// `m` itself, as when nanobind's stubgen imports the extension alone as _kiln: the classes are
// then its own, so its type stubs declare them.
std::string error_module_name(nb::module_& m) {
  const std::string name = nb::str(m.attr("__name__")).c_str();
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// A new exception class <module>.<name> with the given bases, added to `m`.
PyObject* new_error_class(nb::module_& m, const char* name, const nb::tuple& bases,
                          const char* doc) {
  const std::string qualified = error_module_name(m) + "." + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::steal(cls);  // the module owns the class; the pointer kept is borrowed
  return cls;
}

// Kept exceptions whose thread ended before it raised them (a callback that failed on a
// server's session thread, whose error went to the client as a kiln error). A thread's end must
// not wait for the GIL (the thread joining it may hold it), so they wait here and are released
// with the GIL held (release_orphans). Never destroyed: it may outlive the interpreter.
std::mutex orphans_mu;
auto* const orphans = new std::vector<nb::python_error>();

// Releases the orphaned exceptions. With the GIL held.
void release_orphans() {
  release_dropped_references();
  std::vector<nb::python_error> released;
  {
    std::lock_guard lock(orphans_mu);
    if (orphans->empty()) return;
    released.swap(*orphans);
  }
}

// The Python exception a callback raised on this thread, kept while it crosses Kiln as the kiln
// error whose message is `message` (code between may prefix it, never drop it).
struct Pending {
  std::optional<nb::python_error> error;
  std::string message;
  ~Pending() {
    if (!error) return;
    std::lock_guard lock(orphans_mu);
    orphans->push_back(std::move(*error));  // moves the reference: no GIL needed
  }
};
thread_local Pending pending;

// Keeps `e` for the thread and throws the kiln error of the kind it stands for, with its text.
[[noreturn]] void keep_and_throw(const nb::python_error& e) {
  release_orphans();
  pending.error.emplace(e);
  pending.message = e.what();
  const std::pair<PyObject*, int32_t> kinds[] = {
      {PyExc_ValueError, KILN_ERROR_VALUE},
      {PyExc_TypeError, KILN_ERROR_TYPE},
      {PyExc_IndexError, KILN_ERROR_INDEX},
      {PyExc_MemoryError, KILN_ERROR_OUT_OF_MEMORY},
      {PyExc_NotImplementedError, KILN_ERROR_UNIMPLEMENTED},
  };
  for (const auto& [type, code] : kinds) {
    if (e.matches(type)) throw_error(code, pending.message);
  }
  throw_error(KILN_ERROR_RUNTIME, pending.message);
}

// The Python class of the kiln error code `code` (kiln.KilnError for unknown codes).
PyObject* class_of(int32_t code) {
  switch (code) {
    case KILN_ERROR_VALUE:
      return PyExc_ValueError;
    case KILN_ERROR_TYPE:
      return PyExc_TypeError;
    case KILN_ERROR_INDEX:
      return PyExc_IndexError;
    case KILN_ERROR_RUNTIME:
      return PyExc_RuntimeError;
    case KILN_ERROR_NOT_FOUND:
      return classes.not_found;
    case KILN_ERROR_UNAVAILABLE:
      return classes.unavailable;
    case KILN_ERROR_OUT_OF_MEMORY:
      return classes.out_of_memory;
    case KILN_ERROR_UNIMPLEMENTED:
      return classes.unimplemented;
    case KILN_ERROR_ABI:
      return classes.abi;
    case kErrorCodeRpc:
      return classes.rpc;
    case kErrorCodeRpcSessionTimeout:
      return classes.rpc_timeout;
    case kErrorCodeRpcServerLost:
      return classes.rpc_server_lost;
    default:
      return classes.kiln_error;
  }
}

// Sets the Python exception for a kiln error, by its code; other exceptions are left to
// nanobind's own translation (rethrown).
void translate_kiln_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const testing::WorkerError& e) {
    // With what happened as attributes: a tuner tells a crash from a hang without parsing.
    nb::object error = nb::borrow(classes.worker)(e.what());
    error.attr("kind") = e.kind_name();
    error.attr("signal") = e.signal() ? nb::cast(*e.signal()) : nb::none();
    PyErr_SetObject(classes.worker, error.ptr());
  } catch (const Error& e) {
    PyErr_SetString(class_of(e.code()), e.what());
  }
}

// ---- Ctrl-C while the GIL is released ---------------------------------------------------
//
// Python's SIGINT handler only notes the signal; its Python handler (KeyboardInterrupt) runs
// when the main thread next holds the GIL and looks. A thread waiting in Kiln without the GIL
// must not take the GIL just to look (another thread may hold it while it waits for something
// the waiting thread holds, such as an RPC session), so a C hook in front of Python's handler
// counts SIGINTs, and the poll takes the GIL only when the count moved.

// SIGINTs the hook saw, and (main thread only) the count when the poll last ran the handlers.
std::atomic<uint64_t> sigint_count{0};
uint64_t sigint_seen = 0;
// The handler the hook passes every SIGINT on to (Python's), set before the hook is installed.
struct sigaction sigint_next {};
// threading.main_thread().ident: Python runs signal handlers on that thread only.
unsigned long main_thread_ident = 0;

void on_sigint(int signal_number, siginfo_t* info, void* context) {
  sigint_count.fetch_add(1, std::memory_order_relaxed);  // lock-free: async-signal-safe
  if ((sigint_next.sa_flags & SA_SIGINFO) != 0) {
    sigint_next.sa_sigaction(signal_number, info, context);
  } else if (sigint_next.sa_handler != SIG_DFL && sigint_next.sa_handler != SIG_IGN) {
    sigint_next.sa_handler(signal_number);
  }
}

bool is_hook(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == &on_sigint;
}

// Puts the hook in front of the SIGINT handler in place unless it is there already. Not when
// SIGINT is ignored or does its default (Ctrl-C then needs no poll: it ends the process or does
// nothing). Returns whether the hook is in place; `installed` tells whether it was put there
// now (a signal that came before went straight to Python). Called with the GIL held or on the
// main thread: Python changes the handler (signal.signal) only on that thread, holding the GIL.
bool hook_sigint(bool& installed) {
  installed = false;
  struct sigaction current {};
  if (::sigaction(SIGINT, nullptr, &current) != 0) return false;
  if (is_hook(current)) return true;
  if ((current.sa_flags & SA_SIGINFO) == 0 &&
      (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)) {
    return false;
  }
  sigint_next = current;  // the hook is not in place: no handler reads this now
  struct sigaction hook = current;
  hook.sa_flags |= SA_SIGINFO;
  hook.sa_sigaction = &on_sigint;
  if (::sigaction(SIGINT, &hook, nullptr) != 0) return false;
  installed = true;
  return true;
}

// Sets the Python error for `e` (a kiln error) and takes it back as an exception object.
nb::python_error python_error_of(const std::exception_ptr& e) {
  set_python_error(e);
  return nb::python_error();
}

}  // namespace

namespace detail {

void rethrow_pending_python_error(const kiln::Error& error) {
  release_orphans();
  if (pending.error) {
    std::optional<nb::python_error> kept = std::move(pending.error);
    pending.error.reset();
    if (std::string_view(error.what()).find(pending.message) != std::string_view::npos) {
      throw *kept;
    }
  }
  // A signal that came while the call failed: its handler runs now, before the error is
  // raised. Left pending, it would raise KeyboardInterrupt while Python prints the error, and
  // neither would print ("lost sys.stderr").
  if (PyErr_CheckSignals() != 0) {
    nb::python_error signal_error;
    nb::python_error kiln_error = python_error_of(std::current_exception());
    PyException_SetContext(signal_error.value().ptr(), kiln_error.value().inc_ref().ptr());
    throw signal_error;
  }
}

bool SignalWatch::on_main_thread() noexcept {
  return PyThread_get_thread_ident() == main_thread_ident;
}

void SignalWatch::poll(void* self) {
  bool installed = false;
  if (!hook_sigint(installed)) return;  // SIGINT ignored or default: nothing to look for
  const uint64_t count = sigint_count.load(std::memory_order_relaxed);
  if (!installed && count == sigint_seen) return;
  sigint_seen = count;
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return;  // handled already, or a handler that did not raise
  auto* watch = static_cast<SignalWatch*>(self);
  watch->raised_.emplace();
  throw kiln::detail::InterruptedError(std::string("interrupted: the signal handler raised ") +
                                       Py_TYPE(watch->raised_->value().ptr())->tp_name +
                                       " while Kiln was waiting");
}

void SignalWatch::raise_for(const kiln::Error& error) {
  if (raised_) {
    pending.error.reset();  // a callback's exception met on the way out goes with the interrupt
    raise(&error);
  }
  rethrow_pending_python_error(error);
}

void SignalWatch::raise(const kiln::Error* error) {
  nb::python_error interrupt = std::move(*raised_);
  raised_.reset();
  // The work's own error, when it is not the interrupt passed on (a failure while unwinding),
  // prints as the context of the interrupt.
  if (error != nullptr && dynamic_cast<const kiln::detail::InterruptedError*>(error) == nullptr &&
      std::string_view(error->what()).find("interrupted: the signal handler raised") ==
          std::string_view::npos) {
    nb::python_error kiln_error = python_error_of(std::current_exception());
    PyException_SetContext(interrupt.value().ptr(), kiln_error.value().inc_ref().ptr());
  }
  throw interrupt;
}

}  // namespace detail

void check_interrupt() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) keep_and_throw(nb::python_error());
}

Function function_from_callable(nb::handle callable, std::string name) {
  // Shared by the Function's copies; the last one may die on any thread (HeldObject).
  auto held = std::make_shared<HeldObject>(callable);
  return Function::from_packed(name, [held, name](const Any* args, int32_t num_args) -> Any {
    nb::gil_scoped_acquire gil;
    // A reference of the call's own: the exit's release may run while the call does.
    const nb::object callable = nb::borrow(held->get());
    if (!callable.is_valid()) {
      throw RuntimeError("the Python function '" + name +
                         "' was released at interpreter exit and can no longer be called");
    }
    try {
      nb::tuple py_args = nb::steal<nb::tuple>(PyTuple_New(num_args));
      for (int32_t i = 0; i < num_args; ++i) {
        nb::object item = from_any(args[i]);
        PyTuple_SET_ITEM(py_args.ptr(), i, item.release().ptr());
      }
      nb::object result = callable(*py_args);
      return to_any(result, "the callback's result");
    } catch (nb::python_error& e) {
      keep_and_throw(e);
    } catch (const nb::builtin_exception& e) {
      throw TypeError(e.what());
    }
  });
}

void register_errors(nb::module_& m) {
  auto runtime_error = nb::handle(PyExc_RuntimeError);
  classes.kiln_error =
      new_error_class(m, "KilnError", nb::make_tuple(runtime_error),
                      "Base of the errors Kiln raises that have no builtin Python kind.");
  auto base = nb::handle(classes.kiln_error);
  classes.not_found =
      new_error_class(m, "NotFoundError", nb::make_tuple(base, nb::handle(PyExc_LookupError)),
                      "No such function, device, plugin or file.");
  classes.unavailable = new_error_class(m, "UnavailableError", nb::make_tuple(base),
                                        "A driver or device that is not there.");
  classes.out_of_memory =
      new_error_class(m, "OutOfMemoryError", nb::make_tuple(base, nb::handle(PyExc_MemoryError)),
                      "An allocation that failed.");
  classes.unimplemented = new_error_class(
      m, "UnimplementedError", nb::make_tuple(base, nb::handle(PyExc_NotImplementedError)),
      "A slot the plugin does not implement.");
  classes.abi = new_error_class(m, "AbiError", nb::make_tuple(base),
                                "A plugin ABI version or struct-size mismatch.");
  classes.rpc = new_error_class(m, "RPCError", nb::make_tuple(base),
                                "A remote call failed, or the connection to the server did.");
  classes.rpc_timeout =
      new_error_class(m, "RPCSessionTimeoutError",
                      nb::make_tuple(nb::handle(classes.rpc), nb::handle(PyExc_TimeoutError)),
                      "The RPC session outlived its timeout; the server ended it.");
  classes.rpc_server_lost = new_error_class(
      m, "RPCServerLostError", nb::make_tuple(nb::handle(classes.rpc)),
      "The RPC server went away (the connection dropped during a call, or no server of the key "
      "could be reached): not the work's fault; run_many tries it again on another server.");

  classes.worker = new_error_class(
      m, "WorkerError", nb::make_tuple(base),
      "A measurement worker died or was killed during a run: .kind is 'crashed', 'hung', "
      "'killed' or 'exited'; .signal the signal number (or None). The message names the signal, "
      "the function, the device and its plugin.");

  nb::register_exception_translator(
      [](const std::exception_ptr& p, void*) { translate_kiln_error(p); });

  // Ctrl-C while Kiln waits (SignalWatch): the main thread, and the hook in front of Python's
  // SIGINT handler (put back by the poll when signal.signal replaces it later).
  main_thread_ident = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  // A forked child's only thread is its main thread, for Python as here.
  ::pthread_atfork(nullptr, nullptr, [] { main_thread_ident = PyThread_get_thread_ident(); });
  bool installed = false;
  hook_sigint(installed);

  // Exceptions orphaned by ended threads go before the interpreter does.
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { release_orphans(); }));
}

void set_python_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (nb::python_error& error) {
    error.restore();
  } catch (const nb::builtin_exception& error) {
    PyObject* type = PyExc_RuntimeError;
    switch (error.type()) {
      case nb::exception_type::type_error:
        type = PyExc_TypeError;
        break;
      case nb::exception_type::value_error:
        type = PyExc_ValueError;
        break;
      case nb::exception_type::index_error:
        type = PyExc_IndexError;
        break;
      case nb::exception_type::buffer_error:
        type = PyExc_BufferError;
        break;
      default:
        break;
    }
    PyErr_SetString(type, error.what());
  } catch (const Error&) {
    translate_kiln_error(e);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

}  // namespace kiln::python
