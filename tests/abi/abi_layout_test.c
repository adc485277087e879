// SPDX-License-Identifier: Apache-2.0
/* ABI 1.0 layouts, pinned: every size, 1.0 minimum and field offset of the structs in
 * docs/plugin-abi.md §6.2, as C11 static assertions on the installed headers. A change to any
 * layout fails this file's compilation; tests/abi/check_layout_doc.py checks that the table in
 * the docs and this file list the same numbers. Values are for LP64 targets (x86_64, aarch64),
 * the only ones Kiln builds for. */
#include <stdio.h>

#include "kiln/c/kiln.h"

#if !defined(__LP64__)
#error "the pinned ABI 1.0 layouts are those of LP64 targets"
#endif

#define KILN_LAYOUT_SIZE(type, size) \
  _Static_assert(sizeof(type) == (size), #type " is not " #size " bytes")
#define KILN_LAYOUT_MIN(type, macro, size) \
  _Static_assert((macro) == (size), #macro " is not " #size)
#define KILN_LAYOUT_OFFSET(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), #type "." #field " is not at " #offset)

KILN_LAYOUT_SIZE(KilnAny, 16);
KILN_LAYOUT_OFFSET(KilnAny, type_code, 0);
KILN_LAYOUT_OFFSET(KilnAny, flags, 4);
KILN_LAYOUT_OFFSET(KilnAny, value, 8);

KILN_LAYOUT_SIZE(KilnByteArray, 16);
KILN_LAYOUT_OFFSET(KilnByteArray, data, 0);
KILN_LAYOUT_OFFSET(KilnByteArray, size, 8);

KILN_LAYOUT_SIZE(KilnShape, 16);
KILN_LAYOUT_OFFSET(KilnShape, dims, 0);
KILN_LAYOUT_OFFSET(KilnShape, ndim, 8);

KILN_LAYOUT_SIZE(KilnCallable, 16);
KILN_LAYOUT_OFFSET(KilnCallable, call, 0);
KILN_LAYOUT_OFFSET(KilnCallable, self, 8);

KILN_LAYOUT_SIZE(KilnExtension, 24);
KILN_LAYOUT_MIN(KilnExtension, KILN_EXTENSION_SIZE_1_0, 24);
KILN_LAYOUT_OFFSET(KilnExtension, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnExtension, type, 8);
KILN_LAYOUT_OFFSET(KilnExtension, reserved, 12);
KILN_LAYOUT_OFFSET(KilnExtension, next, 16);

KILN_LAYOUT_SIZE(KilnHostServices, 72);
KILN_LAYOUT_MIN(KilnHostServices, KILN_HOST_SERVICES_SIZE_1_0, 72);
KILN_LAYOUT_OFFSET(KilnHostServices, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnHostServices, next, 8);
KILN_LAYOUT_OFFSET(KilnHostServices, host_ctx, 16);
KILN_LAYOUT_OFFSET(KilnHostServices, error_new, 24);
KILN_LAYOUT_OFFSET(KilnHostServices, error_code, 32);
KILN_LAYOUT_OFFSET(KilnHostServices, error_message, 40);
KILN_LAYOUT_OFFSET(KilnHostServices, error_free, 48);
KILN_LAYOUT_OFFSET(KilnHostServices, log, 56);
KILN_LAYOUT_OFFSET(KilnHostServices, log_enabled, 64);

KILN_LAYOUT_SIZE(KilnNegotiateIn, 40);
KILN_LAYOUT_MIN(KilnNegotiateIn, KILN_NEGOTIATE_IN_SIZE_1_0, 40);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, next, 8);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, abi_major, 16);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, abi_minor, 18);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, abi_min_minor, 20);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, reserved, 22);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, host, 24);
KILN_LAYOUT_OFFSET(KilnNegotiateIn, options_json, 32);

KILN_LAYOUT_SIZE(KilnPluginInfo, 72);
KILN_LAYOUT_MIN(KilnPluginInfo, KILN_PLUGIN_INFO_SIZE_1_0, 72);
KILN_LAYOUT_OFFSET(KilnPluginInfo, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnPluginInfo, next, 8);
KILN_LAYOUT_OFFSET(KilnPluginInfo, abi_major, 16);
KILN_LAYOUT_OFFSET(KilnPluginInfo, abi_minor, 18);
KILN_LAYOUT_OFFSET(KilnPluginInfo, reserved, 20);
KILN_LAYOUT_OFFSET(KilnPluginInfo, name, 24);
KILN_LAYOUT_OFFSET(KilnPluginInfo, version, 32);
KILN_LAYOUT_OFFSET(KilnPluginInfo, num_components, 40);
KILN_LAYOUT_OFFSET(KilnPluginInfo, components, 48);
KILN_LAYOUT_OFFSET(KilnPluginInfo, plugin_state, 56);
KILN_LAYOUT_OFFSET(KilnPluginInfo, shutdown, 64);

