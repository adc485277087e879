// SPDX-License-Identifier: Apache-2.0
/* One source for every stub plugin the loader tests use. Each variant is this file compiled
 * with different STUB_* definitions (see CMakeLists.txt); each misbehaves in one way.
 *
 *   STUB_PLUGIN_NAME     plugin name (string literal)
 *   STUB_DEVICE_NAME     its device type name (string literal)
 *   STUB_DEVICE_CODE     DLPack device type code of its backend
 *   STUB_NO_ENTRY        export the entry point under a wrong name
 *   STUB_ABI_MAJOR/MINOR the ABI version it answers (default 1.0)
 *   STUB_INIT_FAIL       negotiation returns an error
 *   STUB_SMALL_STRUCT    the device table's struct_size is below the 1.0 layout
 *   STUB_NULL_REQUIRED   the required `alloc` slot is NULL
 *   STUB_NULL_OPTIONAL   every optional slot is NULL (no timer, streams or modules)
 *   STUB_WRONG_NAME      answers a name that differs from the manifest's
 *   STUB_ZERO_TIMER      has timer slots whose every reading is 0 ns
 *   STUB_COLLECTOR       also provide a metric collector of this name (string literal)
 *   STUB_LOADER          also provide a loader for this file format, which refuses every file
 *                        with an error naming the plugin (string literal)
 *   STUB_EXPORTER        also provide an exporter of this name, which refuses likewise
 *   STUB_CRASH_IN_LAUNCH module slots for the format "stub" (a module is any file starting with
 *                        "KILNSTUB"; every kernel name but vector_add is not found) whose launch
 *                        dereferences NULL (SIGSEGV) or, with KILN_TEST_PLUGIN_HANG=1 in the
 *                        environment, sleeps forever: device code that crashes or hangs, for the
 *                        process isolation of kiln-conformance
 *   STUB_FAULTS          a conformant device for kiln-conformance's deeper tests: it checks
 *                        device ids, enforces a max_alloc_bytes attribute of 64 MiB, has
 *                        steady-clock timers, streams and module slots for the format "stub"
 *                        (kernels vector_add(a, b, out, alpha) and spin(out, ns), which busy-waits
 *                        ns nanoseconds and writes ns to out[0]); with STUB_COLLECTOR its
 *                        collector measures host calls (wall time, a percentage, a count). The
 *                        environment variable KILN_TEST_STUB_FAULT plants one fault:
 *                          leak            free succeeds but releases nothing
 *                          free_fails      free returns an error and releases nothing
 *                          zero_timer      every timer reads 0 ns
 *                          timer_in_us     timers read microseconds where nanoseconds are due
 *                          timer_in_ps     timers read picoseconds where nanoseconds are due
 *                          no_limit        alloc ignores max_alloc_bytes
 *                          wrong_results   vector_add drops alpha from element 256 on
 *                          shared_staging  copies to the device pass through one unlocked
 *                                          staging buffer (a race between threads)
 *                          impossible_metrics  the collector reports 150 %, a negative count
 *                                          and a negative duration
 *   STUB_TABLE_SIZE      the device table's struct_size (default sizeof): a shorter table as
 *                        an older minor's plugin answers it; the bytes from there up to
 *                        sizeof(KilnDeviceBackend) + 64 are 0xA5 (non-NULL junk), so a host
 *                        that reads past struct_size instead of zero-extending sees them
 *
 * Written in plain C against the C headers only, as a third-party plugin would be. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln/c/kiln.h"

#ifndef STUB_ABI_MAJOR
#define STUB_ABI_MAJOR KILN_ABI_VERSION_MAJOR
#endif
#ifndef STUB_ABI_MINOR
#define STUB_ABI_MINOR KILN_ABI_VERSION_MINOR
#endif

static const KilnHostServices* g_host;

static KilnError* stub_error(int32_t code, const char* message) {
  return g_host->error_new(g_host->host_ctx, code, message);
}

#ifdef STUB_FAULTS
/* The largest single allocation, reported as the max_alloc_bytes attribute. */
#define STUB_MAX_ALLOC_BYTES ((int64_t)64 << 20)

/* KILN_TEST_STUB_FAULT, read once at negotiation ("" when unset). */
static const char* g_fault = "";

static int fault_is(const char* name) { return strcmp(g_fault, name) == 0; }

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#endif

static KilnError* stub_device_count(void* self, int32_t* count, const char** why_none) {
  (void)self;
  *count = 1;
  *why_none = NULL;
  return NULL;
}

