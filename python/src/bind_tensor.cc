// kiln.Tensor with DLPack both ways, kiln.empty, kiln.from_dlpack.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace kiln::python {
namespace {

std::vector<int64_t> shape_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor",
                     "An n-dimensional array on a device. Shares memory with numpy, PyTorch and "
                     "TVM through DLPack: numpy.from_dlpack(t) and kiln.from_dlpack(array).")
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
          "A copy in host memory (numpy() wraps it).")
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
            if (nb::isinstance<Device>(target)) {
              const Device d = nb::cast<Device>(target);
              return nb::cast(without_gil([&] { return self.to(d, runtime()); }));
            }
            Tensor dst = nb::cast<Tensor>(target);
            without_gil([&] { self.copy_to(dst); });
            return nb::cast(dst);
          },
          nb::arg("target"),
          "Copies into `target`: a kiln.Tensor of the same shape and dtype (returned), or a "
          "kiln.Device (a new tensor there is returned).")
      .def(
          "to",
          [](const Tensor& self, Device d) {
            return without_gil([&] { return self.to(d, runtime()); });
          },
          nb::arg("device"), "A copy on `device`.")
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
      .def("__repr__", &Tensor::str);

  m.def(
      "empty",
      [](std::vector<int64_t> shape, DataType dtype, Device device) {
        return without_gil(
            [&] { return Tensor::empty(std::move(shape), dtype, device, runtime()); });
      },
      nb::arg("shape"), nb::arg("dtype") = DataType::Float(32), nb::arg("device") = Device::cpu(),
      "An uninitialised tensor of `shape` and `dtype` (a kiln.DataType or its name) on `device`.");

  m.def("from_dlpack", &tensor_from_dlpack, nb::arg("array"),
        "A kiln.Tensor sharing the memory of `array` (numpy, PyTorch, TVM, or a DLPack capsule): "
        "no copy. ValueError for non-contiguous memory (copy it first).");
}

}  // namespace kiln::python
