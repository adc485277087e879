// SPDX-License-Identifier: Apache-2.0
// kiln.Tensor with DLPack both ways, numpy's protocols (numpy(), __array__, the buffer protocol,
// a numpy-like repr), kiln.empty and kiln.from_dlpack.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kiln/error.h"

namespace kiln::python {
namespace {

using namespace nb::literals;

// The most bytes repr downloads from a device to show values: a traceback or a debugger that
// prints a multi-gigabyte device tensor (or one behind an RPC link) must not stall on it.
constexpr size_t kReprDeviceCopyLimit = size_t{1} << 20;

// The shape as a vector (for nb::cast to a tuple and for new shapes).
std::vector<int64_t> shape_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// "(2, 3)", "(4,)", "()": a shape as Python writes a tuple.
std::string shape_text(const Tensor& t) {
  std::string out = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    out += (i ? ", " : "") + std::to_string(t.shape()[i]);
  }
  return out + (t.shape().size() == 1 ? ",)" : ")");
}

// The name of `value`'s type ('NoneType', 'list'), for messages.
std::string type_name_of(nb::handle value) {
  return nb::cast<std::string>(nb::str(value.type().attr("__name__")));
}

// Whether numpy and the buffer protocol may read the tensor's memory where it is.
bool in_host_memory(const Tensor& t) { return t.device().type == kDLCPU; }

// The error for reading a device tensor's memory in place, pointing at the copy that works.
std::string not_in_host_memory(const Tensor& t, const char* what) {
  return std::string(what) + ": the kiln.Tensor is on " + runtime().device_str(t.device()) +
         ", not in host memory; call .numpy() to copy it to the host";
}

// A shape from a Python int or a sequence of ints (numpy integers too), as TVM's empty takes.
// TypeError for anything else; negative extents are the core's ValueError.
std::vector<int64_t> shape_from(nb::handle shape) {
  auto extent = [](nb::handle item) -> int64_t {
    if (PyIndex_Check(item.ptr()) == 0 || PyBool_Check(item.ptr())) {
      throw nb::type_error(
          ("shape: each extent must be an int, got a '" + type_name_of(item) + "'").c_str());
    }
    nb::object index = nb::steal(PyNumber_Index(item.ptr()));
    if (!index) throw nb::python_error();
    return nb::cast<int64_t>(index);
  };
  if (PyIndex_Check(shape.ptr()) != 0 && !PyBool_Check(shape.ptr())) return {extent(shape)};
  if (PySequence_Check(shape.ptr()) == 0 || PyUnicode_Check(shape.ptr()) ||
      PyBytes_Check(shape.ptr())) {
    throw nb::type_error(
        ("shape must be an int or a sequence of ints, got a '" + type_name_of(shape) + "'")
            .c_str());
  }
  std::vector<int64_t> out;
  for (nb::handle item : shape) out.push_back(extent(item));
  return out;
}

// The element type named by `dtype`: a kiln.DataType, its name ('float32'), or whatever
// numpy.dtype() takes (numpy.float32, numpy.dtype('int8'), ml_dtypes.bfloat16). ValueError
// naming an unknown name or a numpy type Kiln lacks, with the valid names; TypeError otherwise.
DataType dtype_from(nb::handle dtype) {
  if (nb::isinstance<DataType>(dtype)) return nb::cast<DataType>(dtype);
  if (nb::isinstance<nb::str>(dtype)) return DataType::parse(nb::cast<std::string>(dtype));
  nb::object as_numpy;
  if (!dtype.is_none()) {
    try {
      as_numpy = nb::module_::import_("numpy").attr("dtype")(dtype);
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ImportError)) throw;
    }
  }
  if (!as_numpy) {
    throw nb::type_error(("dtype must be a str ('float32'), a kiln.DataType or a numpy dtype "
                          "(numpy.float32, numpy.dtype('int8')), got a '" +
                          type_name_of(dtype) + "'")
                             .c_str());
  }
  const std::string name = nb::cast<std::string>(as_numpy.attr("name"));
  if (!nb::cast<bool>(as_numpy.attr("isnative"))) {
    throw nb::value_error(("numpy dtype '" + nb::cast<std::string>(nb::str(as_numpy)) + "'" +
                           " is not in the machine's byte order; Kiln takes native " + name)
                              .c_str());
  }
  try {
    return DataType::parse(name);
  } catch (const kiln::ValueError& e) {
    throw nb::value_error(
        ("numpy dtype '" + name + "' has no Kiln equivalent: " + e.what()).c_str());
  }
}