static void stub_visit_attributes(void* self, int32_t id, KilnAttributeVisitor visit, void* ctx) {
  KilnAny v;
  (void)self;
  memset(&v, 0, sizeof(v));
  v.type_code = KILN_TYPE_STRING;
  v.value.v_str = "stub device";
  visit(ctx, "name", &v);
  v.type_code = KILN_TYPE_INT;
  v.value.v_int64 = id;
  visit(ctx, "id", &v);
#ifdef STUB_FAULTS
  v.value.v_int64 = STUB_MAX_ALLOC_BYTES;
  visit(ctx, "max_alloc_bytes", &v);
#endif
}

static KilnError* stub_device_attributes(void* self, int32_t id, KilnAttributeVisitor visit,
                                         void* ctx) {
  if (id != 0) return stub_error(KILN_ERROR_INDEX, "stub: no such device");
  stub_visit_attributes(self, id, visit, ctx);
  return NULL;
}

__attribute__((unused)) static KilnError* stub_alloc(void* self, int32_t id, size_t nbytes,
                                                     size_t alignment, void** out) {
  (void)self;
  (void)id;
#ifdef STUB_FAULTS
  if (id != 0) return stub_error(KILN_ERROR_INDEX, "stub: no such device");
  if ((int64_t)nbytes > STUB_MAX_ALLOC_BYTES && !fault_is("no_limit")) {
    return stub_error(KILN_ERROR_OUT_OF_MEMORY, "stub: allocation over max_alloc_bytes (64 MiB)");
  }
#endif
  if (posix_memalign(out, alignment < sizeof(void*) ? sizeof(void*) : alignment, nbytes) != 0) {
    return stub_error(KILN_ERROR_OUT_OF_MEMORY, "stub: out of memory");
  }
  return NULL;
}

static KilnError* stub_free(void* self, int32_t id, void* ptr) {
  (void)self;
  (void)id;
#ifdef STUB_FAULTS
  if (fault_is("leak")) return NULL;
  if (fault_is("free_fails")) return stub_error(KILN_ERROR_RUNTIME, "stub: free failed");
#endif
  free(ptr);
  return NULL;
}

#ifdef STUB_FAULTS
/* One staging buffer for every copy, without a lock: the shared_staging fault. */
static char g_staging[1 << 14];
#endif

static KilnError* stub_copy_to_device(void* self, int32_t id, const void* src, void* dst,
                                      size_t dst_offset, size_t nbytes, void* stream) {
  (void)self;
  (void)id;
  (void)stream;
#ifdef STUB_FAULTS
  if (fault_is("shared_staging")) {
    size_t at;
    for (at = 0; at < nbytes; at += sizeof(g_staging)) {
      const size_t n = nbytes - at < sizeof(g_staging) ? nbytes - at : sizeof(g_staging);
      memcpy(g_staging, (const char*)src + at, n);
      usleep(50); /* as a DMA engine would take its time: another thread's copy gets in */
      memcpy((char*)dst + dst_offset + at, g_staging, n);
    }
    return NULL;
  }
#endif
  memcpy((char*)dst + dst_offset, src, nbytes);
  return NULL;
}

static KilnError* stub_copy_to_host(void* self, int32_t id, const void* src, size_t src_offset,
                                    void* dst, size_t nbytes, void* stream) {
  (void)self;
  (void)id;
  (void)stream;
  memcpy(dst, (const char*)src + src_offset, nbytes);
  return NULL;
}

static KilnError* stub_copy_on_device(void* self, int32_t id, const void* src, size_t src_offset,
                                      void* dst, size_t dst_offset, size_t nbytes, void* stream) {
  (void)self;
  (void)id;
  (void)stream;
  memmove((char*)dst + dst_offset, (const char*)src + src_offset, nbytes);
  return NULL;
}

static KilnError* stub_synchronize(void* self, int32_t id, void* stream) {
  (void)self;
  (void)id;
  (void)stream;
  return NULL;
}

__attribute__((unused)) static KilnError* stub_stream_create(void* self, int32_t id,
                                                             void** stream) {
  (void)self;
  (void)id;
  *stream = malloc(1);
  return NULL;
}

__attribute__((unused)) static KilnError* stub_stream_destroy(void* self, int32_t id,
                                                              void* stream) {
  (void)self;
  (void)id;
  free(stream);
  return NULL;
}

