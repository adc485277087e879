// SPDX-License-Identifier: Apache-2.0
// Python values <-> kiln::Any, and the call path from Python into a Function.
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kiln/module.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::python {
namespace {

// The Python classes the hot path compares exact types against, looked up once.
struct BoundTypes {
  PyTypeObject* tensor;
  PyTypeObject* device;
  PyTypeObject* dtype;
  PyTypeObject* function;
  PyTypeObject* module;
  PyTypeObject* object;
};
const BoundTypes& bound_types() {
  static const BoundTypes types{
      reinterpret_cast<PyTypeObject*>(nb::type<Tensor>().ptr()),
      reinterpret_cast<PyTypeObject*>(nb::type<Device>().ptr()),
      reinterpret_cast<PyTypeObject*>(nb::type<DataType>().ptr()),
      reinterpret_cast<PyTypeObject*>(nb::type<Function>().ptr()),
      reinterpret_cast<PyTypeObject*>(nb::type<Module>().ptr()),
      reinterpret_cast<PyTypeObject*>(nb::type<AnyObject>().ptr()),
  };
  return types;
}

// "argument 2", or `what` alone when there is no index: made only for an error message.
std::string value_name(const char* what, int index) {
  return index < 0 ? std::string(what) : std::string(what) + " " + std::to_string(index);
}

// The value of a Python int (or of a subclass of int); ValueError naming the value when it does
// not fit in int64.
int64_t int64_of(PyObject* p, const char* what, int index) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
  if (overflow != 0) {
    throw nb::value_error(
        (value_name(what, index) + ": the integer does not fit in int64").c_str());
  }
  if (v == -1 && PyErr_Occurred() != nullptr) throw nb::python_error();
  return static_cast<int64_t>(v);
}

// Whether `type` is numpy.ndarray itself (not a subclass), without importing numpy or needing
// its headers: numpy's type is looked up once the first object whose type has its name
// arrives, and compared by identity from then on (kept for the process: numpy is never
// unloaded).
bool is_ndarray(PyTypeObject* type) {
  static PyTypeObject* ndarray = nullptr;
  if (type == ndarray) return true;
  if (ndarray != nullptr || std::strcmp(type->tp_name, "numpy.ndarray") != 0) return false;
  PyObject* numpy = PyImport_GetModule(nb::str("numpy").ptr());
  PyObject* found = numpy != nullptr ? PyObject_GetAttrString(numpy, "ndarray") : nullptr;
  Py_XDECREF(numpy);
  if (found == nullptr || !PyType_Check(found)) {
    Py_XDECREF(found);
    PyErr_Clear();
    return false;
  }
  ndarray = reinterpret_cast<PyTypeObject*>(found);  // the reference is kept
  return type == ndarray;
}

// Whether calls of `f` only borrow their arguments: a Function made by Function::from_abi (a
// plugin's or kernel library's function, a TVM library's, a remote one) reads a tensor
// argument during the call and keeps nothing (docs/plugin-abi.md §9.2). Host functions (Python
// callables, VM builtins, C++ functions) may keep a tensor, so they get owning ones.
bool borrows_arguments(const Function& f) {
  const FunctionObj* object = f.get();
  return object != nullptr && typeid(*object) == typeid(FunctionObj);
}

// The element type of a buffer whose format (struct module syntax) is one native-order
// letter, with `itemsize` bytes per element; false for anything else (byte-swapped,
// structured, complex, long double: those take the DLPack path, which refuses or converts
// them as kiln.from_dlpack does).
bool buffer_dtype(const char* format, Py_ssize_t itemsize, DLDataType& out) {
  if (format == nullptr) return false;
  char c = format[0];
  if (c == '@' || c == '=' || (c == '<' && std::endian::native == std::endian::little) ||
      ((c == '>' || c == '!') && std::endian::native == std::endian::big)) {
    c = format[1];
    if (c == '\0' || format[2] != '\0') return false;
  } else if (c == '\0' || format[1] != '\0') {
    return false;
  }
  const auto bits = static_cast<uint8_t>(itemsize * 8);
  const bool int_size = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
  switch (c) {
    case '?':
      if (itemsize != 1) return false;
      out = DataType::Bool();
      return true;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
      if (!int_size) return false;
      out = DLDataType{kDLInt, bits, 1};
      return true;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
      if (!int_size) return false;
      out = DLDataType{kDLUInt, bits, 1};
      return true;
    case 'e':
    case 'f':
    case 'd':
      if (itemsize != 2 && itemsize != 4 && itemsize != 8) return false;
      out = DLDataType{kDLFloat, bits, 1};
      return true;
    default:
      return false;
  }
}

// A numpy array lent to one call: its buffer (which holds a reference to the array and keeps
// its memory in place) and a DLTensor describing that memory. No capsule, no Tensor.
struct BorrowedArray {
  Py_buffer view;
  DLTensor dl;
};

// Fills `slot` with a view of the exact numpy array `p` when Kiln can take its memory as it is:
// host memory, a native-order element type Kiln has, writable (kernels may write any
// argument) and compact row-major (size-1 dimensions and zero-size arrays may have any
// strides, as in kiln.from_dlpack). Returns false, with no Python error set and nothing held,
// for anything else; the caller then takes the DLPack path, which converts the array or
// raises the error that says how to copy it.
bool borrow_array(PyObject* p, BorrowedArray& slot) {
  static_assert(sizeof(Py_ssize_t) == sizeof(int64_t));
  Py_buffer& view = slot.view;
  // numpy implements the buffer protocol in C: no attribute lookup, no Python call.
  if (PyObject_GetBuffer(p, &view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();  // e.g. bfloat16, which the DLPack path carries as uint16
    return false;
  }
  DLTensor& dl = slot.dl;
  bool usable = view.readonly == 0 && buffer_dtype(view.format, view.itemsize, dl.dtype) &&
                (view.ndim == 0 || view.shape != nullptr);
  if (usable && view.strides != nullptr) {
    bool empty = false;
    bool compact = true;
    Py_ssize_t expected = view.itemsize;
    for (int i = view.ndim - 1; i >= 0; --i) {
      empty |= view.shape[i] == 0;
      if (view.shape[i] != 1 && view.strides[i] != expected) compact = false;
      expected *= view.shape[i];
    }
    usable = compact || empty;
  }
  if (!usable) {
    PyBuffer_Release(&view);
    return false;
  }
  dl.data = view.buf;
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = view.ndim;
  // Py_ssize_t and int64_t are the same 64-bit integer on the platforms Kiln builds for; where
  // they are distinct types the DLPack path is taken instead.
  if constexpr (std::is_same_v<Py_ssize_t, int64_t>) {
    dl.shape = reinterpret_cast<int64_t*>(view.shape);  // the same type: no conversion
  } else {
    PyBuffer_Release(&view);
    return false;
  }
  dl.strides = nullptr;  // compact: checked above
  dl.byte_offset = 0;
  return true;
}

// The arrays lent to one call, released (with the GIL held) when the call is over, also when
// it failed: numpy arrays' buffers (storage for up to 8 on the stack; a call with more
// arguments allocates it) and other DLPack producers' memory (allocated at the first).
class BorrowedArrays {
 public:
  explicit BorrowedArrays(size_t n) : capacity_(n) {}
  BorrowedArrays(const BorrowedArrays&) = delete;
  BorrowedArrays& operator=(const BorrowedArrays&) = delete;
  ~BorrowedArrays() {
    BorrowedArray* slots = data();
    for (size_t i = 0; i < count_; ++i) PyBuffer_Release(&slots[i].view);
    for (LentDLPack& lent : lent_) release_lent_dlpack(lent);
  }
  // Lends the exact numpy array `p` to the call as a DLTensor; null when borrow_array refuses it.
  DLTensor* borrow(PyObject* p) {
    if (capacity_ > kOnStack && !large_) large_ = std::make_unique<BorrowedArray[]>(capacity_);
    BorrowedArray& slot = data()[count_];
    if (!borrow_array(p, slot)) return nullptr;
    ++count_;
    return &slot.dl;
  }
  // Lends the memory of the DLPack producer `p` to the call; null when lend_dlpack refuses it.
  DLTensor* borrow_dlpack(PyObject* p) {
    // Reserved for every argument at once: the DLTensors handed out must not move.
    if (lent_.capacity() == 0) lent_.reserve(capacity_);
    LentDLPack lent{};
    if (!lend_dlpack(nb::handle(p), lent)) return nullptr;
    return &lent_.emplace_back(lent).dl;
  }

 private:
  static constexpr size_t kOnStack = 8;
  BorrowedArray* data() { return large_ ? large_.get() : small_; }
  BorrowedArray small_[kOnStack];  // left uninitialised: only the first count_ are used
  std::unique_ptr<BorrowedArray[]> large_;
  std::vector<LentDLPack> lent_;
  size_t capacity_;
  size_t count_ = 0;
};

// `value` as Kiln takes it when that is decided before asking for __dlpack__: Kiln's and
// Python's own values, numpy arrays, shapes, tuples and lists, scalar subclasses. Nothing for
// anything else (DLPack producers, numpy scalars, callables, ...): see other_value.
std::optional<Any> plain_value(nb::handle value, const char* what, int index) {
  PyObject* p = value.ptr();
  PyTypeObject* type = Py_TYPE(p);
  const BoundTypes& bound = bound_types();
  // Exact types first: these are the values of hot calls.
  if (type == bound.tensor) return Any(*nb::inst_ptr<Tensor>(value));
  if (type == &PyLong_Type) return Any(int64_of(p, what, index));
  if (type == &PyFloat_Type) return Any(PyFloat_AS_DOUBLE(p));
  if (p == Py_None) return Any();
  if (type == &PyBool_Type) return Any(p == Py_True);
  if (type == bound.function) return Any(*nb::inst_ptr<Function>(value));
  if (type == bound.device) return Any(*nb::inst_ptr<Device>(value));
  if (type == &PyUnicode_Type) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(p, &size);
    if (text == nullptr) throw nb::python_error();
    return Any(std::string_view(text, static_cast<size_t>(size)));
  }
  if (type == bound.module) return Any(*nb::inst_ptr<Module>(value));
  if (type == bound.dtype) return Any(*nb::inst_ptr<DataType>(value));
  if (type == bound.object) return nb::inst_ptr<AnyObject>(value)->value;
  if (is_ndarray(type)) return Any(tensor_from_dlpack(value));  // owning; shares the memory
  if (PyBytes_Check(p)) {
    return Any::bytes(
        std::string_view(PyBytes_AS_STRING(p), static_cast<size_t>(PyBytes_GET_SIZE(p))));
  }
  if (shape_tuple_type != nullptr &&
      PyObject_TypeCheck(p, reinterpret_cast<PyTypeObject*>(shape_tuple_type))) {
    std::vector<int64_t> dims;
    for (nb::handle item : nb::borrow<nb::tuple>(value)) dims.push_back(nb::cast<int64_t>(item));
    return Any::shape(std::move(dims));
  }
  if (PyTuple_Check(p) || PyList_Check(p)) {
    std::vector<Any> items;
    for (nb::handle item : value) items.push_back(to_any(item, what, index));
    return vm::make_array(std::move(items));
  }
  // Subclasses of the scalar types (numpy scalars are not: they come below).
  if (PyBool_Check(p)) return Any(p == Py_True);
  if (PyLong_Check(p)) return Any(int64_of(p, what, index));
  if (PyFloat_Check(p)) return Any(PyFloat_AsDouble(p));
  return std::nullopt;
}

bool is_dlpack_producer(nb::handle value) {
  return PyObject_HasAttrString(value.ptr(), "__dlpack__") != 0;
}

// `value` as Kiln takes it when it is neither a plain_value nor a DLPack producer: numpy
// scalars and other numbers, callables; a TypeError naming what Kiln takes for anything else.
Any other_value(nb::handle value, const char* what, int index) {
  PyObject* p = value.ptr();
  PyTypeObject* type = Py_TYPE(p);
  if (PyObject_HasAttrString(p, "__index__") != 0) return Any(nb::cast<int64_t>(value));
  if (PyObject_HasAttrString(p, "__float__") != 0) {
    const double v = PyFloat_AsDouble(p);
    if (v == -1.0 && PyErr_Occurred() != nullptr) throw nb::python_error();
    return Any(v);
  }
  if (PyCallable_Check(p) != 0) {
    nb::object name = nb::getattr(value, "__qualname__", nb::str("callable"));
    return Any(function_from_callable(value, "python:" + nb::cast<std::string>(nb::str(name))));
  }
  throw nb::type_error((value_name(what, index) + ": Kiln cannot take a value of type '" +
                        nb::cast<std::string>(nb::str(nb::handle(type).attr("__name__"))) +
                        "' (it takes None, bool, int, float, str, bytes, kiln.Tensor, "
                        "kiln.Device, kiln.Function, kiln.Module, tuples, callables and "
                        "arrays with __dlpack__)")
                           .c_str());
}

}  // namespace

