// SPDX-License-Identifier: Apache-2.0
// What each part of the LLM runtime contributes to register_builtins() (builtins.cc): a list of
// named functions, one list per concept file.
#ifndef KILN_LLM_BUILTIN_TABLE_H_
#define KILN_LLM_BUILTIN_TABLE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/device_context.h"
#include "kiln/function.h"

namespace kiln::llm::detail {

using BuiltinList = std::vector<std::pair<std::string, Function>>;

// The paged KV cache and KV state builtins (kv_cache_builtins.cc).
BuiltinList kv_cache_builtins();
// The tensor cache builtins (tensor_cache_builtins.cc); loads allocate through `context`, which
// they keep (null: only the names are wanted, nothing is called).
BuiltinList tensor_cache_builtins(std::shared_ptr<const DeviceContext> context);
// The sampling and logit-processing builtins (sampling.cc).
BuiltinList sampling_builtins();

}  // namespace kiln::llm::detail

#endif  // KILN_LLM_BUILTIN_TABLE_H_
