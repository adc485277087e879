// SPDX-License-Identifier: Apache-2.0
// matmul: c = a x b for row-major float32 matrices a [m, k], b [k, n], c [m, n]
// (examples/kernels/matmul.cc is the CPU version). Tiled: each block of T x T threads
// (T = blockDim.x = blockDim.y) computes a T x T tile of c, staging T x T tiles of a and b in
// dynamic shared memory, which must hold 2 * T * T floats (dynamic_shared_bytes). Launch with
// grid (ceil(n / T), ceil(m / T)). Products are summed in order of k without fused
// multiply-add, as the CPU sums them, so both give the same bits. A launch whose block is not
// square or whose shared memory is too small writes nothing.
extern "C" __global__ void matmul(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, int m, int n, int k) {
  extern __shared__ float tiles[];
  const unsigned t = blockDim.x;
  unsigned shared_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(shared_bytes));
  if (blockDim.y != t || shared_bytes < 2u * t * t * sizeof(float)) return;
  float* a_tile = tiles;
  float* b_tile = tiles + t * t;
  const unsigned tx = threadIdx.x;
  const unsigned ty = threadIdx.y;
  const int row = static_cast<int>(blockIdx.y * t + ty);
  const int col = static_cast<int>(blockIdx.x * t + tx);
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += static_cast<int>(t)) {
    const int ka = k0 + static_cast<int>(tx);
    const int kb = k0 + static_cast<int>(ty);
    a_tile[ty * t + tx] = row < m && ka < k ? a[static_cast<long long>(row) * k + ka] : 0.0f;
    b_tile[ty * t + tx] = kb < k && col < n ? b[static_cast<long long>(kb) * n + col] : 0.0f;
    __syncthreads();
    const int steps = k - k0 < static_cast<int>(t) ? k - k0 : static_cast<int>(t);
    for (int kk = 0; kk < steps; ++kk) {
      acc = __fadd_rn(acc, __fmul_rn(a_tile[ty * t + kk], b_tile[kk * t + tx]));
    }
    __syncthreads();
  }
  if (row < m && col < n) c[static_cast<long long>(row) * n + col] = acc;
}