Any to_any(nb::handle value, const char* what, int index) {
  if (std::optional<Any> plain = plain_value(value, what, index)) return std::move(*plain);
  if (is_dlpack_producer(value)) return Any(tensor_from_dlpack(value));  // shares the memory
  return other_value(value, what, index);
}

nb::object call_from_python(const Function& f, PyObject* const* args, size_t n) {
  constexpr size_t kOnStack = 8;
  KilnAny small[kOnStack];
  std::vector<KilnAny> large(n > kOnStack ? n : 0);
  KilnAny* packed = n > kOnStack ? large.data() : small;
  std::vector<Any> owned;    // values made for this call; allocated only when one is needed
  BorrowedArrays arrays(n);  // arrays lent to the call; released after it, with the GIL
  int borrows = -1;          // whether f borrows its arguments; asked at the first array
  auto borrows_now = [&] {
    if (borrows < 0) borrows = borrows_arguments(f) ? 1 : 0;
    return borrows != 0;
  };
  const BoundTypes& bound = bound_types();
  for (size_t i = 0; i < n; ++i) {
    PyObject* p = args[i];
    PyTypeObject* type = Py_TYPE(p);
    KilnAny& a = packed[i];
    a.flags = 0;
    if (type == bound.tensor) {  // borrowed, as kiln::Function passes a Tensor
      a.type_code = KILN_TYPE_TENSOR;
      a.flags = kAnyFlagHostObject;
      a.value.v_tensor = &nb::inst_ptr<Tensor>(p)->get()->dl;
    } else if (type == &PyFloat_Type) {
      a.type_code = KILN_TYPE_FLOAT;
      a.value.v_float64 = PyFloat_AS_DOUBLE(p);
    } else if (type == &PyLong_Type) {
      a.type_code = KILN_TYPE_INT;
      a.value.v_int64 = int64_of(p, "argument", static_cast<int>(i));
    } else if (DLTensor* dl = is_ndarray(type) && borrows_now() ? arrays.borrow(p) : nullptr) {
      // A numpy array lent for the call, as a kernel's caller lends a DLTensor (no host
      // object behind it: flags 0). Anything borrow_array refuses is converted below.
      a.type_code = KILN_TYPE_TENSOR;
      a.value.v_tensor = dl;
    } else {
      const nb::handle value(p);
      const int index = static_cast<int>(i);
      std::optional<Any> plain = plain_value(value, "argument", index);
      if (!plain && is_dlpack_producer(value)) {
        // Another producer's host memory (a TVM or PyTorch tensor, ...), lent for the call as
        // a numpy array is; device memory and what cannot be lent become a shared Tensor.
        if (DLTensor* dl = borrows_now() ? arrays.borrow_dlpack(p) : nullptr) {
          a.type_code = KILN_TYPE_TENSOR;
          a.value.v_tensor = dl;
          continue;
        }
        plain = Any(tensor_from_dlpack(value));
      }
      if (owned.empty()) owned.reserve(n);  // to_abi views stay valid: no reallocation
      owned.push_back(plain ? std::move(*plain) : other_value(value, "argument", index));
      a = owned.back().to_abi();
    }
  }
  Any result = without_gil([&] { return f.call_abi(packed, static_cast<int32_t>(n)); });
  return from_any(result);
}

