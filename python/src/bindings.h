// SPDX-License-Identifier: Apache-2.0
// The Python extension's shared pieces: conversions between Python values and kiln::Any, the
// runtime every binding uses, and the error bridge in both directions. Each bind_*.cc file
// adds one concept's classes and functions to the module and uses only what is declared here.
#ifndef KILN_PYTHON_BINDINGS_H_
#define KILN_PYTHON_BINDINGS_H_

#include <nanobind/nanobind.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/any.h"
#include "kiln/detail/cancellation.h"
#include "kiln/device.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"

namespace kiln::python {

namespace nb = nanobind;

// The Runtime behind every Python call: the process-wide default (Runtime::global()), made on
// first use with the environment's plugin selection (KILN_PLUGIN_SET, KILN_PLUGIN_PATH, ...).
Runtime& runtime();

// A host object Kiln has no Python class for (a VM closure or storage): kiln.Object, holding
// the value so it can be passed back.
struct AnyObject {
  Any value;
};

// kiln.ShapeTuple (a tuple subclass defined by the package's __init__), registered with
// _set_shape_tuple_type; shapes convert to and from it. Null until then.
extern PyObject* shape_tuple_type;

// ---- Python -> Any -------------------------------------------------------------------------

// Converts one Python value for a call into Kiln: None, bool, int, float, str, bytes,
// kiln.Tensor, kiln.Device, kiln.DataType, kiln.Function, kiln.Module, kiln.Object, a tuple or
// list (a VM tuple of the converted items), an object with __dlpack__ (numpy arrays, PyTorch and
// TVM tensors: shared, not copied) and any other callable (a Function calling back into
// Python). `what` and, when not negative, `index` name the value in errors ("argument 2").
// Throws nb::type_error for anything else and nb::value_error for a non-contiguous array.
Any to_any(nb::handle value, const char* what, int index = -1);

// Calls `f` with the `n` Python values at `args` (the hot path of kiln.Function): tensors and
// scalars are passed as borrowed ABI values (`args` keeps them alive), exact numpy arrays are
// lent through the buffer protocol when `f` only borrows its arguments (a Function::from_abi
// one), anything else goes through to_any; the call runs with the GIL released and its result
// comes back through from_any.
nb::object call_from_python(const Function& f, PyObject* const* args, size_t n);
// Converts each item of a sequence of call arguments.
std::vector<Any> to_anys(nb::handle sequence);

// ---- Any -> Python -------------------------------------------------------------------------

// Converts a Kiln value to Python: scalars and strings to their Python types, bytes to bytes,
// shapes to tuples of int, VM tuples to tuples (items converted), tensors, devices, dtypes,
// functions and modules to their kiln classes, other host objects to kiln.Object.
nb::object from_any(const Any& value);

// ---- Tensors -------------------------------------------------------------------------------

// A Tensor sharing the memory of a DLPack producer (an object with __dlpack__, asked for a
// DLPack 1.0 capsule first, or a capsule). Refuses non-contiguous and read-only memory with a
// ValueError that says how to copy it, leaving the capsule to its producer.
Tensor tensor_from_dlpack(nb::handle producer);

// A capsule sharing `tensor`'s memory: "dltensor_versioned" (DLPack 1.0, writable) when
// `versioned`, else "dltensor". Freed by the capsule unless a consumer takes it.
nb::object dlpack_capsule(const Tensor& tensor, bool versioned);

// A DLPack producer's host memory lent to one call: the managed tensor taken from its capsule
// (which is then consumed), and a DLTensor of it for the call. No Kiln Tensor is made.
// Trivially constructible: calls keep a few on the stack, uninitialised until used.
struct LentDLPack {
  void* managed;  // DLManagedTensorVersioned* when `versioned`, else DLManagedTensor*
  bool versioned;
  DLTensor dl;
};

// Takes the memory of `producer` (an object with __dlpack__) for one call when Kiln can use it
// as it is: host memory, writable, compact row-major (as tensor_from_dlpack requires).
// Returns false, with no Python error set and the capsule left to its producer, for anything
// else; the caller then takes tensor_from_dlpack's path, which converts or explains. Raises
// what the producer's __dlpack__ raises. On true, `lent` must be given to release_lent_dlpack
// after the call, with the GIL held.
bool lend_dlpack(nb::handle producer, LentDLPack& lent);

// Gives lent memory back to its producer (its deleter). With the GIL held.
void release_lent_dlpack(LentDLPack& lent);

// ---- Python objects owned by C++ (held_objects.cc) -----------------------------------------

// A strong reference to a Python object, owned by C++ code that may drop it on any thread.
// Made with the GIL held. Its destructor never waits for the GIL (see drop_reference). At
// interpreter exit release_held_objects lets go of every one's object early; get() is then null.
class HeldObject {
 public:
  explicit HeldObject(nb::handle object);
  ~HeldObject();
  HeldObject(const HeldObject&) = delete;
  HeldObject& operator=(const HeldObject&) = delete;