/* A timer that always reads 0 ns: what a too-coarse device clock looks like to the
 * evaluator (SPEC.md §1.3, limit_zero_time_iterations). */
__attribute__((unused)) static KilnError* stub_timer_create(void* self, int32_t id, void** timer) {
  (void)self;
  (void)id;
  *timer = malloc(1);
  return NULL;
}
__attribute__((unused)) static KilnError* stub_timer_mark(void* self, void* timer, void* stream) {
  (void)self;
  (void)timer;
  (void)stream;
  return NULL;
}
__attribute__((unused)) static KilnError* stub_timer_elapsed(void* self, void* timer, int64_t* ns) {
  (void)self;
  (void)timer;
  *ns = 0;
  return NULL;
}
__attribute__((unused)) static void stub_timer_destroy(void* self, void* timer) {
  (void)self;
  free(timer);
}

#ifdef STUB_FAULTS
/* Timers on the host's monotonic clock (the stub device is the host; launches are
 * synchronous), read wrong on purpose by the zero_timer, timer_in_us and timer_in_ps faults. */
typedef struct StubTimer {
  int64_t start_ns;
  int64_t stop_ns;
} StubTimer;

static KilnError* stub_clock_timer_create(void* self, int32_t id, void** timer) {
  (void)self;
  if (id != 0) return stub_error(KILN_ERROR_INDEX, "stub: no such device");
  *timer = calloc(1, sizeof(StubTimer));
  return *timer == NULL ? stub_error(KILN_ERROR_OUT_OF_MEMORY, "stub: out of memory") : NULL;
}
static KilnError* stub_clock_timer_start(void* self, void* timer, void* stream) {
  (void)self, (void)stream;
  ((StubTimer*)timer)->start_ns = now_ns();
  return NULL;
}
static KilnError* stub_clock_timer_stop(void* self, void* timer, void* stream) {
  (void)self, (void)stream;
  ((StubTimer*)timer)->stop_ns = now_ns();
  return NULL;
}
static KilnError* stub_clock_timer_elapsed(void* self, void* timer, int64_t* ns) {
  const StubTimer* t = (const StubTimer*)timer;
  (void)self;
  *ns = t->stop_ns - t->start_ns;
  if (fault_is("zero_timer")) *ns = 0;
  if (fault_is("timer_in_us")) *ns /= 1000;
  if (fault_is("timer_in_ps")) *ns *= 1000;
  return NULL;
}
#endif

#if defined(STUB_CRASH_IN_LAUNCH) || defined(STUB_FAULTS)
static const char kStubModuleMagic[] = "KILNSTUB";
static int g_stub_module; /* every module is this one */
static int g_kernel_vector_add;
#ifdef STUB_FAULTS
static int g_kernel_spin;
#endif

static KilnError* stub_module_load(void* self, int32_t id, const void* data, size_t size,
                                   const char* format, const char* metadata_json, void** module) {
  (void)self, (void)id, (void)metadata_json;
  if (strcmp(format, "stub") != 0) return stub_error(KILN_ERROR_VALUE, "stub: unknown format");
  if (size < sizeof(kStubModuleMagic) - 1 ||
      memcmp(data, kStubModuleMagic, sizeof(kStubModuleMagic) - 1) != 0) {
    return stub_error(KILN_ERROR_VALUE, "stub: not a stub module (no KILNSTUB magic)");
  }
  *module = &g_stub_module;
  return NULL;
}

static KilnError* stub_module_get_kernel(void* self, void* module, const char* name,
                                         void** kernel) {
  (void)self, (void)module;
  if (strcmp(name, "vector_add") == 0) {
    *kernel = &g_kernel_vector_add;
    return NULL;
  }
#ifdef STUB_FAULTS
  if (strcmp(name, "spin") == 0) {
    *kernel = &g_kernel_spin;
    return NULL;
  }
#endif
  return stub_error(KILN_ERROR_NOT_FOUND, "stub: no kernel");
}

static void stub_module_unload(void* self, void* module) { (void)self, (void)module; }
#endif

#ifdef STUB_FAULTS
/* `args[i]` as a compact 1-D tensor of `bits`-bit elements of this device, or NULL. */
static DLTensor* tensor_arg(const KilnAny* args, int32_t i, int bits) {
  DLTensor* t = args[i].type_code == KILN_TYPE_TENSOR ? args[i].value.v_tensor : NULL;
  if (t == NULL || t->ndim != 1 || t->dtype.bits != bits ||
      t->device.device_type != STUB_DEVICE_CODE)
    return NULL;
  return t;
}

