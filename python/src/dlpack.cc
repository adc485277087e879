// SPDX-License-Identifier: Apache-2.0
// DLPack capsules both ways: Kiln tensors out to numpy/PyTorch/TVM, and their arrays in, with
// no copy. DLPack 1.0's versioned capsules carry a read-only flag (numpy makes arrays from the
// older, unversioned ones read-only), so both kinds are spoken.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "bindings.h"

namespace kiln::python {
namespace {

// DLPack 1.0's versioned managed tensor, declared here because Debian 12 ships dlpack.h 0.6,
// which predates it. The layout is DLPack's stable ABI (dlpack.h >= 1.0).
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kFlagReadOnly = uint64_t{1} << 0;  // DLPACK_FLAG_BITMASK_READ_ONLY

constexpr const char* kLegacyName = "dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kUsedLegacyName = "used_dltensor";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";

// Whether `dl` has no elements (then no stride is ever stepped).
bool is_zero_size(const DLTensor& dl) {
  for (int32_t i = 0; i < dl.ndim; ++i) {
    if (dl.shape[i] == 0) return true;
  }
  return false;
}

// Whether `dl` is compact row-major (size-1 dimensions may have any stride, and a zero-size
// array any strides: numpy gives (0,) for np.zeros(0)).
bool is_compact(const DLTensor& dl) {
  if (dl.strides == nullptr || is_zero_size(dl)) return true;
  int64_t expected = 1;
  for (int32_t i = dl.ndim - 1; i >= 0; --i) {
    if (dl.shape[i] != 1 && dl.strides[i] != expected) return false;
    expected *= dl.shape[i];
  }
  return true;
}

std::string dims(const int64_t* values, int32_t n) {
  std::string out = "(";
  for (int32_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + (n == 1 ? ",)" : ")");
}

// Refuses memory Kiln cannot take as it is; the capsule is left unconsumed, so its producer
// still frees it.
void check_shareable(const DLTensor& dl, bool read_only) {
  if (read_only) {
    throw nb::value_error(
        "a read-only array cannot be shared with Kiln (kernels may write to any argument); "
        "pass a writable copy (x.copy())");
  }
  if (!is_compact(dl)) {
    throw nb::value_error(
        ("a non-contiguous array (shape " + dims(dl.shape, dl.ndim) + ", strides " +
         dims(dl.strides, dl.ndim) +
         " in elements) cannot be shared with Kiln; pass numpy.ascontiguousarray(x) (or "
         "x.contiguous() for PyTorch) to copy it into compact memory")
            .c_str());
  }
}

// An unversioned managed tensor that owns a versioned one (Kiln's Tensor takes the former).
DLManagedTensor* adopt_versioned(DLManagedTensorVersioned* versioned) {
  auto* legacy = new DLManagedTensor{};
  legacy->dl_tensor = versioned->dl_tensor;  // shape and strides stay in `versioned`
  legacy->manager_ctx = versioned;
  legacy->deleter = [](DLManagedTensor* self) {
    auto* v = static_cast<DLManagedTensorVersioned*>(self->manager_ctx);
    if (v->deleter != nullptr) v->deleter(v);
    delete self;
  };
  return legacy;
}

// `producer` as numpy uint16 data when it is a numpy array of ml_dtypes.bfloat16, which DLPack
// cannot describe (numpy's __dlpack__ refuses it); else null.
nb::object bfloat16_bits(nb::handle producer) {
  nb::object dtype = nb::getattr(producer, "dtype", nb::none());
  if (dtype.is_none() || !nb::hasattr(producer, "view")) return {};
  nb::object name = nb::getattr(dtype, "name", nb::none());
  if (!nb::isinstance<nb::str>(name) || nb::cast<std::string>(name) != "bfloat16") return {};
  return producer.attr("view")("uint16");
}

// The capsule of a producer: the versioned kind when it speaks DLPack 1.0, else the old one.
// Sets `bfloat16` when the capsule holds bfloat16 data as uint16.
nb::object capsule_of(nb::handle producer, bool& bfloat16) {
  bfloat16 = false;
  if (PyCapsule_CheckExact(producer.ptr())) return nb::borrow(producer);
  // producer.__dlpack__(max_version=(1, 0)) by vectorcall: no bound method, no keyword dict
  // (this is on the path of every call that takes an array). Interned once, never freed.
  static PyObject* const method = PyUnicode_InternFromString("__dlpack__");
  static PyObject* const keywords = Py_BuildValue("(s)", "max_version");
  static PyObject* const version = Py_BuildValue("(ii)", 1, 0);
  if (method == nullptr || keywords == nullptr || version == nullptr) throw nb::python_error();
  PyObject* call_args[] = {producer.ptr(), version};
  PyObject* capsule =
      PyObject_VectorcallMethod(method, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, keywords);
  if (capsule != nullptr) return nb::steal(capsule);
  nb::python_error error;  // takes the error: none is set from here on
  if (error.matches(PyExc_BufferError)) {
    // Looked for only after numpy refused: the hot path of arguments pays nothing for it.
    nb::object bits = bfloat16_bits(producer);
    if (!bits) throw error;
    bfloat16 = true;
    bool unused = false;
    return capsule_of(bits, unused);
  }
  if (!error.matches(PyExc_TypeError)) throw error;
  return producer.attr("__dlpack__")();  // a producer from before max_version
}

// `t` as Kiln keeps it: a zero-size tensor loses its strides (producers give any, which would
// make it look non-contiguous to copies and kernels), and bfloat16 data carried as uint16 gets
// its element type back.
Tensor normalized(Tensor t, bool bfloat16) {
  if (t.numel() == 0) {
    t.get()->strides.clear();
    t.get()->dl.strides = nullptr;
  }
  if (bfloat16) t.get()->dl.dtype = DataType::BFloat16();
  return t;
}

Ref<DeviceBackend> backend_for(const DLTensor& dl) {
  if (dl.device.device_type == kDLCPU) return {};
  return runtime().find_backend(dl.device.device_type);
}

}  // namespace

Tensor tensor_from_dlpack(nb::handle producer) {
  bool bfloat16 = false;
  nb::object capsule = capsule_of(producer, bfloat16);
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, kVersionedName) != 0) {
    auto* versioned =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kVersionedName));
    if (versioned->version.major != 1) {
      throw nb::value_error(("a DLPack " + std::to_string(versioned->version.major) + "." +
                             std::to_string(versioned->version.minor) +
                             " capsule; Kiln reads DLPack 1.x")
                                .c_str());
    }
    check_shareable(versioned->dl_tensor, (versioned->flags & kFlagReadOnly) != 0);
    PyCapsule_SetName(c, kUsedVersionedName);
    DLManagedTensor* legacy = adopt_versioned(versioned);
    return normalized(Tensor::from_dlpack(legacy, backend_for(legacy->dl_tensor)), bfloat16);
  }
  if (PyCapsule_IsValid(c, kLegacyName) != 0) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kLegacyName));
    check_shareable(managed->dl_tensor, false);
    PyCapsule_SetName(c, kUsedLegacyName);
    return normalized(Tensor::from_dlpack(managed, backend_for(managed->dl_tensor)), bfloat16);
  }
  const char* name = PyCapsule_GetName(c);
  PyErr_Clear();
  throw nb::value_error(("expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', "
                         "got one named '" +
                         std::string(name != nullptr ? name : "") +
                         "' (a capsule can be consumed only once)")
                            .c_str());
}

