// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: metric collectors (KILN_COMPONENT_COLLECTOR). */
#ifndef KILN_C_COLLECTOR_H_
#define KILN_C_COLLECTOR_H_

#include "kiln/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of metric value, matching the profiling report's Count / Duration / Percent / Ratio
 * / String. */
typedef enum KilnMetricKind {
  KILN_METRIC_COUNT = 1,    /* `count` */
  KILN_METRIC_DURATION = 2, /* `value`, in microseconds */
  KILN_METRIC_PERCENT = 3,  /* `value`, 0..100 */
  KILN_METRIC_RATIO = 4,    /* `value` */
  KILN_METRIC_STRING = 5    /* `str` */
} KilnMetricKind;

/* One metric. Borrowed for the duration of the sink call. The host reads fields past
 * `struct_size` as zero and skips (with a warning naming the collector) a metric whose kind it
 * does not know. */
typedef struct KilnMetric {
  size_t struct_size;
  const char* name;
  int32_t kind; /* a KilnMetricKind */
  int32_t reserved;
  int64_t count;
  double value;
  const char* str;
} KilnMetric;

/* Receives metrics from `stop`. */
typedef void (*KilnMetricSink)(void* sink_ctx, const KilnMetric* metric);

/* A metric collector. The component's name is the collector's name ("perf", "cupti", ...). */
typedef struct KilnMetricCollector {
  size_t struct_size;
  const KilnExtension* next; /* extension chain (abi.h); NULL in 1.0 */
  void* self;
  /* Prepares collection on `devices` (borrowed). `*state` is owned by the plugin until
   * teardown. */
  KilnError* (*init)(void* self, const DLDevice* devices, int32_t num_devices, void** state);
  /* Starts counting on `device`. Leaves `*handle` NULL when the device is not supported. */
  KilnError* (*start)(void* self, void* state, DLDevice device, void** handle);
  /* Stops the counting `handle` began, reports each metric to `sink`, and frees `handle`. */
  KilnError* (*stop)(void* self, void* state, void* handle, KilnMetricSink sink, void* sink_ctx);
  void (*teardown)(void* self, void* state);
} KilnMetricCollector;

/* The 1.0 layouts' sizes: the oldest a 1.x reader accepts (docs/plugin-abi.md §6.2). */
#define KILN_METRIC_SIZE_1_0 KILN_SIZE_THROUGH(KilnMetric, str)
#define KILN_METRIC_COLLECTOR_SIZE_1_0 KILN_SIZE_THROUGH(KilnMetricCollector, teardown)

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_COLLECTOR_H_ */