/* out[i] = a[i] + alpha * b[i]; wrong_results drops alpha from element 256 on. */
static KilnError* stub_vector_add(const KilnAny* args, int32_t num_args) {
  const DLTensor *a, *b, *out;
  const float *pa, *pb;
  float* po;
  float alpha;
  int64_t i, n;
  if (num_args != 4) return stub_error(KILN_ERROR_TYPE, "stub vector_add: expects 4 arguments");
  a = tensor_arg(args, 0, 32);
  b = tensor_arg(args, 1, 32);
  out = tensor_arg(args, 2, 32);
  if (a == NULL || b == NULL || out == NULL ||
      (args[3].type_code != KILN_TYPE_FLOAT && args[3].type_code != KILN_TYPE_INT)) {
    return stub_error(KILN_ERROR_TYPE,
                      "stub vector_add: expects (tensor, tensor, tensor, float) on this device");
  }
  n = out->shape[0];
  if (a->shape[0] != n || b->shape[0] != n) {
    return stub_error(KILN_ERROR_VALUE, "stub vector_add: lengths differ");
  }
  alpha = args[3].type_code == KILN_TYPE_FLOAT ? (float)args[3].value.v_float64
                                               : (float)args[3].value.v_int64;
  pa = (const float*)((const char*)a->data + a->byte_offset);
  pb = (const float*)((const char*)b->data + b->byte_offset);
  po = (float*)((char*)out->data + out->byte_offset);
  for (i = 0; i < n; ++i) {
    po[i] = pa[i] + (i >= 256 && fault_is("wrong_results") ? 1.0f : alpha) * pb[i];
  }
  return NULL;
}

/* Busy-waits `ns` nanoseconds, then writes `ns` to out[0]: a kernel of known duration. */
static KilnError* stub_spin(const KilnAny* args, int32_t num_args) {
  DLTensor* out;
  int64_t ns, until;
  if (num_args != 2) return stub_error(KILN_ERROR_TYPE, "stub spin: expects 2 arguments");
  out = tensor_arg(args, 0, 64);
  if (out == NULL || args[1].type_code != KILN_TYPE_INT) {
    return stub_error(KILN_ERROR_TYPE, "stub spin: expects (tensor int64, int)");
  }
  ns = args[1].value.v_int64;
  until = now_ns() + ns;
  while (now_ns() < until) sched_yield();
  *(int64_t*)((char*)out->data + out->byte_offset) = ns;
  return NULL;
}

static KilnError* stub_launch(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                              const uint32_t grid[3], const uint32_t block[3],
                              uint32_t dynamic_shared_bytes, void* stream) {
  (void)self, (void)grid, (void)block, (void)dynamic_shared_bytes, (void)stream;
  if (kernel == &g_kernel_spin) return stub_spin(args, num_args);
  return stub_vector_add(args, num_args);
}
#endif

#ifdef STUB_CRASH_IN_LAUNCH
static KilnError* stub_launch(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                              const uint32_t grid[3], const uint32_t block[3],
                              uint32_t dynamic_shared_bytes, void* stream) {
  /* Both volatile: the compiler may neither prove the pointer NULL (and emit a trap, SIGILL)
   * nor drop the store as dead. */
  volatile int* volatile nowhere = NULL;
  const char* hang = getenv("KILN_TEST_PLUGIN_HANG");
  (void)self, (void)kernel, (void)args, (void)num_args, (void)grid, (void)block;
  (void)dynamic_shared_bytes, (void)stream;
  if (hang != NULL && strcmp(hang, "1") == 0) {
    for (;;) pause();
  }
  *nowhere = 42;
  return NULL;
}
#endif

/* The device table, with room after it for the junk of STUB_TABLE_SIZE. */
static union {
  KilnDeviceBackend table;
  unsigned char bytes[sizeof(KilnDeviceBackend) + 64];
} g_backend_storage;
#define g_backend g_backend_storage.table
static KilnComponent g_components[4];
#define g_component g_components[0]

#if defined(STUB_COLLECTOR) && defined(STUB_FAULTS)
/* A collector of host calls: wall time, a busy percentage and a call count, each impossible for
 * its kind under the impossible_metrics fault. Declines every device but the host. */