// The device named by `device`: a kiln.Device, a name ('cpu', 'cuda:1', a plugin's type name),
// or None for cpu:0. ValueError (the runtime's) naming an unknown name and the known ones;
// TypeError otherwise.
Device device_from(nb::handle device) {
  if (device.is_none()) return Device::cpu();
  if (nb::isinstance<Device>(device)) return nb::cast<Device>(device);
  if (nb::isinstance<nb::str>(device)) {
    return runtime().parse_device(nb::cast<std::string>(device));
  }
  throw nb::type_error(
      ("device must be a kiln.Device or a name such as 'cpu' or 'cuda:1', got a '" +
       type_name_of(device) + "'")
          .c_str());
}

// A view of compact `t` as `dtype` elements of `shape` (covering the same bytes), sharing its
// memory and keeping it alive.
Tensor reinterpreted(const Tensor& t, DataType dtype, std::vector<int64_t> shape) {
  Tensor view = Tensor::from_dlpack(t.to_dlpack(), t.get()->backend);
  TensorObj* obj = view.get();
  obj->shape = std::move(shape);
  obj->strides.clear();
  obj->dl.shape = obj->shape.data();
  obj->dl.ndim = static_cast<int32_t>(obj->shape.size());
  obj->dl.strides = nullptr;
  obj->dl.dtype = dtype;
  return view;
}

// What numpy_view does with bfloat16 when ml_dtypes is missing.
enum class WithoutMlDtypes { kRaise, kWidenToFloat32 };

// `host` (in host memory) as a numpy array sharing its memory. Lanes become a last dimension
// (as TVM's numpy() does); bfloat16 is ml_dtypes.bfloat16, or, without ml_dtypes, an ImportError
// saying to install it (kRaise) or the values widened to float32 in a new array (for repr).
nb::object numpy_view(const Tensor& host, WithoutMlDtypes without_ml_dtypes) {
  nb::module_ numpy = nb::module_::import_("numpy");
  DataType element = host.dtype();
  const bool bfloat16 = element.code == kDLBfloat && element.bits == 16;
  if (element.lanes == 1 && !bfloat16) return numpy.attr("from_dlpack")(host);
  if (!host.is_contiguous()) {
    throw nb::value_error(("cannot view a non-contiguous " + element.str() +
                           " tensor as a numpy array; copy it with .numpy()")
                              .c_str());
  }
  std::vector<int64_t> shape = shape_of(host);
  if (element.lanes != 1) shape.push_back(element.lanes);
  element.lanes = 1;
  if (bfloat16) element = DataType::UInt(16);  // DLPack consumers know no bfloat16
  nb::object array = numpy.attr("from_dlpack")(reinterpreted(host, element, std::move(shape)));
  if (!bfloat16) return array;
  nb::object ml_dtypes;
  try {
    ml_dtypes = nb::module_::import_("ml_dtypes");
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_ImportError)) throw;
    if (without_ml_dtypes == WithoutMlDtypes::kRaise) {
      throw nb::import_error(
          "numpy has no bfloat16: reading a bfloat16 kiln.Tensor needs the ml_dtypes package "
          "(pip install ml_dtypes), which provides numpy's bfloat16 type");
    }
    // bfloat16 is the upper half of a float32: shift the bits into place.
    return array.attr("astype")("uint32").attr("__lshift__")(16).attr("view")("float32");
  }
  return array.attr("view")(ml_dtypes.attr("bfloat16"));
}