std::vector<Any> to_anys(nb::handle sequence) {
  std::vector<Any> out;
  int index = 0;
  for (nb::handle item : sequence) out.push_back(to_any(item, "argument", index++));
  return out;
}

nb::object from_any(const Any& value) {
  switch (value.type_code()) {
    case KILN_TYPE_NONE:
      return nb::none();
    case KILN_TYPE_BOOL:
      return nb::bool_(value.raw_int() != 0);
    case KILN_TYPE_INT:
      return nb::int_(value.raw_int());
    case KILN_TYPE_FLOAT:
      return nb::float_(value.raw_float());
    case KILN_TYPE_STRING:
      return nb::str(value.cast<std::string>().c_str());
    case KILN_TYPE_BYTES: {
      const std::string data = value.cast<std::string>();
      return nb::steal(
          PyBytes_FromStringAndSize(data.data(), static_cast<Py_ssize_t>(data.size())));
    }
    case KILN_TYPE_DEVICE:
      return nb::cast(value.cast<Device>());
    case KILN_TYPE_DTYPE:
      return nb::cast(value.cast<DataType>());
    case KILN_TYPE_SHAPE: {
      const std::vector<int64_t> shape = value.cast<std::vector<int64_t>>();
      nb::tuple dims = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
      for (size_t i = 0; i < shape.size(); ++i) {
        PyTuple_SET_ITEM(dims.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i]));
      }
      return shape_tuple_type != nullptr ? nb::handle(shape_tuple_type)(dims) : nb::object(dims);
    }
    case KILN_TYPE_TENSOR:
      return nb::cast(value.cast<Tensor>());
    case KILN_TYPE_FUNCTION:
      return nb::cast(value.cast<Function>());
    case kTypeModule:
      return nb::cast(value.cast<Module>());
    default:
      break;
  }
  if (auto array = value.as_object<vm::ArrayObj>()) {
    nb::tuple items =
        nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(array->items.size())));
    for (size_t i = 0; i < array->items.size(); ++i) {
      PyTuple_SET_ITEM(items.ptr(), static_cast<Py_ssize_t>(i),
                       from_any(array->items[i]).release().ptr());
    }
    return items;
  }
  return nb::cast(AnyObject{value});
}

}  // namespace kiln::python