KILN_LAYOUT_SIZE(KilnComponent, 32);
KILN_LAYOUT_MIN(KilnComponent, KILN_COMPONENT_SIZE_1_0, 32);
KILN_LAYOUT_OFFSET(KilnComponent, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnComponent, kind, 8);
KILN_LAYOUT_OFFSET(KilnComponent, reserved, 12);
KILN_LAYOUT_OFFSET(KilnComponent, name, 16);
KILN_LAYOUT_OFFSET(KilnComponent, table, 24);

KILN_LAYOUT_SIZE(KilnDeviceBackend, 184);
KILN_LAYOUT_MIN(KilnDeviceBackend, KILN_DEVICE_BACKEND_SIZE_1_0, 184);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, next, 8);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, self, 16);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, dl_device_type, 24);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, reserved, 28);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, device_count, 32);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, device_attributes, 40);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, alloc, 48);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, free, 56);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, copy_to_device, 64);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, copy_to_host, 72);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, copy_on_device, 80);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, synchronize, 88);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, stream_create, 96);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, stream_destroy, 104);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, timer_create, 112);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, timer_start, 120);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, timer_stop, 128);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, timer_elapsed_ns, 136);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, timer_destroy, 144);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, module_load, 152);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, module_get_kernel, 160);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, module_unload, 168);
KILN_LAYOUT_OFFSET(KilnDeviceBackend, launch, 176);

KILN_LAYOUT_SIZE(KilnLoader, 32);
KILN_LAYOUT_MIN(KilnLoader, KILN_LOADER_SIZE_1_0, 32);
KILN_LAYOUT_OFFSET(KilnLoader, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnLoader, next, 8);
KILN_LAYOUT_OFFSET(KilnLoader, self, 16);
KILN_LAYOUT_OFFSET(KilnLoader, load_file, 24);

KILN_LAYOUT_SIZE(KilnExporter, 40);
KILN_LAYOUT_MIN(KilnExporter, KILN_EXPORTER_SIZE_1_0, 40);
KILN_LAYOUT_OFFSET(KilnExporter, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnExporter, next, 8);
KILN_LAYOUT_OFFSET(KilnExporter, self, 16);
KILN_LAYOUT_OFFSET(KilnExporter, output_format, 24);
KILN_LAYOUT_OFFSET(KilnExporter, export_module, 32);

KILN_LAYOUT_SIZE(KilnMetricCollector, 56);
KILN_LAYOUT_MIN(KilnMetricCollector, KILN_METRIC_COLLECTOR_SIZE_1_0, 56);
KILN_LAYOUT_OFFSET(KilnMetricCollector, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnMetricCollector, next, 8);
KILN_LAYOUT_OFFSET(KilnMetricCollector, self, 16);
KILN_LAYOUT_OFFSET(KilnMetricCollector, init, 24);
KILN_LAYOUT_OFFSET(KilnMetricCollector, start, 32);
KILN_LAYOUT_OFFSET(KilnMetricCollector, stop, 40);
KILN_LAYOUT_OFFSET(KilnMetricCollector, teardown, 48);

KILN_LAYOUT_SIZE(KilnMetric, 48);
KILN_LAYOUT_MIN(KilnMetric, KILN_METRIC_SIZE_1_0, 48);
KILN_LAYOUT_OFFSET(KilnMetric, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnMetric, name, 8);
KILN_LAYOUT_OFFSET(KilnMetric, kind, 16);
KILN_LAYOUT_OFFSET(KilnMetric, reserved, 20);
KILN_LAYOUT_OFFSET(KilnMetric, count, 24);
KILN_LAYOUT_OFFSET(KilnMetric, value, 32);
KILN_LAYOUT_OFFSET(KilnMetric, str, 40);

