// SPDX-License-Identifier: Apache-2.0
// relu: out[i] = max(in[i], 0) for i < n, one work-item per element; NaN stays NaN (as in
// examples/kernels/relu.cc). Launch: blockIdx.x = ceil(n / block), threadIdx.x = block.
__kernel void relu(__global const float* in, __global float* out, const int n) {
  const size_t i = get_global_id(0);
  if (n > 0 && i < (size_t)n) {
    const float x = in[i];
    out[i] = x < 0.0f ? 0.0f : x;
  }
}
