// SPDX-License-Identifier: Apache-2.0
/* An invented "ABI 1.1" view of the headers, for the compatibility tests only: each struct is
 * its 1.0 layout with one field appended, as docs/plugin-abi.md §15.1 allows a minor to do.
 * Embedding the 1.0 struct keeps every 1.0 offset, because none of them has tail padding that
 * the appended field could fall into (all end on pointer-sized fields; tests/abi pins that).
 * Both the fake 1.1 plugin (plugin_1_1.c) and the fake 1.1 host (abi_compat_test.cc) use it. */
#ifndef KILN_TESTS_ABI_1_1_H_
#define KILN_TESTS_ABI_1_1_H_

#include "kiln/c/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The offer with the host's name appended. */
typedef struct KilnNegotiateIn_1_1 {
  KilnNegotiateIn base;
  const char* host_label;
} KilnNegotiateIn_1_1;

/* Host services with one more service. */
typedef struct KilnHostServices_1_1 {
  KilnHostServices base;
  uint64_t (*host_clock_ns)(void* host_ctx);
} KilnHostServices_1_1;

/* Components with flags appended: an array element that grew (read with its stride). */
typedef struct KilnComponent_1_1 {
  KilnComponent base;
  uint64_t flags;
} KilnComponent_1_1;

/* The device table with one slot appended. */
typedef struct KilnDeviceBackend_1_1 {
  KilnDeviceBackend base;
  KilnError* (*device_reset)(void* self, int32_t device_id);
} KilnDeviceBackend_1_1;

typedef struct KilnMetricCollector_1_1 {
  KilnMetricCollector base;
  const char* (*describe)(void* self);
} KilnMetricCollector_1_1;

/* A metric with a unit appended, and a metric kind 1.0 does not have. */
typedef struct KilnMetric_1_1 {
  KilnMetric base;
  const char* unit;
} KilnMetric_1_1;
#define FAKE_METRIC_HISTOGRAM_1_1 6

typedef struct KilnKernelLibrary_1_1 {
  KilnKernelLibrary base;
  int64_t min_host_threads;
} KilnKernelLibrary_1_1;

/* A vendor extension a 1.1 host may chain into the offer's `next`. */
#define FAKE_EXTENSION_TYPE (KILN_EXTENSION_TYPE_VENDOR_FIRST + 1)
#define FAKE_EXTENSION_MAGIC 0x4B494C4EU
typedef struct FakeVendorExtension {
  KilnExtension header;
  uint32_t magic;
  uint32_t reserved;
} FakeVendorExtension;

/* The device type code of a fake plugin (the vendor range is 64..127); one per variant. */
#ifndef FAKE_DEVICE_CODE
#define FAKE_DEVICE_CODE 121
#endif

#ifdef __cplusplus
}
#endif

#endif /* KILN_TESTS_ABI_1_1_H_ */
