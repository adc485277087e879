// SPDX-License-Identifier: Apache-2.0
/* A fake plugin "built against ABI 1.1": what a vendor's plugin compiled with a future SDK looks
 * like to this host. ABI 1.1 does not exist; the 1.1 layouts below are invented for the test,
 * following docs/plugin-abi.md §15.1 (a minor only appends): every table and array element
 * carries one appended field, the host offer has one more field, there is a metric kind 6, and
 * the plugin looks for a vendor extension in the offer's `next` chain.
 *
 * Build-time parameters:
 *   FAKE_NAME        the plugin's name (string), also its device type name
 *   FAKE_MIN_MINOR   the oldest host minor it serves: 0 (it also serves 1.0 hosts) or 1
 *
 * The library also exports kiln_kernel_library, with a 1.1-sized KilnKernelLibrary whose
 * abi_minor is FAKE_MIN_MINOR, so the cpu plugin's loader can be tried on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_1_1.h"

#ifndef FAKE_NAME
#error "FAKE_NAME must be defined"
#endif
#ifndef FAKE_MIN_MINOR
#error "FAKE_MIN_MINOR must be defined"
#endif

static const KilnHostServices* g_host;
static int g_negotiated_minor = -1;
static char g_host_label[64];
static int g_extension_seen;
static int g_reset_calls;

static KilnError* fake_error(int32_t code, const char* message) {
  return g_host->error_new(g_host->host_ctx, code, message);
}

static KilnError* fake_device_count(void* self, int32_t* count, const char** why_none) {
  (void)self, (void)why_none;
  *count = 1;
  return NULL;
}

/* Reports what negotiation saw, so that a test can read it through any host. */
static KilnError* fake_device_attributes(void* self, int32_t device_id, KilnAttributeVisitor visit,
                                         void* ctx) {
  KilnAny v;
  (void)self, (void)device_id;
  memset(&v, 0, sizeof(v));
  v.type_code = KILN_TYPE_INT;
  v.value.v_int64 = g_negotiated_minor;
  visit(ctx, "negotiated_minor", &v);
  v.value.v_int64 = g_extension_seen;
  visit(ctx, "extension_seen", &v);
  v.value.v_int64 = g_reset_calls;
  visit(ctx, "reset_calls", &v);
  v.type_code = KILN_TYPE_STRING;
  v.value.v_str = g_host_label;
  visit(ctx, "host_label", &v);
  return NULL;
}

static KilnError* fake_alloc(void* self, int32_t device_id, size_t nbytes, size_t alignment,
                             void** out) {
  (void)self, (void)device_id;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (posix_memalign(out, alignment, nbytes) != 0) {
    return fake_error(KILN_ERROR_OUT_OF_MEMORY, FAKE_NAME ": out of memory");
  }
  return NULL;
}
static KilnError* fake_free(void* self, int32_t device_id, void* ptr) {
  (void)self, (void)device_id;
  free(ptr);
  return NULL;
}
static KilnError* fake_copy_to_device(void* self, int32_t device_id, const void* src, void* dst,
                                      size_t dst_offset, size_t nbytes, void* stream) {
  (void)self, (void)device_id, (void)stream;
  memcpy((char*)dst + dst_offset, src, nbytes);
  return NULL;
}
static KilnError* fake_copy_to_host(void* self, int32_t device_id, const void* src,
                                    size_t src_offset, void* dst, size_t nbytes, void* stream) {
  (void)self, (void)device_id, (void)stream;
  memcpy(dst, (const char*)src + src_offset, nbytes);
  return NULL;
}
static KilnError* fake_copy_on_device(void* self, int32_t device_id, const void* src,
                                      size_t src_offset, void* dst, size_t dst_offset,
                                      size_t nbytes, void* stream) {
  (void)self, (void)device_id, (void)stream;
  memmove((char*)dst + dst_offset, (const char*)src + src_offset, nbytes);
  return NULL;
}
static KilnError* fake_synchronize(void* self, int32_t device_id, void* stream) {
  (void)self, (void)device_id, (void)stream;
  return NULL;
}
/* The slot ABI 1.1 appends to KilnDeviceBackend. */
static KilnError* fake_device_reset(void* self, int32_t device_id) {
  (void)self, (void)device_id;
  ++g_reset_calls;
  return NULL;
}

/* A collector reporting one 1.1-sized COUNT metric and one metric of the 1.1 kind 6. */
static KilnError* fake_collector_init(void* self, const DLDevice* devices, int32_t num_devices,
                                      void** state) {
  (void)self, (void)devices, (void)num_devices;
  *state = NULL;
  return NULL;
}
static KilnError* fake_collector_start(void* self, void* state, DLDevice device, void** handle) {
  (void)self, (void)state, (void)device;
  *handle = &g_reset_calls; /* any non-NULL handle: this collector handles every device */
  return NULL;
}
static KilnError* fake_collector_stop(void* self, void* state, void* handle, KilnMetricSink sink,
                                      void* sink_ctx) {
  KilnMetric_1_1 m;
  (void)self, (void)state, (void)handle;
  memset(&m, 0, sizeof(m));
  m.base.struct_size = sizeof(m);
  m.base.name = "fake::calls";
  m.base.kind = KILN_METRIC_COUNT;
  m.base.count = 7;
  m.unit = "calls";
  sink(sink_ctx, &m.base);
  m.base.name = "fake::histogram";
  m.base.kind = FAKE_METRIC_HISTOGRAM_1_1;
  m.base.str = "not a string metric";
  sink(sink_ctx, &m.base);
  return NULL;
}
static void fake_collector_teardown(void* self, void* state) { (void)self, (void)state; }

