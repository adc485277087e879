// SPDX-License-Identifier: Apache-2.0
// Stands in for the CUDA toolkit's <cuda.h> on the include path of the cuda plugin, its fake
// driver and its tests, which build without the toolkit: they use Kiln's declarations instead.
#error \
    "the cuda plugin builds without the CUDA toolkit: include \"cuda_api_subset.h\", not <cuda.h> (plugins/cuda/cuda_api_subset.h says how to declare more of the driver API)"