// numpy's repr with Kiln's type and the device: "kiln.Tensor([0., 1.], dtype=float32,
// device=cpu:0)", truncated and wrapped as numpy's print options say (the extras go on a line of
// their own when the last line has no room, as numpy's do). A device tensor is copied to the host
// to show its values only when it is small (kReprDeviceCopyLimit); a repr never raises.
std::string tensor_repr(const Tensor& t) {
  const std::string prefix = "kiln.Tensor(";
  const std::string type_and_device =
      "dtype=" + t.dtype().str() + ", device=" + runtime().device_str(t.device()) + ")";
  auto without_values = [&](const std::string& why) {
    return prefix + "<" + why + ">, shape=" + shape_text(t) + ", " + type_and_device;
  };
  // numpy says the shape when the values cannot: no elements, in other than one dimension.
  const std::string extras = t.numel() == 0 && t.ndim() != 1
                                 ? "shape=" + shape_text(t) + ", " + type_and_device
                                 : type_and_device;
  if (!in_host_memory(t) && t.nbytes() > kReprDeviceCopyLimit) {
    return without_values(std::to_string(t.nbytes()) +
                          " bytes on the device, not copied for display: call .numpy()");
  }
  try {
    const Tensor host = in_host_memory(t) ? t : without_gil([&] { return t.to_host(); });
    nb::object values = numpy_view(host, WithoutMlDtypes::kWidenToFloat32);
    nb::module_ numpy = nb::module_::import_("numpy");
    const std::string text =
        prefix +
        nb::cast<std::string>(numpy.attr("array2string")(values, "separator"_a = ", ",
                                                         "prefix"_a = prefix, "suffix"_a = ")")) +
        ",";
    const auto line_width = nb::cast<size_t>(numpy.attr("get_printoptions")()["linewidth"]);
    const size_t last_line = text.size() - (text.rfind('\n') + 1);  // npos + 1 is 0
    const bool wrap = last_line + 1 + extras.size() > line_width;
    return text + (wrap ? "\n" + std::string(prefix.size(), ' ') : " ") + extras;
  } catch (const nb::python_error& e) {
    return without_values("values unavailable: " + type_name_of(e.value()) + ": " +
                          nb::cast<std::string>(nb::str(e.value())));
  } catch (const std::exception& e) {
    return without_values(std::string("values unavailable: ") + e.what());
  }
}

// numpy's __array__(dtype=None, copy=None) (NumPy 2's signature): a host tensor's memory as a
// numpy array (shared unless `copy` is true), converted to `dtype` when given; copy=False with
// a conversion is a ValueError, as numpy's own. TypeError for a tensor off the host.
nb::object tensor_array(const Tensor& t, nb::handle dtype, nb::handle copy) {
  if (!in_host_memory(t)) {
    throw nb::type_error(not_in_host_memory(t, "kiln.Tensor.__array__").c_str());
  }
  const bool must_copy = !copy.is_none() && nb::cast<bool>(copy);
  const bool may_copy = copy.is_none() || must_copy;
  nb::object array =
      numpy_view(must_copy ? without_gil([&] { return t.to_host(); }) : t, WithoutMlDtypes::kRaise);
  if (dtype.is_none()) return array;
  nb::object want = nb::module_::import_("numpy").attr("dtype")(dtype);
  if (array.attr("dtype").equal(want)) return array;
  if (!may_copy) {
    throw nb::value_error(("kiln.Tensor.__array__: converting " + t.dtype().str() + " to " +
                           nb::cast<std::string>(nb::str(want)) + " needs a copy, but copy=False")
                              .c_str());
  }
  return array.attr("astype")(want);
}

// ---- The buffer protocol (PEP 3118) ---------------------------------------------------------

// The struct format of a scalar element type, or null for those without one (bfloat16, lanes).
const char* buffer_format(DataType t) {
  if (t.lanes != 1) return nullptr;
  switch (t.code) {
    case KILN_DL_BOOL:
      return "?";
    case kDLInt:
      return t.bits == 8    ? "b"
             : t.bits == 16 ? "h"
             : t.bits == 32 ? "i"
             : t.bits == 64 ? "q"
                            : nullptr;
    case kDLUInt:
      return t.bits == 8    ? "B"
             : t.bits == 16 ? "H"
             : t.bits == 32 ? "I"
             : t.bits == 64 ? "Q"
                            : nullptr;
    case kDLFloat:
      return t.bits == 16 ? "e" : t.bits == 32 ? "f" : t.bits == 64 ? "d" : nullptr;
    default:
      return nullptr;
  }
}

// The shape and byte strides a Py_buffer points at, owned by the buffer (view->internal).
struct BufferLayout {
  std::vector<Py_ssize_t> shape;
  std::vector<Py_ssize_t> strides;
};

