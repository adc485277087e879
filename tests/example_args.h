// SPDX-License-Identifier: Apache-2.0
// Arguments of the example kernels, shared by the local_run and rpc_run tests.
#ifndef KILN_TESTS_EXAMPLE_ARGS_H_
#define KILN_TESTS_EXAMPLE_ARGS_H_

#include <vector>

#include "kiln/any.h"
#include "kiln/tensor.h"

namespace kiln::test {

// vector_add(a, b, out, alpha) on n float32 elements: a[i] = i, b = 2, out = -1, alpha = 0.25,
// so that out[i] = i + 0.5 after the call.
inline std::vector<Any> vector_add_args(int64_t n) {
  Tensor a = Tensor::empty({n}, DataType::Float(32));
  Tensor b = Tensor::empty({n}, DataType::Float(32));
  Tensor out = Tensor::empty({n}, DataType::Float(32));
  for (int64_t i = 0; i < n; ++i) {
    a.host_span<float>()[i] = static_cast<float>(i);
    b.host_span<float>()[i] = 2.0f;
    out.host_span<float>()[i] = -1.0f;
  }
  return {Any(a), Any(b), Any(out), Any(0.25)};
}

}  // namespace kiln::test

#endif  // KILN_TESTS_EXAMPLE_ARGS_H_
