// SPDX-License-Identifier: Apache-2.0
// Header-only adapter from a C++ device backend class to the C table KilnDeviceBackend
// (kiln/c/device.h), so a backend writes plain member functions that return results and throw
// kiln::sdk::Error, and never a trampoline.
//
//   class MyBackend {
//    public:
//     static constexpr const char* kErrorContext = "mydev";  // prefixes error messages
//     int32_t device_count(const char** why_none);
//     void device_attributes(int32_t device_id, const kiln::sdk::AttributeVisitor& visit);
//     void* alloc(int32_t device_id, size_t nbytes, size_t alignment);
//     ...  // one member per slot, as listed at make_device_backend below
//   };
//   KilnDeviceBackend table = kiln::sdk::make_device_backend(&backend, kDLExtDev);
//
// Every slot catches what its member throws and returns it as a host error (see error.hpp),
// prefixed with the backend's kErrorContext; out-pointer arguments (count, out, stream, timer,
// ns, module, kernel) are checked for NULL before the member runs ("alloc: out is NULL");
// handles and arguments are the member's to check. A member a backend lacks
// leaves its slot NULL, which the ABI defines as "not implemented".
#ifndef KILN_SDK_DEVICE_BACKEND_HPP_
#define KILN_SDK_DEVICE_BACKEND_HPP_

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "kiln/c/device.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"

namespace kiln::sdk {

// The visitor device_attributes receives, with typed calls in place of building KilnAny
// values by hand. Values are borrowed by the host for the duration of each call only.
class AttributeVisitor {
 public:
  // `visit` and `ctx` come from the host's device_attributes call; `visit` is not NULL.
  AttributeVisitor(KilnAttributeVisitor visit, void* ctx) : visit_(visit), ctx_(ctx) {}

  void operator()(const std::string& key, int64_t value) const {
    KilnAny v{};
    v.type_code = KILN_TYPE_INT;
    v.value.v_int64 = value;
    visit_(ctx_, key.c_str(), &v);
  }
  void operator()(const std::string& key, double value) const {
    KilnAny v{};
    v.type_code = KILN_TYPE_FLOAT;
    v.value.v_float64 = value;
    visit_(ctx_, key.c_str(), &v);
  }
  void operator()(const std::string& key, const std::string& value) const {
    KilnAny v{};
    v.type_code = KILN_TYPE_STRING;
    v.value.v_str = value.c_str();
    visit_(ctx_, key.c_str(), &v);
  }
  // One attribute held as a variant of the types above (int64_t, double, std::string).
  template <typename... Types>
  void operator()(const std::string& key, const std::variant<Types...>& value) const {
    std::visit([&](const auto& v) { (*this)(key, v); }, value);
  }
  // Every (key, value) pair of `attributes`: a map, or a range of structs with `key` and
  // `value` members.
  template <typename Range>
  void all(const Range& attributes) const {
    for (const auto& a : attributes) {
      if constexpr (requires { a.first; }) {
        (*this)(a.first, a.second);
      } else {
        (*this)(a.key, a.value);
      }
    }
  }

 private:
  KilnAttributeVisitor visit_;
  void* ctx_;
};

namespace detail {

// Throws KILN_ERROR_VALUE "<what> is NULL" for a NULL out-pointer from the host.
inline void require(const void* p, const char* what) {
  if (p == nullptr) throw Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
}

template <typename Backend>
Backend& backend_of(void* self) {
  return *static_cast<Backend*>(self);
}

// The slots, one static function per KilnDeviceBackend member, each guarding the backend's
// member of the same name.
template <typename Backend>
struct DeviceSlots {
  // The prefix of every error message: the backend's kErrorContext, else the plugin's name.
  static const char* context() {
    if constexpr (requires { Backend::kErrorContext; }) {
      return Backend::kErrorContext;
    } else {
      return plugin_name().c_str();
    }
  }