int tensor_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  const Tensor& t = *nb::inst_ptr<Tensor>(self);
  if (!in_host_memory(t)) {
    PyErr_SetString(PyExc_TypeError, not_in_host_memory(t, "kiln.Tensor buffer").c_str());
    return -1;
  }
  const char* format = buffer_format(t.dtype());
  if (format == nullptr) {
    PyErr_SetString(PyExc_BufferError,
                    ("a " + t.dtype().str() +
                     " kiln.Tensor has no buffer format; use .numpy() or numpy.asarray(t)")
                        .c_str());
    return -1;
  }
  const bool strided = (flags & PyBUF_STRIDES) == PyBUF_STRIDES;
  if (!t.is_contiguous() && !strided) {
    PyErr_SetString(PyExc_BufferError, "a non-contiguous kiln.Tensor needs a strided buffer");
    return -1;
  }
  auto* layout = new BufferLayout;
  const auto itemsize = static_cast<Py_ssize_t>(t.dtype().bytes());
  Py_ssize_t step = itemsize;
  layout->shape.assign(t.shape().begin(), t.shape().end());
  layout->strides.resize(layout->shape.size());
  for (size_t i = layout->shape.size(); i-- > 0;) {
    layout->strides[i] = t.strides().empty() ? step : t.strides()[i] * itemsize;
    step *= layout->shape[i];
  }
  const bool with_shape = (flags & PyBUF_ND) == PyBUF_ND;
  view->buf = t.data();
  Py_INCREF(self);
  view->obj = self;
  view->len = static_cast<Py_ssize_t>(t.nbytes());
  view->readonly = 0;
  view->itemsize = itemsize;
  view->format = (flags & PyBUF_FORMAT) != 0 ? const_cast<char*>(format) : nullptr;
  view->ndim = with_shape ? t.ndim() : 1;
  view->shape = with_shape ? layout->shape.data() : nullptr;
  view->strides = strided ? layout->strides.data() : nullptr;
  view->suboffsets = nullptr;
  view->internal = layout;
  return 0;
}

void tensor_releasebuffer(PyObject*, Py_buffer* view) {
  delete static_cast<BufferLayout*>(view->internal);
}

