// SPDX-License-Identifier: Apache-2.0
// empty: a kernel that does (almost) nothing, for measuring launch overhead
// (bench/opencl_bench.cc). The branch is never taken for n >= 0, but keeps both arguments.
__kernel void empty(__global float* out, const int n) {
  if (n < 0) out[0] = (float)n;
}
