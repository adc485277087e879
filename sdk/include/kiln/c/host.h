// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: services the host offers to every plugin. */
#ifndef KILN_C_HOST_H_
#define KILN_C_HOST_H_

#include "kiln/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Table of host services, passed to the plugin in KilnNegotiateIn. Owned by the host; valid
 * from negotiation until the plugin's `shutdown` returns. Fields appended in later minors are
 * visible only when `struct_size` covers them. */
typedef struct KilnHostServices {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  void* host_ctx;            /* passed back to every service below */

  /* Creates an error with `code` (a KilnErrorCode) and a copy of `message` (UTF-8, may be
   * NULL). Never returns NULL. The result is owned by whoever holds it (see abi.h). */
  KilnError* (*error_new)(void* host_ctx, int32_t code, const char* message);
  /* Reads an error's code and message; the message is owned by the error. */
  int32_t (*error_code)(void* host_ctx, const KilnError* error);
  const char* (*error_message)(void* host_ctx, const KilnError* error);
  /* Frees an error the plugin received and does not pass on. */
  void (*error_free)(void* host_ctx, KilnError* error);

  /* Writes one log line on the host's logger, attributed to `plugin_name` (borrowed). */
  void (*log)(void* host_ctx, int32_t level, const char* plugin_name, const char* message);
  /* True when a line of `level` would be printed; lets plugins skip formatting. */
  int32_t (*log_enabled)(void* host_ctx, int32_t level);
} KilnHostServices;

/* The 1.0 layout's size: the oldest a 1.x plugin accepts (docs/plugin-abi.md §6.2). */
#define KILN_HOST_SERVICES_SIZE_1_0 KILN_SIZE_THROUGH(KilnHostServices, log_enabled)

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_HOST_H_ */