  // The object, borrowed; nullptr once released at exit. With the GIL held.
  PyObject* get() const { return object_; }

 private:
  friend void release_held_objects();
  PyObject* object_;
};

// Drops a strong reference from any thread: at once when this thread holds the GIL, otherwise
// soon, on the thread that next runs Python (Py_AddPendingCall), so that a thread another one
// joins with the GIL held never waits for it. Nothing once the interpreter is gone.
void drop_reference(PyObject* object);

// Releases the references dropped by threads without the GIL that are still waiting. GIL held.
void release_dropped_references();

// At interpreter exit (kiln's atexit handler, GIL held): releases every HeldObject's object,
// which breaks the cycles a callable's globals make through C++ (a module that registers a
// function and keeps a Function of it) and lets the interpreter free them.
void release_held_objects();

// ---- Python callables as Functions ---------------------------------------------------------

// Wraps a Python callable as a Function named `name`: each call takes the GIL, converts the
// arguments with from_any, calls, and converts the result with to_any. A Python exception is
// kept for the thread (see rethrow_pending_python_error) and crosses Kiln as a kiln error of
// the matching kind, so a caller in C++ sees ValueError/TypeError/... and Python sees the
// original exception again. The callable is a HeldObject: a call after interpreter exit
// released it is a RuntimeError naming the function.
Function function_from_callable(nb::handle callable, std::string name);

// ---- Time evaluators ----------------------------------------------------------------------

// kiln.TimeEvaluator (bind_evaluator.cc): a time evaluator held by Python. The evaluator keeps
// `number` as state across calls (grown to reach min_repeat_ms), so it is one object, not
// rebuilt per call. Declared here so that the bindings returning one name its class.
struct PyTimeEvaluator {
  std::unique_ptr<TimeEvaluator> evaluator;
  std::string function_name;