static KilnError* stub_collector_init(void* self, const DLDevice* devices, int32_t num_devices,
                                      void** state) {
  (void)self, (void)devices, (void)num_devices;
  *state = NULL;
  return NULL;
}
static KilnError* stub_collector_start(void* self, void* state, DLDevice device, void** handle) {
  int64_t* start;
  (void)self, (void)state;
  *handle = NULL;
  if (device.device_type != kDLCPU) return NULL;
  start = (int64_t*)malloc(sizeof(int64_t));
  if (start == NULL) return stub_error(KILN_ERROR_OUT_OF_MEMORY, "stub: out of memory");
  *start = now_ns();
  *handle = start;
  return NULL;
}
static KilnError* stub_collector_stop(void* self, void* state, void* handle, KilnMetricSink sink,
                                      void* sink_ctx) {
  const int impossible = fault_is("impossible_metrics");
  KilnMetric m;
  (void)self, (void)state;
  memset(&m, 0, sizeof(m));
  m.struct_size = sizeof(m);
  m.name = "stub.wall";
  m.kind = KILN_METRIC_DURATION;
  m.value = (double)(now_ns() - *(int64_t*)handle) / 1000.0 * (impossible ? -1 : 1);
  sink(sink_ctx, &m);
  m.name = "stub.busy";
  m.kind = KILN_METRIC_PERCENT;
  m.value = impossible ? 150.0 : 50.0;
  sink(sink_ctx, &m);
  m.name = "stub.calls";
  m.kind = KILN_METRIC_COUNT;
  m.count = impossible ? -1 : 1;
  sink(sink_ctx, &m);
  free(handle);
  return NULL;
}
static void stub_collector_teardown(void* self, void* state) { (void)self, (void)state; }
static KilnMetricCollector g_collector;
#elif defined(STUB_COLLECTOR)
/* A collector that reports nothing: enough to claim its name. */
static KilnError* stub_collector_init(void* self, const DLDevice* devices, int32_t num_devices,
                                      void** state) {
  (void)self, (void)devices, (void)num_devices;
  *state = NULL;
  return NULL;
}
static KilnError* stub_collector_start(void* self, void* state, DLDevice device, void** handle) {
  (void)self, (void)state, (void)device;
  *handle = NULL;
  return NULL;
}
static KilnError* stub_collector_stop(void* self, void* state, void* handle, KilnMetricSink sink,
                                      void* sink_ctx) {
  (void)self, (void)state, (void)handle, (void)sink, (void)sink_ctx;
  return NULL;
}
static void stub_collector_teardown(void* self, void* state) { (void)self, (void)state; }
static KilnMetricCollector g_collector;
#endif
#ifdef STUB_LOADER
static KilnError* stub_load_file(void* self, const char* path, KilnLoadedModule* out) {
  (void)self, (void)path, (void)out;
  return stub_error(KILN_ERROR_VALUE, "the loader of " STUB_PLUGIN_NAME " loads nothing");
}
static KilnLoader g_loader;
#endif
#ifdef STUB_EXPORTER
static KilnError* stub_export_module(void* self, const KilnExportRequest* request,
                                     const char* path) {
  (void)self, (void)request, (void)path;
  return stub_error(KILN_ERROR_VALUE, "the exporter of " STUB_PLUGIN_NAME " writes nothing");
}
static KilnExporter g_exporter;
#endif
static int g_shutdown_calls;

static void stub_shutdown(void* state) {
  (void)state;
  ++g_shutdown_calls;
}

/* Lets tests observe that shutdown ran (exported only for tests). */
KILN_EXPORT int stub_shutdown_calls(void) { return g_shutdown_calls; }

#ifdef STUB_NO_ENTRY
#define STUB_ENTRY_NAME kiln_plugin_negotiate_misspelled
#else
#define STUB_ENTRY_NAME kiln_plugin_negotiate
#endif

