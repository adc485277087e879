// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: the entry point and version negotiation.
 *
 * A plugin library exports exactly one symbol, KILN_PLUGIN_ENTRY_SYMBOL, of type
 * KilnPluginEntryFn. The host calls it once, right after dlopen, with its version range and
 * services; the plugin fills KilnPluginInfo with its own version and components. */
#ifndef KILN_C_PLUGIN_H_
#define KILN_C_PLUGIN_H_

#include "kiln/c/abi.h"
#include "kiln/c/host.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_ENTRY_SYMBOL "kiln_plugin_negotiate"

/* What the host offers. Owned by the host, valid during the entry call only, except `host`,
 * which lives until `shutdown` returns. */
typedef struct KilnNegotiateIn {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  uint16_t abi_major;        /* the host's major version (1) */
  uint16_t abi_minor;        /* the newest minor the host understands */
  uint16_t abi_min_minor;    /* the oldest minor the host still loads (0) */
  uint16_t reserved;
  const KilnHostServices* host;
  /* The plugin's options from the plugin set, as a JSON object text ("{}" when none). */
  const char* options_json;
} KilnNegotiateIn;

/* Kinds of component a plugin can provide. */
typedef enum KilnComponentKind {
  KILN_COMPONENT_DEVICE = 1,   /* table: KilnDeviceBackend (device.h) */
  KILN_COMPONENT_LOADER = 2,   /* table: KilnLoader (module.h) */
  KILN_COMPONENT_EXPORTER = 3, /* table: KilnExporter (module.h) */
  KILN_COMPONENT_COLLECTOR = 4 /* table: KilnMetricCollector (collector.h) */
} KilnComponentKind;

/* One component. `name` and `table` are owned by the plugin and live until `shutdown`.
 * `components` arrays are read with the first element's struct_size as the stride
 * (kiln_array_element), so later minors may append fields. */
typedef struct KilnComponent {
  size_t struct_size;
  int32_t kind; /* a KilnComponentKind */
  int32_t reserved;
  const char* name; /* device type name, file format or collector name */
  const void* table;
} KilnComponent;

/* What the plugin answers. Allocated by the host (zeroed, struct_size set); the plugin fills
 * it. Every pointer is owned by the plugin and lives until `shutdown` returns. */
typedef struct KilnPluginInfo {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  uint16_t abi_major;        /* the version the plugin was built against */
  uint16_t abi_minor;
  uint32_t reserved;
  const char* name;    /* must equal the manifest's name */
  const char* version; /* the plugin's own semver, e.g. "1.2.0" */
  int32_t num_components;
  const KilnComponent* components;
  void* plugin_state; /* passed to shutdown */
  /* Releases everything the plugin made. Called once, after every object made through the
   * plugin is gone. May be NULL. */
  void (*shutdown)(void* plugin_state);
} KilnPluginInfo;

/* The entry point. Returns NULL and fills `out` on success. A plugin that cannot serve the
 * host's range returns a KILN_ERROR_ABI error naming both versions. */
typedef KilnError* (*KilnPluginEntryFn)(const KilnNegotiateIn* in, KilnPluginInfo* out);

/* Oldest struct sizes a 1.x reader accepts: the 1.0 layouts, up to their last 1.0 field, so
 * the values stay fixed when later minors append fields (docs/plugin-abi.md §6.2). */
#define KILN_NEGOTIATE_IN_SIZE_1_0 KILN_SIZE_THROUGH(KilnNegotiateIn, options_json)
#define KILN_PLUGIN_INFO_SIZE_1_0 KILN_SIZE_THROUGH(KilnPluginInfo, shutdown)
#define KILN_COMPONENT_SIZE_1_0 KILN_SIZE_THROUGH(KilnComponent, table)

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_PLUGIN_H_ */
