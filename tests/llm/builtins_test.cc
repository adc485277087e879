// SPDX-License-Identifier: Apache-2.0
// register_builtins() registers every name builtin_names() lists, under TVM's names.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/function.h"
#include "kiln/llm/builtins.h"
#include "kiln/runtime.h"

namespace kiln::llm {
namespace {

TEST(LlmBuiltins, RegistersEveryListedName) {
  Runtime runtime;
  register_builtins(runtime);
  const std::vector<std::string> names = builtin_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& name : names) {
    EXPECT_TRUE(registry::get(name).has_value()) << name;
    EXPECT_EQ(name.rfind("vm.builtin.", 0), 0u) << name;
  }
}

}  // namespace
}  // namespace kiln::llm
