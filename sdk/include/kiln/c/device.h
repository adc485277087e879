// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: the device backend component (KILN_COMPONENT_DEVICE). */
#ifndef KILN_C_DEVICE_H_
#define KILN_C_DEVICE_H_

#include "kiln/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Receives one device attribute. `key` and `value` are borrowed for the call. */
typedef void (*KilnAttributeVisitor)(void* ctx, const char* key, const KilnAny* value);

/* A device backend. The component's name is the device type name ("cpu", "cuda", ...).
 * Owned by the plugin; valid until shutdown. Slots marked optional may be NULL; the host's
 * fallback is named beside each. Device ids run from 0 to device_count - 1. A `stream` of
 * NULL is the device's default stream. */
typedef struct KilnDeviceBackend {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  void* self;                /* passed as the first argument of every slot */
  /* The DLPack device type of tensors on this backend (kDLCPU, kDLCUDA, ...). A vendor type
   * with no DLPack code uses a value >= 64 and must be unique among loaded plugins. */
  int32_t dl_device_type;
  int32_t reserved;

  /* ---- 1.0: enumeration (required) ---- */
  /* Number of usable devices. When it is 0, `*why_none` (may be left NULL) explains why, e.g.
   * "libcuda.so.1 not found"; the string is owned by the plugin and lives until shutdown. */
  KilnError* (*device_count)(void* self, int32_t* count, const char** why_none);
  /* Calls `visit` once per attribute of device `device_id` (name, memory, cores, ...). */
  KilnError* (*device_attributes)(void* self, int32_t device_id, KilnAttributeVisitor visit,
                                  void* ctx);

  /* ---- 1.0: memory (required) ---- */
  /* Allocates `nbytes` (> 0) aligned to `alignment` (a power of two). The memory belongs to
   * the plugin until `free`. */
  KilnError* (*alloc)(void* self, int32_t device_id, size_t nbytes, size_t alignment, void** out);
  KilnError* (*free)(void* self, int32_t device_id, void* ptr);
  /* Copies `nbytes` bytes. Offsets are in bytes. `host` pointers are ordinary host memory
   * owned by the caller; device pointers come from `alloc`. The copy is ordered on `stream`;
   * a host destination is ready once the stream is synchronized. */
  KilnError* (*copy_to_device)(void* self, int32_t device_id, const void* host_src, void* dst,
                               size_t dst_offset, size_t nbytes, void* stream);
  KilnError* (*copy_to_host)(void* self, int32_t device_id, const void* src, size_t src_offset,
                             void* host_dst, size_t nbytes, void* stream);
  KilnError* (*copy_on_device)(void* self, int32_t device_id, const void* src, size_t src_offset,
                               void* dst, size_t dst_offset, size_t nbytes, void* stream);

  /* ---- 1.0: streams ---- */
  /* Waits until all work on `stream` is done (required). */
  KilnError* (*synchronize)(void* self, int32_t device_id, void* stream);
  /* Optional; without them every call uses the default stream. */
  KilnError* (*stream_create)(void* self, int32_t device_id, void** stream);
  KilnError* (*stream_destroy)(void* self, int32_t device_id, void* stream);

  /* ---- 1.0: timers (optional; without them the host synchronizes and reads its own
   * steady clock, and warns once) ---- */
  KilnError* (*timer_create)(void* self, int32_t device_id, void** timer);
  /* Start and stop are cheap and never block: they only record a point on `stream`. */
  KilnError* (*timer_start)(void* self, void* timer, void* stream);
  KilnError* (*timer_stop)(void* self, void* timer, void* stream);
  /* Nanoseconds between start and stop; may block until stop is reached. */
  KilnError* (*timer_elapsed_ns)(void* self, void* timer, int64_t* ns);
  void (*timer_destroy)(void* self, void* timer);

  /* ---- 1.0: device code (optional; without them the backend runs no kernels) ---- */
  /* Loads device code (`format`: "so", "ptx", "cubin", "opencl_c", "hsaco", ...) from
   * `size` bytes at `data` (borrowed) with per-kernel metadata `metadata_json` (borrowed; see
   * docs/plugin-abi.md). `*module` is owned by the plugin until module_unload. */
  KilnError* (*module_load)(void* self, int32_t device_id, const void* data, size_t size,
                            const char* format, const char* metadata_json, void** module);
  /* Finds kernel `name`. `*kernel` lives until its module is unloaded. */
  KilnError* (*module_get_kernel)(void* self, void* module, const char* name, void** kernel);
  void (*module_unload)(void* self, void* module);
  /* Launches `kernel` with its arguments (tensors as DLTensor*, scalars as INT/FLOAT) and
   * the extents `grid[3]`, `block[3]` plus `dynamic_shared_bytes`. Asynchronous on `stream`. */
  KilnError* (*launch)(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                       const uint32_t grid[3], const uint32_t block[3],
                       uint32_t dynamic_shared_bytes, void* stream);
} KilnDeviceBackend;

/* The size of the 1.0 layout: the oldest a 1.x host accepts. */
#define KILN_DEVICE_BACKEND_SIZE_1_0 KILN_SIZE_THROUGH(KilnDeviceBackend, launch)

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_DEVICE_H_ */