KILN_EXPORT KilnError* STUB_ENTRY_NAME(const KilnNegotiateIn* in, KilnPluginInfo* out) {
  g_host = in->host;
#ifdef STUB_FAULTS
  g_fault = getenv("KILN_TEST_STUB_FAULT") != NULL ? getenv("KILN_TEST_STUB_FAULT") : "";
#endif
#ifdef STUB_INIT_FAIL
  return stub_error(KILN_ERROR_UNAVAILABLE, "stub: init failed: device firmware missing");
#endif
  memset(&g_backend_storage, 0, sizeof(g_backend_storage));
  g_backend.struct_size = sizeof(g_backend);
#ifdef STUB_SMALL_STRUCT
  g_backend.struct_size = 24;
#endif
  g_backend.dl_device_type = STUB_DEVICE_CODE;
  g_backend.device_count = stub_device_count;
  g_backend.device_attributes = stub_device_attributes;
#ifndef STUB_NULL_REQUIRED
  g_backend.alloc = stub_alloc;
#endif
  g_backend.free = stub_free;
  g_backend.copy_to_device = stub_copy_to_device;
  g_backend.copy_to_host = stub_copy_to_host;
  g_backend.copy_on_device = stub_copy_on_device;
  g_backend.synchronize = stub_synchronize;
#ifdef STUB_ZERO_TIMER
  g_backend.timer_create = stub_timer_create;
  g_backend.timer_start = stub_timer_mark;
  g_backend.timer_stop = stub_timer_mark;
  g_backend.timer_elapsed_ns = stub_timer_elapsed;
  g_backend.timer_destroy = stub_timer_destroy;
#endif
#ifdef STUB_FAULTS
  g_backend.timer_create = stub_clock_timer_create;
  g_backend.timer_start = stub_clock_timer_start;
  g_backend.timer_stop = stub_clock_timer_stop;
  g_backend.timer_elapsed_ns = stub_clock_timer_elapsed;
  g_backend.timer_destroy = stub_timer_destroy;
#endif
#ifndef STUB_NULL_OPTIONAL
  g_backend.stream_create = stub_stream_create;
  g_backend.stream_destroy = stub_stream_destroy;
#endif
#if defined(STUB_CRASH_IN_LAUNCH) || defined(STUB_FAULTS)
  g_backend.module_load = stub_module_load;
  g_backend.module_get_kernel = stub_module_get_kernel;
  g_backend.module_unload = stub_module_unload;
  g_backend.launch = stub_launch;
#endif

#ifdef STUB_TABLE_SIZE
  /* Junk from the answered size on: the slots past it do not exist in this plugin. */
  g_backend.struct_size = STUB_TABLE_SIZE;
  memset(g_backend_storage.bytes + STUB_TABLE_SIZE, 0xA5,
         sizeof(g_backend_storage.bytes) - STUB_TABLE_SIZE);
#endif

  memset(g_components, 0, sizeof(g_components));
  g_component.struct_size = sizeof(g_component);
  g_component.kind = KILN_COMPONENT_DEVICE;
  g_component.name = STUB_DEVICE_NAME;
  g_component.table = &g_backend;

  out->abi_major = STUB_ABI_MAJOR;
  out->abi_minor = STUB_ABI_MINOR;
#ifdef STUB_WRONG_NAME
  out->name = "not_" STUB_PLUGIN_NAME;
#else
  out->name = STUB_PLUGIN_NAME;
#endif
  out->version = "0.0.1";
  out->num_components = 1;
#ifdef STUB_COLLECTOR
  g_collector.struct_size = sizeof(g_collector);
  g_collector.init = stub_collector_init;
  g_collector.start = stub_collector_start;
  g_collector.stop = stub_collector_stop;
  g_collector.teardown = stub_collector_teardown;
  g_components[1].struct_size = sizeof(g_components[1]);
  g_components[1].kind = KILN_COMPONENT_COLLECTOR;
  g_components[1].name = STUB_COLLECTOR;
  g_components[1].table = &g_collector;
  out->num_components = 2;
#endif
#ifdef STUB_LOADER
  memset(&g_loader, 0, sizeof(g_loader));
  g_loader.struct_size = sizeof(g_loader);
  g_loader.load_file = stub_load_file;
  g_components[out->num_components].struct_size = sizeof(KilnComponent);
  g_components[out->num_components].kind = KILN_COMPONENT_LOADER;
  g_components[out->num_components].name = STUB_LOADER;
  g_components[out->num_components].table = &g_loader;
  ++out->num_components;
#endif
#ifdef STUB_EXPORTER
  memset(&g_exporter, 0, sizeof(g_exporter));
  g_exporter.struct_size = sizeof(g_exporter);
  g_exporter.output_format = "stub";
  g_exporter.export_module = stub_export_module;
  g_components[out->num_components].struct_size = sizeof(KilnComponent);
  g_components[out->num_components].kind = KILN_COMPONENT_EXPORTER;
  g_components[out->num_components].name = STUB_EXPORTER;
  g_components[out->num_components].table = &g_exporter;
  ++out->num_components;
#endif
  out->components = g_components;
  out->plugin_state = NULL;
  out->shutdown = stub_shutdown;
  return NULL;
}
