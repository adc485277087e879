// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER (being written): tensor cache builtins.
#include "builtin_table.h"

namespace kiln::llm::detail {
BuiltinList tensor_cache_builtins(std::shared_ptr<const DeviceContext>) { return {}; }
}  // namespace kiln::llm::detail
