// SPDX-License-Identifier: Apache-2.0
// matmul: c = a x b for row-major float32 matrices a [m, k], b [k, n], c [m, n], tiled through
// local memory (examples/kernels/matmul.cc is the CPU version). Each TILE x TILE work-group
// computes one TILE x TILE tile of c; any m, n, k >= 0 works (edges are padded with zeros).
// Launch: blockIdx.x = ceil(n / TILE), blockIdx.y = ceil(m / TILE), threadIdx.x =
// threadIdx.y = TILE (the metadata's build options set TILE to 16).
#ifndef TILE
#define TILE 16
#endif

// The k-sum runs in order with separate roundings, as in the CPU kernel.
#pragma OPENCL FP_CONTRACT OFF

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void matmul(__global const float* a,
                                                                          __global const float* b,
                                                                          __global float* c,
                                                                          const int m, const int n,
                                                                          const int k) {
  __local float a_tile[TILE][TILE];
  __local float b_tile[TILE][TILE];
  const int tx = (int)get_local_id(0);
  const int ty = (int)get_local_id(1);
  const int col = (int)get_group_id(0) * TILE + tx;
  const int row = (int)get_group_id(1) * TILE + ty;
  float acc = 0.0f;
  for (int t = 0; t < k; t += TILE) {
    a_tile[ty][tx] = row < m && t + tx < k ? a[(size_t)row * k + t + tx] : 0.0f;
    b_tile[ty][tx] = t + ty < k && col < n ? b[(size_t)(t + ty) * n + col] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int steps = k - t < TILE ? k - t : TILE;
    for (int i = 0; i < steps; ++i) acc += a_tile[ty][i] * b_tile[i][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row < m && col < n) c[(size_t)row * n + col] = acc;
}
