// A minimal out-of-tree device plugin: host memory behind a vendor device type "oot".
#include <cstdlib>
#include <cstring>

#include "kiln/sdk/plugin.hpp"

namespace {

KilnError* device_count(void*, int32_t* count, const char** why_none) {
  *count = 1;
  *why_none = nullptr;
  return nullptr;
}
KilnError* attributes(void*, int32_t, KilnAttributeVisitor visit, void* ctx) {
  KilnAny v{};
  v.type_code = KILN_TYPE_STRING;
  v.value.v_str = "out-of-tree device";
  visit(ctx, "name", &v);
  return nullptr;
}
KilnError* alloc(void*, int32_t, size_t n, size_t align, void** out) {
  *out = std::aligned_alloc(align, (n + align - 1) / align * align);
  return *out ? nullptr : kiln::sdk::make_error(KILN_ERROR_OUT_OF_MEMORY, "oot: out of memory");
}
KilnError* release(void*, int32_t, void* p) {
  std::free(p);
  return nullptr;
}
KilnError* to_device(void*, int32_t, const void* s, void* d, size_t off, size_t n, void*) {
  std::memcpy(static_cast<char*>(d) + off, s, n);
  return nullptr;
}
KilnError* to_host(void*, int32_t, const void* s, size_t off, void* d, size_t n, void*) {
  std::memcpy(d, static_cast<const char*>(s) + off, n);
  return nullptr;
}
KilnError* on_device(void*, int32_t, const void* s, size_t so, void* d, size_t dof, size_t n,
                     void*) {
  std::memmove(static_cast<char*>(d) + dof, static_cast<const char*>(s) + so, n);
  return nullptr;
}
KilnError* sync(void*, int32_t, void*) { return nullptr; }

}  // namespace

extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  static KilnDeviceBackend backend = [] {
    auto b = kiln::sdk::make_table<KilnDeviceBackend>();
    b.dl_device_type = 120;
    b.device_count = device_count;
    b.device_attributes = attributes;
    b.alloc = alloc;
    b.free = release;
    b.copy_to_device = to_device;
    b.copy_to_host = to_host;
    b.copy_on_device = on_device;
    b.synchronize = sync;
    return b;
  }();
  static const KilnComponent components[] = {
      kiln::sdk::component(KILN_COMPONENT_DEVICE, "oot", &backend)};
  return kiln::sdk::negotiate(in, out, {"oot", "2.3.4", components});
}
