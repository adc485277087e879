// SPDX-License-Identifier: Apache-2.0
// The LLM runtime's VM builtins (docs/llm.md): what a model library compiled the MLC way calls
// through the Relax VM, under TVM 0.27's names, so such a library runs in Kiln unchanged.
#ifndef KILN_LLM_BUILTINS_H_
#define KILN_LLM_BUILTINS_H_

#include <string>
#include <vector>

#include "kiln/device_context.h"

namespace kiln::llm {

// Registers every LLM builtin as a global function (kiln::registry), replacing earlier
// registrations of the same names: the paged KV cache and KV state
// (vm.builtin.paged_attention_kv_cache_create, vm.builtin.kv_state_*,
// vm.builtin.attention_kv_cache_*), the tensor cache (vm.builtin.tensor_cache.*,
// vm.builtin.param_array_from_cache*) and sampling (vm.builtin.sample_top_p_from_*, ...).
// The builtins that place tensors on a device named by type and id
// (vm.builtin.tensor_cache.load) allocate through `context`, which they keep alive. Safe to call
// again (with another context: later loads use it). Thread-safe.
void register_builtins(const DeviceContext& context);

// The names register_builtins() registers, sorted (for `kiln llm builtins` and the tests).
std::vector<std::string> builtin_names();

}  // namespace kiln::llm

#endif  // KILN_LLM_BUILTINS_H_
