// SPDX-License-Identifier: Apache-2.0
/* The kernel calling convention of the example device "exampledev" (exampledev_plugin.cc):
 * what a kernel author for this device writes against. A vendor's real device would have its
 * own compiler and binary format; this one runs host functions, one simulated thread at a
 * time, so that the example needs nothing but a C++ compiler.
 *
 * A kernel is an exported C function
 *     void NAME(void** params, const ExampledevThread* thread);
 * `params[i]` points at argument i as the metadata declares it (docs/plugin-abi.md §10.2): a
 * tensor is a 64-bit device address (here a host pointer), a scalar its value (int32, float32,
 * ...). The kernel runs once per thread of the launch's grid x block. */
#ifndef EXAMPLEDEV_KERNEL_H_
#define EXAMPLEDEV_KERNEL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the current thread is, as CUDA's blockIdx / threadIdx / blockDim / gridDim. */
typedef struct ExampledevThread {
  uint32_t block_idx[3];
  uint32_t thread_idx[3];
  uint32_t block_dim[3];
  uint32_t grid_dim[3];
} ExampledevThread;

typedef void (*ExampledevKernel)(void** params, const ExampledevThread* thread);

#ifdef __cplusplus
}
#endif

/* Marks a kernel for export (kernel libraries are built with default visibility off). */
#define EXAMPLEDEV_KERNEL extern "C" __attribute__((visibility("default")))

#endif /* EXAMPLEDEV_KERNEL_H_ */
