// SPDX-License-Identifier: Apache-2.0
// Python objects owned by C++ (the callables behind Functions made from Python): dropped from
// any thread without waiting for the GIL, and released at interpreter exit.
//
// Why not simply take the GIL to drop one: the last owner is often a thread that a Python
// thread is joining with the GIL held (a LocalSession's server thread, as the session closes),
// and taking the GIL there waits until that join gives up. Why release at exit: a callable's
// globals often hold the very objects that hold the callable (a module that registers a
// function and keeps a Function), a cycle through C++ that Python's collector cannot see, so
// the module and everything in it would outlive the interpreter (nanobind's leak report).
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bindings.h"

namespace kiln::python {
namespace {

// Everything here is guarded by `mu`. Never destroyed: a HeldObject may die after the
// interpreter and after static destruction began.
std::mutex mu;
auto* const live = new std::unordered_set<HeldObject*>();
auto* const dropped = new std::vector<PyObject*>();  // to release on a thread with the GIL
bool release_scheduled = false;                      // a pending call will release `dropped`

// Releases the dropped references. With the GIL held; also Py_AddPendingCall's callback.
int release_dropped(void* /*unused*/) {
  std::vector<PyObject*> released;
  {
    std::lock_guard lock(mu);
    released.swap(*dropped);
    release_scheduled = false;
  }
  for (PyObject* object : released) Py_DECREF(object);
  return 0;
}

}  // namespace

void drop_reference(PyObject* object) {
  if (object == nullptr || !Py_IsInitialized()) return;  // no interpreter: nothing to release
  if (PyGILState_Check() != 0) {
    Py_DECREF(object);
    return;
  }
  std::lock_guard lock(mu);
  dropped->push_back(object);
  // The main thread runs it at its next bytecode boundary. When Python's queue is full the
  // next drop asks again (release_dropped_references also releases them).
  if (!release_scheduled) release_scheduled = Py_AddPendingCall(&release_dropped, nullptr) == 0;
}

void release_dropped_references() { release_dropped(nullptr); }

HeldObject::HeldObject(nb::handle object) : object_(object.inc_ref().ptr()) {
  std::lock_guard lock(mu);
  live->insert(this);
}

HeldObject::~HeldObject() {
  PyObject* object = nullptr;
  {
    std::lock_guard lock(mu);
    live->erase(this);
    object = std::exchange(object_, nullptr);
  }
  drop_reference(object);
}

void release_held_objects() {
  std::vector<PyObject*> released;
  {
    std::lock_guard lock(mu);
    for (HeldObject* held : *live) {
      if (held->object_ != nullptr) released.push_back(std::exchange(held->object_, nullptr));
    }
  }
  for (PyObject* object : released) Py_DECREF(object);
  release_dropped(nullptr);
}

}  // namespace kiln::python