static KilnDeviceBackend_1_1 g_backend;
static KilnMetricCollector_1_1 g_collector;
static KilnComponent_1_1 g_components[2];

static KilnError* fake_refuse(const KilnNegotiateIn* in) {
  char message[256];
  snprintf(message, sizeof(message),
           "plugin '%s' needs Kiln ABI 1.%d but the host offers only %u.%u: upgrade Kiln",
           FAKE_NAME, FAKE_MIN_MINOR, in->abi_major, in->abi_minor);
  return fake_error(KILN_ERROR_ABI, message);
}

KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in, KilnPluginInfo* out) {
  const KilnExtension* ext;
  /* Versions first, with only the 1.0 fields, so that any host gets a reason. */
  if (in == NULL || in->struct_size < KILN_NEGOTIATE_IN_SIZE_1_0 || in->host == NULL ||
      in->host->struct_size < KILN_HOST_SERVICES_SIZE_1_0) {
    return NULL;
  }
  g_host = in->host;
  if (in->abi_major != 1 || (int)in->abi_minor - FAKE_MIN_MINOR < 0) return fake_refuse(in);
  if (out->struct_size < KILN_PLUGIN_INFO_SIZE_1_0) {
    return fake_error(KILN_ERROR_ABI, "KilnPluginInfo is smaller than its 1.0 layout");
  }
  g_negotiated_minor = in->abi_minor < 1 ? in->abi_minor : 1;
  g_host_label[0] = '\0';
  /* The 1.1 field of the offer exists only where the host's struct_size covers it. */
  if (g_negotiated_minor >= 1 && in->struct_size >= sizeof(KilnNegotiateIn_1_1)) {
    const KilnNegotiateIn_1_1* in11 = (const KilnNegotiateIn_1_1*)in;
    if (in11->host_label != NULL) {
      snprintf(g_host_label, sizeof(g_host_label), "%s", in11->host_label);
    }
  }
  ext = kiln_find_extension(in->next, FAKE_EXTENSION_TYPE);
  g_extension_seen = ext != NULL && ext->struct_size >= sizeof(FakeVendorExtension) &&
                     ((const FakeVendorExtension*)ext)->magic == FAKE_EXTENSION_MAGIC;

  memset(&g_backend, 0, sizeof(g_backend));
  g_backend.base.struct_size = sizeof(g_backend);
  g_backend.base.dl_device_type = FAKE_DEVICE_CODE;
  g_backend.base.device_count = fake_device_count;
  g_backend.base.device_attributes = fake_device_attributes;
  g_backend.base.alloc = fake_alloc;
  g_backend.base.free = fake_free;
  g_backend.base.copy_to_device = fake_copy_to_device;
  g_backend.base.copy_to_host = fake_copy_to_host;
  g_backend.base.copy_on_device = fake_copy_on_device;
  g_backend.base.synchronize = fake_synchronize;
  g_backend.device_reset = fake_device_reset;

  memset(&g_collector, 0, sizeof(g_collector));
  g_collector.base.struct_size = sizeof(g_collector);
  g_collector.base.init = fake_collector_init;
  g_collector.base.start = fake_collector_start;
  g_collector.base.stop = fake_collector_stop;
  g_collector.base.teardown = fake_collector_teardown;

  memset(g_components, 0, sizeof(g_components));
  g_components[0].base.struct_size = sizeof(KilnComponent_1_1);
  g_components[0].base.kind = KILN_COMPONENT_DEVICE;
  g_components[0].base.name = FAKE_NAME;
  g_components[0].base.table = &g_backend;
  g_components[0].flags = 1;
  g_components[1].base.struct_size = sizeof(KilnComponent_1_1);
  g_components[1].base.kind = KILN_COMPONENT_COLLECTOR;
  g_components[1].base.name = FAKE_NAME;
  g_components[1].base.table = &g_collector;
  g_components[1].flags = 1;

  out->abi_major = 1;
  out->abi_minor = (uint16_t)g_negotiated_minor;
  out->name = FAKE_NAME;
  out->version = "1.1.0";
  out->num_components = 2;
  out->components = &g_components[0].base;
  out->plugin_state = NULL;
  out->shutdown = NULL;
  return NULL;
}

/* A kernel library "built against 1.1": one function returning 42, a longer table. */
static KilnError* fake_answer(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret) {
  (void)self, (void)args, (void)num_args;
  ret->type_code = KILN_TYPE_INT;
  ret->value.v_int64 = 42;
  return NULL;
}
static const KilnKernelFunction g_functions[] = {{"answer", fake_answer, NULL, "() -> int64"}};
static KilnKernelLibrary_1_1 g_library;

KILN_EXPORT const KilnKernelLibrary* kiln_kernel_library(const KilnKernelEnv* env) {
  (void)env;
  memset(&g_library, 0, sizeof(g_library));
  g_library.base.struct_size = sizeof(g_library);
  g_library.base.abi_major = 1;
  g_library.base.abi_minor = FAKE_MIN_MINOR;
  g_library.base.name = FAKE_NAME;
  g_library.base.entry_name = "answer";
  g_library.base.num_functions = 1;
  g_library.base.functions = g_functions;
  g_library.min_host_threads = 1;
  return &g_library.base;
}