  // Converts `args` and runs the measurement loop with the GIL released.
  BenchmarkResult call(const nb::args& args) const;
};

// A kiln.TimeEvaluator timing `f` on `device`: calling it with the function's arguments runs
// the measurement loop with the GIL released and returns a BenchmarkResult; Ctrl-C stops it
// after the current repeat.
PyTimeEvaluator make_time_evaluator(Function f, Device device, TimeEvaluatorOptions options);

// The time evaluator's options (TVM's time_evaluator parameters), validated (ValueError naming
// the parameter).
TimeEvaluatorOptions evaluator_options(int32_t number, int32_t repeat, int32_t min_repeat_ms,
                                       int32_t limit_zero_time_iterations,
                                       int32_t cooldown_interval_ms, int32_t repeats_to_cooldown,
                                       int64_t cache_flush_bytes, const std::string& f_preproc);

// Adds the method time_evaluator(<name_arg>, dev, number=10, repeat=1, min_repeat_ms=0,
// limit_zero_time_iterations=100, cooldown_interval_ms=0, repeats_to_cooldown=1,
// cache_flush_bytes=0, f_preproc="") to `cls` with TVM's defaults, once for every class that
// has one. `make(self, name, dev, options)` returns the evaluator for validated options (a
// bound class, by value, so the method's signature names what it returns).
template <typename Class, typename Make>
void def_time_evaluator(Class& cls, const char* name_arg, Make make, const char* doc) {
  using Self = typename Class::Type;
  cls.def(
      "time_evaluator",
      [make](Self& self, const std::string& name, Device dev, int32_t number, int32_t repeat,
             int32_t min_repeat_ms, int32_t limit_zero_time_iterations,
             int32_t cooldown_interval_ms, int32_t repeats_to_cooldown, int64_t cache_flush_bytes,
             const std::string& f_preproc) {
        return make(self, name, dev,
                    evaluator_options(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                                      cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes,
                                      f_preproc));
      },
      nb::arg(name_arg), nb::arg("dev"), nb::arg("number") = 10, nb::arg("repeat") = 1,
      nb::arg("min_repeat_ms") = 0, nb::arg("limit_zero_time_iterations") = 100,
      nb::arg("cooldown_interval_ms") = 0, nb::arg("repeats_to_cooldown") = 1,
      nb::arg("cache_flush_bytes") = 0, nb::arg("f_preproc") = "", doc);
}

// ---- Errors --------------------------------------------------------------------------------

// Registers kiln's exception classes (kiln.KilnError and its kinds) on `m` and the translator
// that raises them for kiln errors thrown by bindings.
void register_errors(nb::module_& m);

// Sets the Python error for the exception `e` as the translator would (for code that is called
// by Python directly, outside nanobind's dispatch).
void set_python_error(const std::exception_ptr& e);

// Runs `body` with the GIL released and Ctrl-C watched (on the main thread, the only one
// Python runs signal handlers on): every wait in the core runs an interrupt poll
// (kiln/detail/cancellation.h) that, once a SIGINT arrived, takes the GIL and runs Python's
// signal handlers; when one raises (KeyboardInterrupt), the work ends with InterruptedError,
// unwinding through the core's cleanup, and that Python exception is raised here, also when the
// work caught the InterruptedError and went on. Errors: a kiln error that stands for a Python
// exception raised in a callback (or a Ctrl-C noticed by check_interrupt) raises that exception
// instead. A kiln error met by a signal that no poll saw yet (it arrived as the call failed)
// runs the handlers first: when they raise, their exception is raised with the kiln error as its
// __context__, so both print (a pending KeyboardInterrupt would otherwise be raised while Python
// prints the error, and neither would print).
template <typename F>
auto without_gil(F&& body) -> decltype(body());

// For loops that run with the GIL released: takes the GIL, runs Python's signal handlers, and
// throws when one raised (KeyboardInterrupt on Ctrl-C), so a long measurement stops promptly.
void check_interrupt();

namespace detail {
// Raises (as nb::python_error) the Python exception kept for this thread if `error` is the
// kiln error it crossed Kiln as (its message is in error's); otherwise forgets the kept one,
// which some code between caught and dropped. Then, when Python's signal handlers raise (a
// signal arrived meanwhile), raises their exception with `error` as its context.
void rethrow_pending_python_error(const kiln::Error& error);

// Ctrl-C during one without_gil call: the interrupt poll it installs on the main thread, and
// the Python exception the signal handlers raised (kept while it crosses the core as
// InterruptedError). Made and dropped with the GIL held.
class SignalWatch {
 public:
  SignalWatch() noexcept {
    if (on_main_thread()) scope_.emplace(&poll, this);
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  // After the call returned: raises the handlers' exception if the poll saw one, although the
  // work swallowed the InterruptedError.
  void deliver() {
    if (raised_) raise(nullptr);
  }
  // After the call threw `error`: raises the exception that stands for it, if any (the
  // interrupt, a callback's exception, a signal's). Returns when `error` is to be raised as is.
  void raise_for(const kiln::Error& error);

 private:
  // Whether this is Python's main thread (cheap: no GIL, no system call).
  static bool on_main_thread() noexcept;
  // The interrupt poll (no GIL): sees whether a SIGINT arrived since the handlers last ran and
  // then runs them with the GIL; throws InterruptedError when they raise.
  static void poll(void* self);
  // Raises the kept exception, with `error` as its context unless `error` is the
  // InterruptedError itself (or carries its message).
  [[noreturn]] void raise(const kiln::Error* error);

  std::optional<kiln::detail::InterruptScope> scope_;
  std::optional<nb::python_error> raised_;
};
}  // namespace detail

template <typename F>
auto without_gil(F&& body) -> decltype(body()) {
  using Result = decltype(body());
  static_assert(!std::is_reference_v<Result>, "without_gil returns values");
  detail::SignalWatch watch;
  try {
    if constexpr (std::is_void_v<Result>) {
      {
        nb::gil_scoped_release release;
        body();
      }
      watch.deliver();
    } else {
      Result result = [&] {
        nb::gil_scoped_release release;
        return body();
      }();
      watch.deliver();
      return result;
    }
  } catch (const kiln::Error& e) {
    watch.raise_for(e);
    throw;
  }
}

// ---- The bindings, one concept each --------------------------------------------------------

void bind_device(nb::module_& m);      // Device, DataType, devices(), plugins()
void bind_tensor(nb::module_& m);      // Tensor, empty, from_dlpack
void bind_function(nb::module_& m);    // Function, Module, Object, load_module, registry
void bind_evaluator(nb::module_& m);   // BenchmarkResult, TimeEvaluator
void bind_testing(nb::module_& m);     // local_run, rpc_run, RPCConfig
void bind_vm(nb::module_& m);          // VirtualMachine
void bind_profiling(nb::module_& m);   // Report, profile_function, collectors
void bind_rpc(nb::module_& m);         // RPCSession, RemoteModule, TrackerSession
void bind_llm(nb::module_& m);         // the LLM runtime's builtins (registered on import)
void bind_signatures(nb::module_& m);  // _set_signature_property (inspect.signature of methods)

}  // namespace kiln::python

#endif  // KILN_PYTHON_BINDINGS_H_
