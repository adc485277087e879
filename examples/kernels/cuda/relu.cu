// SPDX-License-Identifier: Apache-2.0
// relu: out[i] = max(in[i], 0) for i < n, one thread per element (examples/kernels/relu.cc is
// the CPU version). NaN passes through, as on the CPU.
extern "C" __global__ void relu(const float* __restrict__ in, float* __restrict__ out, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = in[i];
    out[i] = x < 0.0f ? 0.0f : x;
  }
}
