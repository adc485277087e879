// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER (being written): sampling builtins.
#include "builtin_table.h"

namespace kiln::llm::detail {
BuiltinList sampling_builtins() { return {}; }
}  // namespace kiln::llm::detail
