// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: what an SDK-built kernel library exports.
 *
 * A kernel library is a shared library with one exported function, KILN_KERNEL_LIBRARY_SYMBOL,
 * of type KilnKernelLibraryFn. The loader calls it once after dlopen with the environment the
 * kernels may use (errors, logging, a parallel-for) and receives the library's table. */
#ifndef KILN_C_KERNEL_H_
#define KILN_C_KERNEL_H_

#include "kiln/c/abi.h"
#include "kiln/c/module.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_KERNEL_LIBRARY_SYMBOL "kiln_kernel_library"

/* Body of a parallel loop over [begin, end). */
typedef KilnError* (*KilnParallelBody)(void* closure, int64_t begin, int64_t end);

/* Services for kernels. Owned by the loader; lives until the library is unloaded. */
typedef struct KilnKernelEnv {
  size_t struct_size;
  void* ctx;
  /* As KilnHostServices::error_new. */
  KilnError* (*error_new)(void* ctx, int32_t code, const char* message);
  /* Frees an error a kernel received (e.g. from parallel_for) and does not return. */
  void (*error_free)(void* ctx, KilnError* error);
  void (*log)(void* ctx, int32_t level, const char* message);
  /* Runs `body` over [begin, end) in chunks of at least `grain` elements, possibly in
   * parallel, and returns the first error a chunk returned. NULL slot: run serially. */
  KilnError* (*parallel_for)(void* ctx, int64_t begin, int64_t end, int64_t grain,
                             KilnParallelBody body, void* closure);
  int32_t num_threads; /* the parallelism parallel_for offers */
} KilnKernelEnv;

/* One exported function. Borrowed from the library. */
typedef struct KilnKernelFunction {
  const char* name;
  KilnPackedFn fn;
  void* self;            /* passed back as `self`; usually NULL */
  const char* signature; /* human-readable, e.g. "(tensor, tensor, tensor, float64) -> none" */
} KilnKernelFunction;

/* The library's table. Static storage inside the library. */
typedef struct KilnKernelLibrary {
  size_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  uint32_t reserved;
  const char* name;
  const char* entry_name; /* NULL when the library has no default function */
  int32_t num_functions;
  const KilnKernelFunction* functions;
  int32_t num_blobs;
  const KilnDeviceBlob* blobs;
} KilnKernelLibrary;

/* The 1.0 layouts' sizes: the oldest a 1.x reader accepts (docs/plugin-abi.md §6.2).
 * KilnKernelFunction has no struct_size: its 32-byte layout is frozen for major version 1. */
#define KILN_KERNEL_ENV_SIZE_1_0 KILN_SIZE_THROUGH(KilnKernelEnv, num_threads)
#define KILN_KERNEL_LIBRARY_SIZE_1_0 KILN_SIZE_THROUGH(KilnKernelLibrary, blobs)

/* `env` (borrowed, outlives the library) may be kept by the library for its kernels. */
typedef const KilnKernelLibrary* (*KilnKernelLibraryFn)(const KilnKernelEnv* env);

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_KERNEL_H_ */