PyType_Slot tensor_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(tensor_getbuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void*>(tensor_releasebuffer)},
    {0, nullptr},
};

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor", nb::type_slots(tensor_slots),
                     "An n-dimensional array on a device. Shares memory with numpy, PyTorch and "
                     "TVM through DLPack: numpy.from_dlpack(t) and kiln.from_dlpack(array); a "
                     "host tensor is also an array to numpy.asarray and memoryview.")
      .def_prop_ro("shape", [](const Tensor& t) { return nb::tuple(nb::cast(shape_of(t))); })
      .def_prop_ro(
          "dtype", [](const Tensor& t) { return t.dtype().str(); },
          "The element type's name, e.g. 'float32'.")
      .def_prop_ro("device", &Tensor::device)
      .def_prop_ro("ndim", &Tensor::ndim)
      .def_prop_ro("size", &Tensor::numel, "The number of elements.")
      .def_prop_ro("nbytes", &Tensor::nbytes)
      .def_prop_ro(
          "data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); },
          "The address of the first element (a device address off the host).")
      .def_prop_ro("is_contiguous", &Tensor::is_contiguous)
      .def(
          "_copy_to_host", [](const Tensor& t) { return without_gil([&] { return t.to_host(); }); },
          "A copy in host memory.")
      .def(
          "numpy",
          [](const Tensor& t) {
            return numpy_view(without_gil([&] { return t.to_host(); }), WithoutMlDtypes::kRaise);
          },
          // "numpy.ndarray[]" is how nanobind names a numpy array of any dtype and shape
          // (nb::ndarray<nb::numpy>): the stubs say numpy.typing.NDArray, which a method named
          // numpy cannot shadow.
          nb::sig("def numpy(self) -> numpy.ndarray[]"),
          "A numpy array with a copy of this tensor's data (downloaded from any device). "
          "bfloat16 comes as ml_dtypes.bfloat16 (ImportError saying so without ml_dtypes); "
          "lanes ('float32x4') become a last dimension.")
      .def("__array__", &tensor_array, nb::arg("dtype").none() = nb::none(),
           nb::arg("copy").none() = nb::none(),
           nb::sig("def __array__(self, dtype: object | None = None, copy: bool | None = None) "
                   "-> numpy.ndarray[]"),
           "numpy.asarray(t): a host tensor's memory, shared unless `copy`; TypeError for a "
           "tensor on a device (call .numpy()).")
      .def(
          "copyfrom",
          [](Tensor& self, nb::handle source) {
            Tensor src = nb::isinstance<Tensor>(source) ? nb::cast<Tensor>(source)
                                                        : tensor_from_dlpack(source);
            without_gil([&] { self.copy_from(src); });
            return self;
          },
          nb::arg("source"),
          "Copies `source` (a kiln.Tensor or an array with __dlpack__, same shape and dtype) "
          "into this tensor; returns this tensor.")
      .def(
          "copyto",
          [](const Tensor& self, nb::handle target) -> nb::object {
            if (!nb::isinstance<Tensor>(target)) {
              const Device d = device_from(target);
              return nb::cast(without_gil([&] { return self.to(d, runtime()); }));
            }
            Tensor dst = nb::cast<Tensor>(target);
            without_gil([&] { self.copy_to(dst); });
            return nb::cast(dst);
          },
          nb::arg("target"), nb::sig("def copyto(self, target: Tensor | Device | str) -> Tensor"),
          "Copies into `target`: a kiln.Tensor of the same shape and dtype (returned), or a "
          "kiln.Device or device name (a new tensor there is returned).")
      .def(
          "to",
          [](const Tensor& self, nb::handle device) {
            const Device d = device_from(device);
            return without_gil([&] { return self.to(d, runtime()); });
          },
          nb::arg("device"), nb::sig("def to(self, device: Device | str) -> Tensor"),
          "A copy on `device` (a kiln.Device or a name such as 'cpu:0').")
      .def(
          "__dlpack__",
          [](const Tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) {
            (void)stream;  // Kiln's calls are synchronous: the memory is ready
            // DLPack 1.0 consumers (numpy 2, PyTorch 2.3+) ask with max_version and get a
            // versioned capsule, which can say "writable"; others get the unversioned kind.
            const bool versioned =
                !max_version.is_none() && nb::cast<int>(nb::borrow<nb::tuple>(max_version)[0]) >= 1;
            if (!dl_device.is_none()) {
              auto want = nb::cast<std::pair<int32_t, int32_t>>(dl_device);
              if (want.first != t.device().type || want.second != t.device().id) {
                throw nb::buffer_error(
                    "kiln.Tensor.__dlpack__: cannot export to another device; "
                    "copy with tensor.to(device) first");
              }
            }
            if (!copy.is_none() && nb::cast<bool>(copy)) {
              return dlpack_capsule(without_gil([&] { return t.to(t.device(), runtime()); }),
                                    versioned);
            }
            return dlpack_capsule(t, versioned);
          },
          nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
          nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
          "A DLPack capsule sharing this tensor's memory (the Python array API protocol).")
      .def("__dlpack_device__",
           [](const Tensor& t) { return nb::make_tuple(t.device().type, t.device().id); })
      .def("__repr__", &tensor_repr);

  m.def(
      "empty",
      [](nb::handle shape, nb::handle dtype, nb::handle device) {
        std::vector<int64_t> dims = shape_from(shape);
        const DataType type = dtype_from(dtype);
        const Device where = device_from(device);
        return without_gil([&] { return Tensor::empty(std::move(dims), type, where, runtime()); });
      },
      nb::arg("shape"), nb::arg("dtype").none() = "float32", nb::arg("device").none() = nb::none(),
      nb::sig("def empty(shape: int | collections.abc.Sequence[int], dtype: str | DataType | "
              "object = 'float32', device: Device | str | None = None) -> Tensor"),
      "An uninitialised tensor of `shape` (an int or a sequence of ints) and `dtype` (a name "
      "such as 'float32', a kiln.DataType, or a numpy dtype: numpy.float32, numpy.dtype('int8'),"
      " ml_dtypes.bfloat16) on `device` (a kiln.Device or a name such as 'cuda:1'; default "
      "cpu:0). ValueError naming an unknown dtype or device and the valid ones.");

  m.def("from_dlpack", &tensor_from_dlpack, nb::arg("array"),
        "A kiln.Tensor sharing the memory of `array` (numpy, PyTorch, TVM, or a DLPack capsule): "
        "no copy. ValueError for non-contiguous memory (copy it first). numpy arrays of "
        "ml_dtypes.bfloat16 are bfloat16 tensors.");
}

}  // namespace kiln::python
