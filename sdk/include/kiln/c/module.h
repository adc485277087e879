// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: module loaders (KILN_COMPONENT_LOADER) and exporters
 * (KILN_COMPONENT_EXPORTER), and the description of an SDK-built kernel library. */
#ifndef KILN_C_MODULE_H_
#define KILN_C_MODULE_H_

#include "kiln/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One blob of device code carried by a module. All pointers borrowed from the module. Arrays of
 * blobs are read with the first element's struct_size as the stride (kiln_array_element). */
typedef struct KilnDeviceBlob {
  size_t struct_size;
  const char* format; /* "ptx", "cubin", "opencl_c", "hsaco", ... */
  const char* target; /* device type name it is for: "cuda", "opencl", "rocm" */
  const uint8_t* data;
  size_t size;
  /* Per-kernel metadata as JSON: {"kernels": {"<name>": {"args": ["tensor", "int32", ...],
   * "launch": ["blockIdx.x", "threadIdx.x", ...]}}}. */
  const char* metadata_json;
} KilnDeviceBlob;

/* One file a module is made of, as an exporter sees it. Borrowed. Arrays of artifacts are read
 * with the first element's struct_size as the stride (kiln_array_element). */
typedef struct KilnArtifact {
  size_t struct_size;
  const char* name; /* base file name inside a package, e.g. "lib0.so" */
  const char* role; /* "host_library", "device_blob", "bytecode", "metadata" */
  const uint8_t* data;
  size_t size;
} KilnArtifact;

/* A module a loader produced. Allocated zeroed by the host with struct_size set; the loader
 * fills it. Every pointer is owned by the loader and lives until `release(handle)`. */
typedef struct KilnLoadedModule {
  size_t struct_size;
  void* handle;
  const char* kind;       /* e.g. "kernel_library" */
  const char* entry_name; /* the default function, or NULL */
  int32_t num_functions;
  const char* const* function_names;
  /* Finds function `name`; fills `*out` (valid until release). A missing name is a
   * KILN_ERROR_NOT_FOUND error. */
  KilnError* (*get_function)(void* handle, const char* name, KilnCallable* out);
  int32_t num_blobs;
  const KilnDeviceBlob* blobs;
  int32_t num_artifacts; /* what an exporter needs to write this module again */
  const KilnArtifact* artifacts;
  void (*release)(void* handle);
} KilnLoadedModule;

/* A loader. The component's name is the file format it reads ("so", "tar", ...). */
typedef struct KilnLoader {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  void* self;
  /* Loads the module at `path` (borrowed) into `out`. */
  KilnError* (*load_file)(void* self, const char* path, KilnLoadedModule* out);
} KilnLoader;

/* What an exporter writes. Borrowed for the call. */
typedef struct KilnExportRequest {
  size_t struct_size;
  const char* module_kind;
  const char* entry_name; /* may be NULL */
  int32_t num_artifacts;
  const KilnArtifact* artifacts;
} KilnExportRequest;

/* An exporter. The component's name is the exporter's name ("tar", "ndk", "so"). */
typedef struct KilnExporter {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  void* self;
  const char* output_format; /* file extension of what it writes, e.g. "tar" or "so" */
  /* Writes `request` to `path` (borrowed). Leaves no partial file behind on error. */
  KilnError* (*export_module)(void* self, const KilnExportRequest* request, const char* path);
} KilnExporter;

/* The 1.0 layouts' sizes: the oldest a 1.x reader accepts (docs/plugin-abi.md §6.2). */
#define KILN_DEVICE_BLOB_SIZE_1_0 KILN_SIZE_THROUGH(KilnDeviceBlob, metadata_json)
#define KILN_ARTIFACT_SIZE_1_0 KILN_SIZE_THROUGH(KilnArtifact, size)
#define KILN_LOADED_MODULE_SIZE_1_0 KILN_SIZE_THROUGH(KilnLoadedModule, release)
#define KILN_LOADER_SIZE_1_0 KILN_SIZE_THROUGH(KilnLoader, load_file)
#define KILN_EXPORT_REQUEST_SIZE_1_0 KILN_SIZE_THROUGH(KilnExportRequest, artifacts)
#define KILN_EXPORTER_SIZE_1_0 KILN_SIZE_THROUGH(KilnExporter, export_module)

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_MODULE_H_ */
