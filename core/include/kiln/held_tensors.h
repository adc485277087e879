// SPDX-License-Identifier: Apache-2.0
// HeldTensors: what an object that is not a tensor, a VM tuple, closure or storage keeps alive
// in device memory, so that a memory budget can charge it (an RPC session charges what it hands
// a client a handle to: core/src/rpc/session_server.cc). An LLM's KV cache keeps its pages so.
#ifndef KILN_HELD_TENSORS_H_
#define KILN_HELD_TENSORS_H_

#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// Implemented beside kiln::Object by objects that own tensors they do not expose as values.
class HeldTensors {
 public:
  virtual ~HeldTensors() = default;
  // The tensors whose memory the object keeps alive; views of one allocation are counted once.
  virtual std::vector<Tensor> held_tensors() const = 0;
};

}  // namespace kiln

#endif  // KILN_HELD_TENSORS_H_