KILN_LAYOUT_SIZE(KilnLoadedModule, 96);
KILN_LAYOUT_MIN(KilnLoadedModule, KILN_LOADED_MODULE_SIZE_1_0, 96);
KILN_LAYOUT_OFFSET(KilnLoadedModule, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnLoadedModule, handle, 8);
KILN_LAYOUT_OFFSET(KilnLoadedModule, kind, 16);
KILN_LAYOUT_OFFSET(KilnLoadedModule, entry_name, 24);
KILN_LAYOUT_OFFSET(KilnLoadedModule, num_functions, 32);
KILN_LAYOUT_OFFSET(KilnLoadedModule, function_names, 40);
KILN_LAYOUT_OFFSET(KilnLoadedModule, get_function, 48);
KILN_LAYOUT_OFFSET(KilnLoadedModule, num_blobs, 56);
KILN_LAYOUT_OFFSET(KilnLoadedModule, blobs, 64);
KILN_LAYOUT_OFFSET(KilnLoadedModule, num_artifacts, 72);
KILN_LAYOUT_OFFSET(KilnLoadedModule, artifacts, 80);
KILN_LAYOUT_OFFSET(KilnLoadedModule, release, 88);

KILN_LAYOUT_SIZE(KilnExportRequest, 40);
KILN_LAYOUT_MIN(KilnExportRequest, KILN_EXPORT_REQUEST_SIZE_1_0, 40);
KILN_LAYOUT_OFFSET(KilnExportRequest, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnExportRequest, module_kind, 8);
KILN_LAYOUT_OFFSET(KilnExportRequest, entry_name, 16);
KILN_LAYOUT_OFFSET(KilnExportRequest, num_artifacts, 24);
KILN_LAYOUT_OFFSET(KilnExportRequest, artifacts, 32);

KILN_LAYOUT_SIZE(KilnKernelEnv, 56);
KILN_LAYOUT_MIN(KilnKernelEnv, KILN_KERNEL_ENV_SIZE_1_0, 52);
KILN_LAYOUT_OFFSET(KilnKernelEnv, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnKernelEnv, ctx, 8);
KILN_LAYOUT_OFFSET(KilnKernelEnv, error_new, 16);
KILN_LAYOUT_OFFSET(KilnKernelEnv, error_free, 24);
KILN_LAYOUT_OFFSET(KilnKernelEnv, log, 32);
KILN_LAYOUT_OFFSET(KilnKernelEnv, parallel_for, 40);
KILN_LAYOUT_OFFSET(KilnKernelEnv, num_threads, 48);

KILN_LAYOUT_SIZE(KilnKernelFunction, 32);
KILN_LAYOUT_OFFSET(KilnKernelFunction, name, 0);
KILN_LAYOUT_OFFSET(KilnKernelFunction, fn, 8);
KILN_LAYOUT_OFFSET(KilnKernelFunction, self, 16);
KILN_LAYOUT_OFFSET(KilnKernelFunction, signature, 24);

KILN_LAYOUT_SIZE(KilnKernelLibrary, 64);
KILN_LAYOUT_MIN(KilnKernelLibrary, KILN_KERNEL_LIBRARY_SIZE_1_0, 64);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, abi_major, 8);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, abi_minor, 10);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, reserved, 12);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, name, 16);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, entry_name, 24);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, num_functions, 32);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, functions, 40);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, num_blobs, 48);
KILN_LAYOUT_OFFSET(KilnKernelLibrary, blobs, 56);

KILN_LAYOUT_SIZE(KilnDeviceBlob, 48);
KILN_LAYOUT_MIN(KilnDeviceBlob, KILN_DEVICE_BLOB_SIZE_1_0, 48);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, format, 8);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, target, 16);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, data, 24);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, size, 32);
KILN_LAYOUT_OFFSET(KilnDeviceBlob, metadata_json, 40);

KILN_LAYOUT_SIZE(KilnArtifact, 40);
KILN_LAYOUT_MIN(KilnArtifact, KILN_ARTIFACT_SIZE_1_0, 40);
KILN_LAYOUT_OFFSET(KilnArtifact, struct_size, 0);
KILN_LAYOUT_OFFSET(KilnArtifact, name, 8);
KILN_LAYOUT_OFFSET(KilnArtifact, role, 16);
KILN_LAYOUT_OFFSET(KilnArtifact, data, 24);
KILN_LAYOUT_OFFSET(KilnArtifact, size, 32);

/* Run by ctest so that the suite lists it; the checks above ran when it compiled. */
int main(void) {
  puts("ABI 1.0 layouts: every size, minimum and offset matches docs/plugin-abi.md");
  return 0;
}
