// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER (being written): KV cache builtins.
#include "builtin_table.h"

namespace kiln::llm::detail {
BuiltinList kv_cache_builtins() { return {}; }
}  // namespace kiln::llm::detail