bool lend_dlpack(nb::handle producer, LentDLPack& lent) {
  bool bfloat16 = false;
  // What __dlpack__ raises goes to the caller as it would from tensor_from_dlpack (a Ctrl-C
  // there included).
  const nb::object capsule = capsule_of(producer, bfloat16);
  PyObject* c = capsule.ptr();
  const DLTensor* dl = nullptr;
  bool read_only = false;
  if (PyCapsule_IsValid(c, kVersionedName) != 0) {
    auto* versioned =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kVersionedName));
    if (versioned->version.major != 1) return false;
    dl = &versioned->dl_tensor;
    read_only = (versioned->flags & kFlagReadOnly) != 0;
    lent.managed = versioned;
    lent.versioned = true;
  } else if (PyCapsule_IsValid(c, kLegacyName) != 0) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kLegacyName));
    dl = &managed->dl_tensor;
    lent.managed = managed;
    lent.versioned = false;
  } else {
    return false;
  }
  // Device memory keeps the Tensor path: it finds the device's backend and its producer's
  // stream rules; this path is for what a kernel on the host reads in place.
  if (read_only || dl->device.device_type != kDLCPU || !is_compact(*dl)) {
    lent.managed = nullptr;
    return false;  // not consumed: the capsule still frees it
  }
  PyCapsule_SetName(c, lent.versioned ? kUsedVersionedName : kUsedLegacyName);
  lent.dl = *dl;              // shape (and strides) stay in the managed tensor until it is freed
  lent.dl.strides = nullptr;  // compact: checked above
  if (bfloat16) lent.dl.dtype = DataType::BFloat16();
  return true;
}

void release_lent_dlpack(LentDLPack& lent) {
  if (lent.managed == nullptr) return;
  if (lent.versioned) {
    auto* versioned = static_cast<DLManagedTensorVersioned*>(lent.managed);
    if (versioned->deleter != nullptr) versioned->deleter(versioned);
  } else {
    auto* managed = static_cast<DLManagedTensor*>(lent.managed);
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
  lent.managed = nullptr;
}

nb::object dlpack_capsule(const Tensor& tensor, bool versioned) {
  DLManagedTensor* managed = tensor.to_dlpack();
  if (!versioned) {
    PyObject* capsule = PyCapsule_New(managed, kLegacyName, [](PyObject* self) {
      if (PyCapsule_IsValid(self, kLegacyName) == 0) return;  // consumed
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, kLegacyName));
      if (m->deleter != nullptr) m->deleter(m);
    });
    if (capsule == nullptr) {
      managed->deleter(managed);
      throw nb::python_error();
    }
    return nb::steal(capsule);
  }
  auto* v = new DLManagedTensorVersioned{};
  v->version = {1, 0};
  v->manager_ctx = managed;
  v->deleter = [](DLManagedTensorVersioned* self) {
    auto* m = static_cast<DLManagedTensor*>(self->manager_ctx);
    m->deleter(m);
    delete self;
  };
  v->flags = 0;  // writable, shared (not a copy)
  v->dl_tensor = managed->dl_tensor;
  PyObject* capsule = PyCapsule_New(v, kVersionedName, [](PyObject* self) {
    if (PyCapsule_IsValid(self, kVersionedName) == 0) return;  // consumed
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(self, kVersionedName));
    m->deleter(m);
  });
  if (capsule == nullptr) {
    v->deleter(v);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

}  // namespace kiln::python