  static KilnError* device_count(void* self, int32_t* count, const char** why_none) {
    return guard(context(), [&] {
      require(count, "device_count: count");
      *count = backend_of<Backend>(self).device_count(why_none);
    });
  }
  static KilnError* device_attributes(void* self, int32_t device_id, KilnAttributeVisitor visit,
                                      void* ctx) {
    return guard(context(), [&] {
      require(reinterpret_cast<const void*>(visit), "device_attributes: visit");
      backend_of<Backend>(self).device_attributes(device_id, AttributeVisitor(visit, ctx));
    });
  }
  static KilnError* alloc(void* self, int32_t device_id, size_t nbytes, size_t alignment,
                          void** out) {
    return guard(context(), [&] {
      require(out, "alloc: out");
      *out = backend_of<Backend>(self).alloc(device_id, nbytes, alignment);
    });
  }
  static KilnError* free(void* self, int32_t device_id, void* ptr) {
    return guard(context(), [&] { backend_of<Backend>(self).free(device_id, ptr); });
  }
  static KilnError* copy_to_device(void* self, int32_t device_id, const void* host_src, void* dst,
                                   size_t dst_offset, size_t nbytes, void* stream) {
    return guard(context(), [&] {
      backend_of<Backend>(self).copy_to_device(device_id, host_src, dst, dst_offset, nbytes,
                                               stream);
    });
  }
  static KilnError* copy_to_host(void* self, int32_t device_id, const void* src, size_t src_offset,
                                 void* host_dst, size_t nbytes, void* stream) {
    return guard(context(), [&] {
      backend_of<Backend>(self).copy_to_host(device_id, src, src_offset, host_dst, nbytes, stream);
    });
  }
  static KilnError* copy_on_device(void* self, int32_t device_id, const void* src,
                                   size_t src_offset, void* dst, size_t dst_offset, size_t nbytes,
                                   void* stream) {
    return guard(context(), [&] {
      backend_of<Backend>(self).copy_on_device(device_id, src, src_offset, dst, dst_offset, nbytes,
                                               stream);
    });
  }
  static KilnError* synchronize(void* self, int32_t device_id, void* stream) {
    return guard(context(), [&] { backend_of<Backend>(self).synchronize(device_id, stream); });
  }
  static KilnError* stream_create(void* self, int32_t device_id, void** stream) {
    return guard(context(), [&] {
      require(stream, "stream_create: stream");
      *stream = backend_of<Backend>(self).stream_create(device_id);
    });
  }
  static KilnError* stream_destroy(void* self, int32_t device_id, void* stream) {
    return guard(context(), [&] { backend_of<Backend>(self).stream_destroy(device_id, stream); });
  }
  static KilnError* timer_create(void* self, int32_t device_id, void** timer) {
    return guard(context(), [&] {
      require(timer, "timer_create: timer");
      *timer = backend_of<Backend>(self).timer_create(device_id);
    });
  }
  static KilnError* timer_start(void* self, void* timer, void* stream) {
    return guard(context(), [&] { backend_of<Backend>(self).timer_start(timer, stream); });
  }
  static KilnError* timer_stop(void* self, void* timer, void* stream) {
    return guard(context(), [&] { backend_of<Backend>(self).timer_stop(timer, stream); });
  }
  static KilnError* timer_elapsed_ns(void* self, void* timer, int64_t* ns) {
    return guard(context(), [&] {
      require(ns, "timer_elapsed_ns: ns");
      *ns = backend_of<Backend>(self).timer_elapsed_ns(timer);
    });
  }
  // No error can be returned: the member must not throw (a throw would end the process).
  static void timer_destroy(void* self, void* timer) noexcept {
    backend_of<Backend>(self).timer_destroy(timer);
  }
  static KilnError* module_load(void* self, int32_t device_id, const void* data, size_t size,
                                const char* format, const char* metadata_json, void** module) {
    return guard(context(), [&] {
      require(module, "module_load: module");
      *module = backend_of<Backend>(self).module_load(device_id, data, size, format, metadata_json);
    });
  }
  static KilnError* module_get_kernel(void* self, void* module, const char* name, void** kernel) {
    return guard(context(), [&] {
      require(kernel, "module_get_kernel: kernel");
      *kernel = backend_of<Backend>(self).module_get_kernel(module, name);
    });
  }
  // No error can be returned: the member must not throw.
  static void module_unload(void* self, void* module) noexcept {
    backend_of<Backend>(self).module_unload(module);
  }
  // A member returning KilnError* (e.g. a kernel's own error, already made by the host's
  // factory) has it passed on unchanged; otherwise what it throws becomes the error.
  static KilnError* launch(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                           const uint32_t grid[3], const uint32_t block[3],
                           uint32_t dynamic_shared_bytes, void* stream) {
    KilnError* returned = nullptr;
    KilnError* thrown = guard(context(), [&] {
      using Result = decltype(backend_of<Backend>(self).launch(kernel, args, num_args, grid, block,
                                                               dynamic_shared_bytes, stream));
      if constexpr (std::is_same_v<Result, KilnError*>) {
        returned = backend_of<Backend>(self).launch(kernel, args, num_args, grid, block,
                                                    dynamic_shared_bytes, stream);
      } else {
        backend_of<Backend>(self).launch(kernel, args, num_args, grid, block, dynamic_shared_bytes,
                                         stream);
      }
    });
    return thrown != nullptr ? thrown : returned;
  }
};

}  // namespace detail

// The KilnDeviceBackend table of `backend` (borrowed: it must outlive the table, i.e. live
// until the plugin's shutdown), serving DLPack device type `dl_device_type`. `Backend` may name
// `static constexpr const char* kErrorContext`, the prefix of its error messages (e.g. "cuda";
// default: the plugin's negotiated name; the host adds the slot and plugin, "cuda backend
// (alloc, plugin 'cuda'): cuda: ..."), and has these members, which throw kiln::sdk::Error (or any
// exception) on failure:
//   required: int32_t device_count(const char** why_none)  (why_none may be NULL; set it,
//               pointing at plugin-owned text, when returning 0)
//             void device_attributes(int32_t device_id, const AttributeVisitor& visit)
//             void* alloc(int32_t device_id, size_t nbytes, size_t alignment)
//             void free(int32_t device_id, void* ptr)
//             void copy_to_device / copy_to_host / copy_on_device(...)  (the C arguments
//               after `self`)
//             void synchronize(int32_t device_id, void* stream)
//   optional: void* stream_create(int32_t device_id); void stream_destroy(int32_t, void*)
//             void* timer_create(int32_t device_id); void timer_start(void* timer, void* stream);
//             void timer_stop(void* timer, void* stream); int64_t timer_elapsed_ns(void* timer);
//             void timer_destroy(void* timer) noexcept
//             void* module_load(int32_t device_id, const void* data, size_t size,
//                               const char* format, const char* metadata_json);
//             void* module_get_kernel(void* module, const char* name);
//             void module_unload(void* module) noexcept;
//             void-or-KilnError* launch(void* kernel, const KilnAny* args, int32_t num_args,
//                                       const uint32_t grid[3], const uint32_t block[3],
//                                       uint32_t dynamic_shared_bytes, void* stream)
// Optional members come in groups (streams, timers, device code); a missing member leaves its
// slot NULL.
template <typename Backend>
KilnDeviceBackend make_device_backend(Backend* backend, int32_t dl_device_type) {
  using Slots = detail::DeviceSlots<Backend>;
  KilnDeviceBackend b = make_table<KilnDeviceBackend>();
  b.self = backend;
  b.dl_device_type = dl_device_type;
  b.device_count = &Slots::device_count;
  b.device_attributes = &Slots::device_attributes;
  b.alloc = &Slots::alloc;
  b.free = &Slots::free;
  b.copy_to_device = &Slots::copy_to_device;
  b.copy_to_host = &Slots::copy_to_host;
  b.copy_on_device = &Slots::copy_on_device;
  b.synchronize = &Slots::synchronize;
  if constexpr (requires { &Backend::stream_create; }) b.stream_create = &Slots::stream_create;
  if constexpr (requires { &Backend::stream_destroy; }) b.stream_destroy = &Slots::stream_destroy;
  if constexpr (requires { &Backend::timer_create; }) b.timer_create = &Slots::timer_create;
  if constexpr (requires { &Backend::timer_start; }) b.timer_start = &Slots::timer_start;
  if constexpr (requires { &Backend::timer_stop; }) b.timer_stop = &Slots::timer_stop;
  if constexpr (requires { &Backend::timer_elapsed_ns; }) {
    b.timer_elapsed_ns = &Slots::timer_elapsed_ns;
  }
  if constexpr (requires { &Backend::timer_destroy; }) b.timer_destroy = &Slots::timer_destroy;
  if constexpr (requires { &Backend::module_load; }) b.module_load = &Slots::module_load;
  if constexpr (requires { &Backend::module_get_kernel; }) {
    b.module_get_kernel = &Slots::module_get_kernel;
  }
  if constexpr (requires { &Backend::module_unload; }) b.module_unload = &Slots::module_unload;
  if constexpr (requires { &Backend::launch; }) b.launch = &Slots::launch;
  return b;
}

}  // namespace kiln::sdk

#endif  // KILN_SDK_DEVICE_BACKEND_HPP_
